package main

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// inParallel calls fn for 0..n-1, eight calls at a time, and starts no more once ctx is
// done.
func inParallel(ctx context.Context, n int, fn func(i int)) {
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			fn(i)
			return nil
		})
	}
	_ = g.Wait()
}
