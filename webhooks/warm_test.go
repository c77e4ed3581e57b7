package webhooks

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Work runs to its end before run returns, on a warm goroutine while one is free and on
// the caller's when all are busy: nothing waits for a warm goroutine.
func TestWarmGoroutinesNeverMakeWorkWait(t *testing.T) {
	w := newWarmGoroutines(2)
	release := make(chan struct{})
	var busy, done sync.WaitGroup
	for range 2 {
		busy.Add(1)
		done.Go(func() {
			w.run(func() {
				busy.Done()
				<-release
			})
		})
	}
	busy.Wait() // both warm goroutines hold work that waits

	ran := false
	w.run(func() { ran = true }) // would block forever if it waited for one
	assert.True(t, ran)
	assert.Equal(t, int32(2), w.started.Load(), "no third goroutine was started")

	close(release)
	done.Wait()
	for i := range 100 { // the two are free again and take the work
		var got int
		w.run(func() { got = i })
		require.Equal(t, i, got)
	}
	assert.Equal(t, int32(2), w.started.Load())
}

// A panic in the work reaches the caller, where net/http recovers it, and the warm
// goroutine survives it.
func TestWarmGoroutinesRaiseAPanicOnTheCaller(t *testing.T) {
	w := newWarmGoroutines(1)
	assert.PanicsWithValue(t, "broken review", func() { w.run(func() { panic("broken review") }) })
	ran := false
	w.run(func() { ran = true })
	assert.True(t, ran)
	assert.Equal(t, int32(1), w.started.Load())
}
