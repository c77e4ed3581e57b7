package lightinformer

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// tracked is an informer that tells when its Run has returned.
type tracked struct {
	*Informer
	ended atomic.Bool
}

func (t *tracked) Run(ctx context.Context) {
	t.Informer.Run(ctx)
	t.ended.Store(true)
}

// TestASetRunsEachKeyOnceAndLeavesNothing: a Set starts one informer per key, the
// first time it is ensured, once it runs; Stop returns when that informer has stopped;
// the end of Run stops the others, after which nothing starts, and no goroutine is left.
func TestASetRunsEachKeyOnceAndLeavesNothing(t *testing.T) {
	cp := controlplane.Start(t)
	md, httpClient := connectedMetadata(t, cp)
	before := settledGoroutines()

	var set Set[string, *tracked]
	build := func(key string) func() (*tracked, error) {
		return func() (*tracked, error) {
			return &tracked{Informer: NewMetadata(md, Options{Resource: configMaps, LabelSelector: "key=" + key})}, nil
		}
	}
	gone, cancelGone := context.WithCancel(context.Background())
	cancelGone()
	_, err := set.Ensure(gone, "a", build("a"))
	require.ErrorIs(t, err, context.Canceled, "Ensure waits for Run, as long as its context allows")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan struct{})
	go func() {
		set.Run(ctx)
		close(ran)
	}()
	informers := map[string]*tracked{}
	for _, key := range []string{"a", "b", "c"} {
		informers[key], err = set.Ensure(ctx, key, build(key))
		require.NoError(t, err)
	}
	again, err := set.Ensure(ctx, "a", func() (*tracked, error) {
		t.Error("built again")
		return nil, errors.New("built again")
	})
	require.NoError(t, err)
	assert.Same(t, informers["a"], again, "one informer per key")
	_, err = set.Ensure(ctx, "d", func() (*tracked, error) { return nil, errors.New("cannot") })
	require.Error(t, err)
	_, ok := set.Get("d")
	assert.False(t, ok, "a failed build starts nothing")
	require.Eventually(t, func() bool {
		for _, informer := range informers {
			if !informer.HasSynced() {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)

	require.True(t, set.Stop("a"))
	assert.True(t, informers["a"].ended.Load(), "Stop waits for the informer to stop")
	assert.False(t, set.Stop("a"), "stopped once")
	_, ok = set.Get("a")
	assert.False(t, ok)
	got, ok := set.Get("b")
	assert.True(t, ok)
	assert.Same(t, informers["b"], got)
	assert.Equal(t, map[string]*tracked{"b": informers["b"], "c": informers["c"]}, set.All())

	cancel()
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	assert.True(t, informers["b"].ended.Load() && informers["c"].ended.Load(), "Run waits for every informer to stop")
	assert.Empty(t, set.All())
	_, err = set.Ensure(context.Background(), "a", build("a"))
	assert.Error(t, err, "nothing starts once Run has ended")
	assert.Empty(t, set.All())

	// Connections to the API server come and go with their streams; close the idle ones.
	require.Eventually(t, func() bool {
		utilnet.CloseIdleConnectionsFor(httpClient.Transport)
		return runtime.NumGoroutine() <= before
	}, 30*time.Second, 50*time.Millisecond,
		"goroutines after the set stopped: more than %d", before)
}
