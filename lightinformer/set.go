package lightinformer

import (
	"context"
	"sync"
)

// Runner is what a Set runs: an Informer, or something that serves with one.
type Runner interface {
	// Run runs until ctx is done.
	Run(ctx context.Context)
}

// Set runs informers by key, each from the first time it is needed until it is
// stopped: generated kinds come and go by the thousand, and each informer goes with
// its kind rather than with the process. Every informer runs under the context of Run,
// and stops at the latest when it ends. The zero value is ready to use; Run it once.
type Set[K comparable, V Runner] struct {
	mu      sync.Mutex
	started chan struct{} // closed by Run
	base    context.Context
	running map[K]*runningEntry[V]
	wg      sync.WaitGroup
}

// runningEntry is one informer that runs, and how to stop it.
type runningEntry[V Runner] struct {
	value  V
	cancel context.CancelFunc
	done   chan struct{} // closed when its Run returns
}

// init makes the zero value ready; s.mu is held.
func (s *Set[K, V]) init() {
	if s.started == nil {
		s.started = make(chan struct{})
		s.running = map[K]*runningEntry[V]{}
	}
}

// Run runs the informers under ctx until it is done, then stops them all and waits
// until every one has.
func (s *Set[K, V]) Run(ctx context.Context) {
	s.mu.Lock()
	s.init()
	s.base = ctx
	close(s.started)
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	for key, r := range s.running {
		r.cancel()
		delete(s.running, key)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Ensure runs the informer of key unless it runs already, and returns the one that
// runs. build makes it, with s's lock held: it must not call s. Ensure waits for Run
// to start, as long as ctx allows, and fails once Run has ended; an error of build
// starts nothing.
func (s *Set[K, V]) Ensure(ctx context.Context, key K, build func() (V, error)) (V, error) {
	var none V
	s.mu.Lock()
	s.init()
	started := s.started
	s.mu.Unlock()
	select {
	case <-started:
	case <-ctx.Done():
		return none, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.base.Err(); err != nil {
		return none, err
	}
	if r, ok := s.running[key]; ok {
		return r.value, nil
	}
	v, err := build()
	if err != nil {
		return none, err
	}
	runCtx, cancel := context.WithCancel(s.base)
	r := &runningEntry[V]{value: v, cancel: cancel, done: make(chan struct{})}
	s.running[key] = r
	s.wg.Go(func() {
		defer close(r.done)
		v.Run(runCtx)
	})
	return v, nil
}

// Get is the informer of key, if it runs.
func (s *Set[K, V]) Get(key K) (V, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.running[key]; ok {
		return r.value, true
	}
	var none V
	return none, false
}

// Stop stops the informer of key and waits until its Run has returned, so that
// nothing it tells of comes after; it reports whether one ran.
func (s *Set[K, V]) Stop(key K) bool {
	s.mu.Lock()
	r, ok := s.running[key]
	delete(s.running, key)
	s.mu.Unlock()
	if ok {
		r.cancel()
		<-r.done
	}
	return ok
}

// All are the informers that run, by key: a copy.
func (s *Set[K, V]) All() map[K]V {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[K]V, len(s.running))
	for key, r := range s.running {
		out[key] = r.value
	}
	return out
}
