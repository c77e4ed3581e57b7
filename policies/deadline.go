package policies

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// ErrDeadline: the schema check or the rendering of a chart did not finish in time.
var ErrDeadline = errors.New("did not finish in time")

// uninterruptible runs work that cannot be cancelled (Go templates and the JSON Schema
// validator take no context) with a deadline. A run past its deadline goes on in the
// background until it ends; slots bound how many runs there are at once, so that a few
// runaway templates hold a few cores at most and every other request keeps being
// answered, if only with a denial.
type uninterruptible struct {
	slots chan struct{}
}

// uncancellable is shared by every schema check and render of the process.
var uncancellable = uninterruptible{slots: make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))}

// run calls fn and waits for it until ctx is done. what names the work in errors.
func (u uninterruptible) run(ctx context.Context, what string, fn func() error) error {
	select {
	case u.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %s could not start before the deadline: %d earlier runs are still going", ErrDeadline, what, cap(u.slots))
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-u.slots }()
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("%s failed: %v", what, p)
			}
		}()
		done <- fn()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %s was stopped at the deadline (a template or value that takes this long is refused)", ErrDeadline, what)
	}
}
