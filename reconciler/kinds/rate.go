package kinds

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// perVersionRate lets each version reconcile at most perSecond compositions a second,
// with a burst of ten seconds' worth, as each version's own controller did before
// they shared a queue: a busy kind does not starve the others of their rate.
type perVersionRate struct {
	perSecond int
	mu        sync.Mutex
	limiters  map[VersionKey]*rate.Limiter
}

func (r *perVersionRate) delay(key VersionKey) time.Duration {
	r.mu.Lock()
	l, ok := r.limiters[key]
	if !ok {
		l = rate.NewLimiter(rate.Limit(r.perSecond), r.perSecond*10)
		r.limiters[key] = l
	}
	r.mu.Unlock()
	return l.Reserve().Delay()
}

func (r *perVersionRate) forget(key VersionKey) {
	r.mu.Lock()
	delete(r.limiters, key)
	r.mu.Unlock()
}

// requestRate is perVersionRate as the queue's rate limiter; release bindings are not
// limited.
type requestRate struct{ *perVersionRate }

func (r requestRate) When(req request) time.Duration {
	if req.Binding {
		return 0
	}
	return r.delay(req.Version)
}
func (requestRate) Forget(request)          {}
func (requestRate) NumRequeues(request) int { return 0 }
