package policies

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	chart "helm.sh/helm/v4/pkg/chart/v2"
)

// ErrDeadline: the schema check or the rendering of a chart did not finish in time.
var ErrDeadline = errors.New("did not finish in time")

// ErrNotStarted: the work could not start before its deadline (every slot or worker
// it may use was busy), so nothing is known of what it would cost. Errors that wrap
// it wrap ErrDeadline too.
var ErrNotStarted = errors.New("could not start")

// ErrWorkerFailed: the process a Sandbox ran the work in died (past its memory limit,
// say) or answered garbage. The work is what killed it, as a rule: it is refused like
// work past its deadline.
var ErrWorkerFailed = errors.New("the sandbox worker failed")

// Sandbox runs the work that takes no context (Go templates, the JSON Schema validator)
// where it can be stopped: past its deadline the work is killed and its CPU and memory
// come back (policies/sandbox runs it in worker processes). what names the work in
// errors; an error for work stopped or never started at the deadline wraps ErrDeadline.
type Sandbox interface {
	// Render is Render(ch, spec, opts). digest identifies ch's content (empty: unknown).
	Render(ctx context.Context, what string, ch *chart.Chart, digest string, spec map[string]any, opts RenderOptions) ([]RenderedObject, error)
	// RenderFiles is RenderFiles(ch, spec, opts); opts.Lookup is called in this
	// process, for each lookup of the templates.
	RenderFiles(ctx context.Context, what string, ch *chart.Chart, digest string, spec map[string]any, opts RenderOptions) (map[string]string, error)
	// ValidateValues is a JSONSchemaValidator's ValidateValues.
	ValidateValues(ctx context.Context, what string, ch *chart.Chart, digest string, spec map[string]any) ([]Violation, error)
}

// Renderer renders charts, and checks values against their schemas, where work past
// its deadline stops: in Sandbox's worker processes, every render within
// MaxRenderedBytes. It is an option of the Judge, of the controllers' installs and of
// the upgrade plan, never a setting of the process: a test or a tool that builds its
// own judge gets its own bounds. Without a Sandbox (a nil Renderer too), the work runs
// in this process, on goroutines that a deadline abandons but cannot stop: for tests
// and `compositor validate`.
type Renderer struct {
	// Sandbox runs the renders and the large schema checks; nil runs them in-process.
	Sandbox Sandbox
	// MaxRenderedBytes bounds what one render may produce (DefaultMaxRenderedBytes
	// when zero or less).
	MaxRenderedBytes int

	// memo, when set (Remembering), keeps what Render rendered by every input of the
	// render, so that the same render asked again is not run again.
	memo *renderMemo
}

// Remembering is rr keeping what it renders, up to budget bytes of objects, least
// recently used first out. It is the audit's: a pass judges a composition again when
// anything it is judged from changed (its status, its namespace's labels, the
// policies), and most of those changes leave its render as it was. A render is a pure
// function of the inputs it is remembered by (the chart's digest, the values, the
// release, the revision, install or upgrade, the capabilities, the bound), and one
// that looks objects up is never remembered.
func (rr *Renderer) Remembering(budget int) *Renderer {
	remembering := &Renderer{memo: newRenderMemo(budget)}
	if rr != nil {
		remembering.Sandbox, remembering.MaxRenderedBytes = rr.Sandbox, rr.MaxRenderedBytes
	}
	return remembering
}

// RenderedBytes is the bound on what one render may produce.
func (rr *Renderer) RenderedBytes() int {
	if rr == nil || rr.MaxRenderedBytes <= 0 {
		return DefaultMaxRenderedBytes
	}
	return rr.MaxRenderedBytes
}

// CheckRendered is Limits.CheckRendered with rr's bound: the install gate applies it
// to every manifest Helm builds, as Render does to what the chart renders.
func (rr *Renderer) CheckRendered(chartName string, files map[string]string) error {
	return Limits{MaxRenderedBytes: rr.RenderedBytes()}.CheckRendered(chartName, files)
}

// boundedBy is opts with rr's bound, as rr renders with them: the bound is an input of
// the render, and of the key it is remembered by.
func boundedBy(opts RenderOptions, rr *Renderer) RenderOptions {
	opts.MaxRenderedBytes = rr.RenderedBytes()
	return opts
}

func (rr *Renderer) sandbox() Sandbox {
	if rr == nil {
		return nil
	}
	return rr.Sandbox
}

// Render renders ch as Render does until ctx is done: in the sandbox when there is
// one, so that a render past its deadline stops and costs nothing more. Errors for a
// render stopped at the deadline wrap ErrDeadline.
func (rr *Renderer) Render(ctx context.Context, ch *chart.Chart, digest string, spec map[string]any, opts RenderOptions) (objs []RenderedObject, err error) {
	opts = boundedBy(opts, rr)
	var memo *renderMemo
	if rr != nil {
		memo = rr.memo
	}
	key, keyed := renderKey{}, false
	if memo != nil {
		if key, keyed = keyOf(digest, spec, opts); keyed {
			if objs, ok := memo.recall(key); ok {
				return objs, nil
			}
		}
	}
	countRender(ctx, PurposeAdmission)
	what := "rendering chart " + ch.Name()
	if s := rr.sandbox(); s != nil {
		objs, err = s.Render(ctx, what, ch, digest, spec, opts)
	} else {
		// The run writes its own variable: one past its deadline goes on writing it
		// after this returns, so it is read only when the run ended in time.
		var rendered []RenderedObject
		if err = uncancellable.run(ctx, what, func() (err error) {
			rendered, err = Render(ch, spec, opts)
			return err
		}); err == nil {
			objs = rendered
		}
	}
	if err != nil {
		return nil, err
	}
	if keyed {
		memo.remember(key, objs)
	}
	return objs, nil
}

// RenderFiles renders ch as RenderFiles does until ctx is done: in the sandbox when
// there is one. It is the render Helm's install and upgrade apply
// (reconciler/composition): Helm itself never runs a chart's templates.
func (rr *Renderer) RenderFiles(ctx context.Context, ch *chart.Chart, digest string, spec map[string]any, opts RenderOptions) (map[string]string, error) {
	countRender(ctx, PurposeInstall)
	what := "rendering chart " + ch.Name()
	opts.MaxRenderedBytes = rr.RenderedBytes()
	if s := rr.sandbox(); s != nil {
		return s.RenderFiles(ctx, what, ch, digest, spec, opts)
	}
	var rendered map[string]string // the run's own: see Render
	err := uncancellable.run(ctx, what, func() (err error) {
		rendered, err = RenderFiles(ch, spec, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return rendered, nil
}

// validate checks spec against ch's schemas with v until ctx is done: a
// JSONSchemaValidator's check runs in the sandbox when there is one (the sandbox keeps
// its own compiled schemas), unless the values are small (smallValues) and every
// schema of the chart is cheap (schemasAreCheap): then it cannot run long, and need
// not cross a pipe. Any other validator runs in-process. A template, by contrast, may
// loop on a small value: renders always run in the sandbox.
func (rr *Renderer) validate(ctx context.Context, v SchemaValidator, ch *chart.Chart, digest string, spec map[string]any) (vs []Violation, err error) {
	const what = "the schema check"
	if s := rr.sandbox(); s != nil && ch != nil && !(smallValues(spec) && schemasAreCheap(ch, digest)) {
		if _, ok := v.(*JSONSchemaValidator); ok {
			return s.ValidateValues(ctx, what, ch, digest, spec)
		}
	}
	var found []Violation // the run's own: see Render
	err = uncancellable.run(ctx, what, func() (err error) {
		found, err = v.ValidateValues(ctx, ch, digest, spec)
		return err
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}

// uninterruptible runs work that cannot be cancelled (Go templates and the JSON Schema
// validator take no context) with a deadline, in-process: the runner without a
// Sandbox (tests, tools, and the small values admission checks in-process). A run past
// its deadline goes on in the background until it ends; slots bound how many runs
// there are at once, so that a few runaway templates hold a few cores at most.
//
// The runs go to as many long-lived workers as there are slots: a goroutine started
// per run grew its stack again for every deep schema walk (a tenth of /mutate's CPU
// went to copying stacks).
type uninterruptible struct {
	slots   chan struct{}
	jobs    chan uninterruptibleJob
	workers sync.Once
}

type uninterruptibleJob struct {
	what string
	fn   func() error
	done chan error
}

// uncancellable is shared by every in-process schema check and render of the process.
var uncancellable = newUninterruptible(max(2, runtime.GOMAXPROCS(0)))

func newUninterruptible(slots int) *uninterruptible {
	return &uninterruptible{slots: make(chan struct{}, slots), jobs: make(chan uninterruptibleJob)}
}

// run calls fn and waits for it until ctx is done. what names the work in errors.
func (u *uninterruptible) run(ctx context.Context, what string, fn func() error) error {
	select {
	case u.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %s could not start before the deadline: %d earlier runs are still going%w", ErrDeadline, what, cap(u.slots), notStarted)
	}
	u.workers.Do(func() {
		for range cap(u.slots) {
			go u.work()
		}
	})
	done := make(chan error, 1)
	// A slot taken means a worker is free, or about to be: it gives the slot back
	// before it takes the next job.
	u.jobs <- uninterruptibleJob{what: what, fn: fn, done: done}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %s was stopped at the deadline (a template or value that takes this long is refused)", ErrDeadline, what)
	}
}

// work runs jobs, one at a time, for the life of the process.
func (u *uninterruptible) work() {
	for job := range u.jobs {
		job.done <- runRecovered(job.what, job.fn)
		<-u.slots
	}
}

// runRecovered calls fn, turning a panic into an error that names what.
func runRecovered(what string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s failed: %v", what, p)
		}
	}()
	return fn()
}

type laneKey struct{}

// WithLane says whose work the renders and schema checks run with ctx are (the
// compositions of one namespace, say), so that a Sandbox shares its workers between
// lanes: one lane never holds them all. Admission and the controllers name a
// namespace's compositions alike, so that they share the namespace's lane.
func WithLane(ctx context.Context, lane string) context.Context {
	return context.WithValue(ctx, laneKey{}, lane)
}

// LaneOf is the lane WithLane put in ctx, "" when none.
func LaneOf(ctx context.Context) string {
	lane, _ := ctx.Value(laneKey{}).(string)
	return lane
}

// CompositionsLane is the lane of the compositions of namespace, in admission and in
// the controllers alike.
func CompositionsLane(namespace string) string {
	return "compositions of namespace " + namespace
}

// Values are small, and checked in-process, up to this many keys, elements and
// scalars, and this many bytes of strings and keys, all levels together.
const (
	smallValuesNodes = 1000
	smallValuesBytes = 64 << 10
)

// smallValues reports whether spec is within smallValuesNodes and smallValuesBytes.
// It stops counting at the first bound passed.
func smallValues(spec map[string]any) bool {
	nodes, bytes := 0, 0
	var small func(v any) bool
	small = func(v any) bool {
		nodes++
		if nodes > smallValuesNodes || bytes > smallValuesBytes {
			return false
		}
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				bytes += len(k)
				if !small(e) {
					return false
				}
			}
		case []any:
			for _, e := range v {
				if !small(e) {
					return false
				}
			}
		case string:
			bytes += len(v)
		}
		return nodes <= smallValuesNodes && bytes <= smallValuesBytes
	}
	return small(map[string]any(spec))
}

// notStarted marks an error as ErrNotStarted without changing its text.
var notStarted = hiddenError{ErrNotStarted}

// NotStarted is notStarted for the sandbox: append it with %w to an error's format.
var NotStarted error = notStarted

// hiddenError wraps an error for errors.Is and prints nothing.
type hiddenError struct{ err error }

func (h hiddenError) Error() string { return "" }
func (h hiddenError) Unwrap() error { return h.err }
