// Package membudget stops Rego evaluations that run while the process's heap is past
// a budget.
//
// Renders and schema checks run in sandbox workers whose memory is capped; Rego runs
// in the process, and OPA bounds an evaluation's time (its context) but not its
// memory. A template that builds a cross product, or a deep comprehension over a
// tenant's values, can allocate a gigabyte before its deadline, and a pod's memory
// limit then kills every tenant's admission with it. Go cannot tell which goroutine
// allocated what, so the guard works by age: while the heap is past the budget, every
// evaluation that has been running for longer than Grace is cancelled, with ErrMemory
// as the cause. Evaluations of real policies take well under a millisecond; one that
// has been running for Grace while the heap grew past the budget is what grew it, or
// is caught with it. A heap past the budget with no evaluation that old stops nothing:
// the process is big, and no evaluation made it so.
package membudget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrMemory is the cause of an evaluation cancelled by the guard.
var ErrMemory = errors.New("stopped: the process's memory passed its budget for policy evaluation while this evaluation ran")

// Grace is how long an evaluation runs before the guard may stop it.
const Grace = 50 * time.Millisecond

// interval is how often the heap is read while evaluations run: at a gigabyte a
// second, 10 ms is 10 MB past the budget.
const interval = 10 * time.Millisecond

var budget atomic.Int64

// DefaultBudget is the budget when the process has no memory limit to derive it from.
const DefaultBudget = 1 << 30

// cgroupLimits are where cgroup v2, then v1, give the container's memory limit ("max",
// or a number near math.MaxInt64, when there is none).
var cgroupLimits = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Default is the budget a long-running process takes: three quarters of its memory
// limit, the lower of Go's (GOMEMLIMIT) and its container's (cgroup v2 or v1), so that a
// runaway evaluation stops before the kernel kills the process; DefaultBudget when it
// has neither.
func Default() int64 {
	limit := debug.SetMemoryLimit(-1) // math.MaxInt64 when unset
	for _, path := range cgroupLimits {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil && n > 0 && n < 1<<50 && n < limit {
			limit = n
		}
		break
	}
	if limit == math.MaxInt64 {
		return DefaultBudget
	}
	return limit / 4 * 3
}

// SetBudget sets the heap size, in bytes, past which long evaluations stop; 0 turns
// the guard off (the default: commands that evaluate once and exit need none).
func SetBudget(bytes int64) { budget.Store(max(bytes, 0)) }

// Budget is the budget SetBudget set, 0 when off.
func Budget() int64 { return budget.Load() }

type evaluation struct {
	start  time.Time
	cancel context.CancelCauseFunc
}

var guard struct {
	mu      sync.Mutex
	evals   map[*evaluation]struct{}
	running bool // the watching goroutine
}

// Track returns ctx for one evaluation, and the function to call with its error when
// it ends: that function returns an error wrapping ErrMemory when the guard stopped
// it, the error given otherwise. With the guard off, ctx is returned as it is.
func Track(ctx context.Context) (context.Context, func(error) error) {
	if budget.Load() == 0 {
		return ctx, func(err error) error { return err }
	}
	ctx, cancel := context.WithCancelCause(ctx)
	e := &evaluation{start: time.Now(), cancel: cancel}
	guard.mu.Lock()
	if guard.evals == nil {
		guard.evals = map[*evaluation]struct{}{}
	}
	guard.evals[e] = struct{}{}
	if !guard.running {
		guard.running = true
		go watch()
	}
	guard.mu.Unlock()
	return ctx, func(err error) error {
		guard.mu.Lock()
		delete(guard.evals, e)
		guard.mu.Unlock()
		if cause := context.Cause(ctx); errors.Is(cause, ErrMemory) {
			err = fmt.Errorf("%w (heap budget %d MiB)", ErrMemory, budget.Load()>>20)
		}
		cancel(nil)
		return err
	}
}

// watch reads the heap while evaluations run, and stops the old ones while it is past
// the budget. It ends when no evaluation is left.
func watch() {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for range tick.C {
		guard.mu.Lock()
		if len(guard.evals) == 0 {
			guard.running = false
			guard.mu.Unlock()
			return
		}
		guard.mu.Unlock()
		limit := budget.Load()
		if limit == 0 {
			continue
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 || int64(sample[0].Value.Uint64()) <= limit {
			continue
		}
		now := time.Now()
		guard.mu.Lock()
		for e := range guard.evals {
			if now.Sub(e.start) >= Grace {
				e.cancel(ErrMemory)
			}
		}
		guard.mu.Unlock()
	}
}
