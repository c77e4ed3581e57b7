package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"time"
)

// reviewFunc reviews the timed object once.
type reviewFunc func(ctx context.Context) error

// engine is one side of the peer run.
type engine struct {
	name   string
	review reviewFunc
}

// phase is one engine's share of one round.
type phase struct {
	reviews uint64
	elapsed time.Duration
	mallocs uint64
}

// nsPerReview is wall-clock time per review: the latency of one review with one
// goroutine, the inverse of aggregate throughput with several.
func (p phase) nsPerReview() float64 { return float64(p.elapsed.Nanoseconds()) / float64(p.reviews) }

// timeRounds runs the engines in turn, each for d per round, over rounds rounds, so
// that drift of the machine (thermal, neighbours) is shared by both. It returns every
// engine's phases, by engine name. A short untimed warm-up of each comes first.
func timeRounds(ctx context.Context, engines []engine, rounds int, d time.Duration, parallel int) (map[string][]phase, error) {
	for _, e := range engines {
		if _, err := timePhase(ctx, e.review, d/10, parallel); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
	}
	out := map[string][]phase{}
	for range rounds {
		for _, e := range engines {
			p, err := timePhase(ctx, e.review, d, parallel)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.name, err)
			}
			out[e.name] = append(out[e.name], p)
		}
	}
	return out, nil
}

// timePhase runs review for d on parallel goroutines and counts the reviews and the
// heap allocations they made. A GC first leaves the previous phase's garbage out of
// this one's time.
func timePhase(ctx context.Context, review reviewFunc, d time.Duration, parallel int) (phase, error) {
	parallel = max(parallel, 1)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)

	counts := make([]uint64, parallel)
	errs := make([]error, parallel)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range parallel {
		wg.Go(func() { counts[i], errs[i] = loop(ctx, review, deadline) })
	}
	wg.Wait()
	elapsed := time.Since(start)

	runtime.ReadMemStats(&after)
	p := phase{elapsed: elapsed, mallocs: after.Mallocs - before.Mallocs}
	for i := range parallel {
		if errs[i] != nil {
			return phase{}, errs[i]
		}
		p.reviews += counts[i]
	}
	return p, nil
}

// loop reviews until the deadline and returns how many reviews it made.
func loop(ctx context.Context, review reviewFunc, deadline time.Time) (uint64, error) {
	var n uint64
	for time.Now().Before(deadline) {
		if err := review(ctx); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// engineResult summarises one engine's rounds.
type engineResult struct {
	// NsPerReview is the median over rounds of wall-clock nanoseconds per review.
	NsPerReview float64 `json:"ns_per_review"`
	// ReviewsPerSecond is the throughput at the median.
	ReviewsPerSecond float64 `json:"reviews_per_second"`
	// AllocsPerReview is heap allocations per review over all rounds.
	AllocsPerReview float64 `json:"allocs_per_review"`
	MinNsPerReview  float64 `json:"min_ns_per_review"`
	MaxNsPerReview  float64 `json:"max_ns_per_review"`
	// Reviews is how many reviews all rounds made.
	Reviews uint64 `json:"reviews"`
}

// summarise reduces an engine's phases to its result.
func summarise(ps []phase) engineResult {
	ns := make([]float64, len(ps))
	var reviews, mallocs uint64
	for i, p := range ps {
		ns[i] = p.nsPerReview()
		reviews += p.reviews
		mallocs += p.mallocs
	}
	slices.Sort(ns)
	med := median(ns)
	return engineResult{
		NsPerReview:      math.Round(med),
		ReviewsPerSecond: round1(1e9 / med),
		AllocsPerReview:  round1(float64(mallocs) / float64(reviews)),
		MinNsPerReview:   math.Round(ns[0]),
		MaxNsPerReview:   math.Round(ns[len(ns)-1]),
		Reviews:          reviews,
	}
}

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// profileEngine writes a CPU profile of e's review alone, reviewing for d.
func profileEngine(ctx context.Context, e engine, path string, d time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	_, err = loop(ctx, e.review, time.Now().Add(d))
	pprof.StopCPUProfile()
	if err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	return f.Close()
}
