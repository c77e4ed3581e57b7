package plan

import (
	"context"
	"sync/atomic"
	"testing"
)

func TestForEach(t *testing.T) {
	for _, workers := range []int{0, 1, 2, 5, 200} {
		var calls [100]atomic.Int32
		if err := forEach(context.Background(), workers, len(calls), func(i int) { calls[i].Add(1) }); err != nil {
			t.Fatalf("%d workers: %v", workers, err)
		}
		for i := range calls {
			if n := calls[i].Load(); n != 1 {
				t.Errorf("%d workers: fn(%d) called %d times, want once", workers, i, n)
			}
		}
	}
}

// A panic in fn reaches the caller, as it would planning on the caller's goroutine
// (where the controller's recovery catches it), rather than ending the process.
func TestForEachPanic(t *testing.T) {
	for _, workers := range []int{1, 2} {
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Errorf("%d workers: recovered %v, want boom", workers, r)
				}
			}()
			_ = forEach(context.Background(), workers, 50, func(i int) {
				if i == 10 {
					panic("boom")
				}
			})
			t.Errorf("%d workers: forEach returned", workers)
		}()
	}
}
