package webhooks

import (
	"runtime"
	"sync/atomic"
)

// warmGoroutines runs work on long-lived goroutines whose stacks have already grown to
// what a review needs. net/http serves each request on a new goroutine with a small
// stack, and deciding a review (decoding it, walking a schema, evaluating Rego) grew that
// stack again on every request: copying stacks cost 6 % of the process's CPU under
// load. When every warm goroutine is busy, the work runs on the caller's goroutine, as
// before: nothing ever waits for a warm goroutine, so a slow review cannot hold up
// another.
type warmGoroutines struct {
	jobs    chan func()
	started atomic.Int32
	max     int32
}

func newWarmGoroutines(n int) *warmGoroutines {
	return &warmGoroutines{jobs: make(chan func()), max: int32(n)}
}

// reviewGoroutines is shared by every admission webhook of the process.
var reviewGoroutines = newWarmGoroutines(max(64, 8*runtime.GOMAXPROCS(0)))

// run calls fn and returns when it has returned. A panic in fn is raised again on the
// caller's goroutine, where net/http recovers it as it would have.
func (w *warmGoroutines) run(fn func()) {
	var panicked any
	done := make(chan struct{})
	job := func() {
		defer close(done)
		defer func() { panicked = recover() }()
		fn()
	}
	select {
	case w.jobs <- job: // an idle warm goroutine took it
	default:
		if w.started.Add(1) > w.max {
			w.started.Add(-1)
			fn()
			return
		}
		go w.work(job)
	}
	<-done
	if panicked != nil {
		panic(panicked)
	}
}

// work runs first, then every job it is handed, for the life of the process.
func (w *warmGoroutines) work(first func()) {
	first()
	for job := range w.jobs {
		job()
	}
}
