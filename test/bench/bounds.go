package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// measureBounds measures what issue #26's bounds cost on the ordinary path: the
// composition /validate workloads against d, as shipped, and against a second
// `compositor dev` started with the hidden --unbounded-admission (no limits, no lanes,
// schema checks and renders in-process), one after the other for each workload and
// concurrency, in the same run. Comparisons go to rep.Bounds with the unbounded run
// as Floor.
func measureBounds(ctx context.Context, o options, rep *report, d *dev, dir string) error {
	unboundedDir := filepath.Join(dir, "unbounded")
	if err := os.MkdirAll(unboundedDir, 0o755); err != nil {
		return err
	}
	logf("starting compositor dev --unbounded-admission")
	u, err := startDev(ctx, o.compositor, o.controlPlaneDir, unboundedDir, "--unbounded-admission")
	if err != nil {
		return err
	}
	defer u.stop()
	uw, err := setUp(ctx, u, o.policyDir)
	if err != nil {
		return fmt.Errorf("%w (the unbounded compositor's log: %s)", err, u.log)
	}
	for _, wl := range admissionWorkloads(uw, u.chartsURL) {
		if wl.name != "composition create /validate" && wl.name != "composition update /validate" {
			continue
		}
		for _, c := range wl.concurrency {
			logf("%s at concurrency %d, bounded then unbounded", wl.name, c)
			bounded, err := drive(ctx, d.endpoint, wl.name, wl.calls, c, o.warmup, o.duration)
			if err != nil {
				return err
			}
			unbounded, err := drive(ctx, u.endpoint, wl.name, wl.calls, c, o.warmup, o.duration)
			if err != nil {
				return fmt.Errorf("%w (the unbounded compositor's log: %s)", err, u.log)
			}
			rep.Bounds = append(rep.Bounds, comparison{Floor: unbounded, Compositor: bounded})
		}
	}
	return nil
}
