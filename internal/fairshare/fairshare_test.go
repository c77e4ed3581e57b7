package fairshare

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestALaneHoldsItsSlotsOnly(t *testing.T) {
	l := New(2)
	a1, ok := l.TryAcquire("a")
	require.True(t, ok)
	a2, ok := l.TryAcquire("a")
	require.True(t, ok)
	_, ok = l.TryAcquire("a")
	assert.False(t, ok, "lane a is full")
	assert.Equal(t, 2, l.Busy("a"))

	b, ok := l.TryAcquire("b")
	assert.True(t, ok, "lane b starts at once while a is full")
	b()

	a1()
	a1() // a second call gives nothing back twice
	assert.Equal(t, 1, l.Busy("a"))
	a3, ok := l.TryAcquire("a")
	assert.True(t, ok, "a slot given back is taken again")
	a2()
	a3()
	assert.Zero(t, l.Busy("a"))
	l.mu.Lock()
	assert.Empty(t, l.m, "lanes nobody uses are dropped")
	l.mu.Unlock()
}

func TestAcquireWaitsUntilASlotIsFreeOrTheWaitEnds(t *testing.T) {
	l := New(1)
	held, ok := l.TryAcquire("a")
	require.True(t, ok)

	_, ok = l.Acquire(context.Background(), "a", 20*time.Millisecond)
	assert.False(t, ok, "no slot freed within the wait")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, ok = l.Acquire(ctx, "a", time.Hour)
	assert.False(t, ok, "a cancelled context ends the wait")

	got := make(chan bool)
	go func() {
		release, ok := l.Acquire(context.Background(), "a", time.Minute)
		if ok {
			release()
		}
		got <- ok
	}()
	held()
	assert.True(t, <-got, "the waiter takes the slot given back")
	l.mu.Lock()
	assert.Empty(t, l.m)
	l.mu.Unlock()
}

func TestLanesUnderContention(t *testing.T) {
	l := New(3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	inside, most := 0, 0
	for range 50 {
		wg.Go(func() {
			release, ok := l.Acquire(context.Background(), "a", time.Minute)
			if !ok {
				t.Error("no slot within a minute")
				return
			}
			mu.Lock()
			inside++
			most = max(most, inside)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inside--
			mu.Unlock()
			release()
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most, 3)
	assert.Zero(t, l.Busy("a"))
}
