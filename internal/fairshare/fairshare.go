// Package fairshare shares work between tenants: each lane (the compositions of one
// namespace, say, or the installs on one target cluster) runs at most a fixed number
// of pieces of work at once, so that one lane that sends runaways without pause holds
// that many and delays only its own work; every other lane's work starts at once.
package fairshare

import (
	"context"
	"sync"
	"time"
)

// Lanes hand out the slots of each lane. The zero value is not usable: use New.
type Lanes struct {
	perLane int

	mu sync.Mutex
	m  map[string]*lane
}

type lane struct {
	slots chan struct{}
	users int // holders and waiters; the lane is dropped at zero
}

// New returns lanes of perLane slots each (at least one).
func New(perLane int) *Lanes {
	return &Lanes{perLane: max(perLane, 1), m: map[string]*lane{}}
}

// PerLane is the number of slots of each lane.
func (l *Lanes) PerLane() int { return l.perLane }

// Acquire takes a slot of key's lane, waiting at most wait and no longer than ctx.
// When ok, release gives the slot back; it must be called exactly once.
func (l *Lanes) Acquire(ctx context.Context, key string, wait time.Duration) (release func(), ok bool) {
	ln := l.enter(key)
	select {
	case ln.slots <- struct{}{}: // free: no timer
		return l.releaser(key, ln), true
	default:
	}
	if wait <= 0 {
		l.leave(key, ln)
		return nil, false
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case ln.slots <- struct{}{}:
		return l.releaser(key, ln), true
	case <-timer.C:
	case <-ctx.Done():
	}
	l.leave(key, ln)
	return nil, false
}

// TryAcquire takes a slot of key's lane when one is free, without waiting.
func (l *Lanes) TryAcquire(key string) (release func(), ok bool) {
	return l.Acquire(context.Background(), key, 0)
}

// Busy is the number of slots held in key's lane.
func (l *Lanes) Busy(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ln := l.m[key]; ln != nil {
		return len(ln.slots)
	}
	return 0
}

func (l *Lanes) enter(key string) *lane {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.m[key]
	if ln == nil {
		ln = &lane{slots: make(chan struct{}, l.perLane)}
		l.m[key] = ln
	}
	ln.users++
	return ln
}

func (l *Lanes) leave(key string, ln *lane) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln.users--
	if ln.users == 0 {
		delete(l.m, key)
	}
}

func (l *Lanes) releaser(key string, ln *lane) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			<-ln.slots
			l.leave(key, ln)
		})
	}
}
