package policies

import (
	"context"
	"fmt"
	"time"
)

// Judge decides on writes, the same way wherever it is asked: admission, the install
// gate, the audit, the upgrade plan and `compositor validate` build their Request with
// NewRequest and ask one of its four questions. A composition's values are checked
// against its chart's schemas first; the policies and Gatekeeper constraints in force
// come next, the rendered ones on the chart as its install would render it. Its bounds
// are its own: the engine's deadline, and the Renderer's sandbox and bound on rendered
// bytes.
type Judge struct {
	schemas  SchemaValidator
	engine   *Engine
	renderer *Renderer
	reads    *valueReads
}

// JudgeOptions say what a Judge judges with.
type JudgeOptions struct {
	// Engine holds the policies and constraints in force; nil judges values only.
	Engine *Engine
	// Schemas checks values against charts' schemas; nil is a JSONSchemaValidator
	// that keeps every chart's schemas it compiled.
	Schemas SchemaValidator
	// Renderer renders charts and checks large values; nil runs both in-process.
	Renderer *Renderer
}

// NewJudge returns a Judge with opts.
func NewJudge(opts JudgeOptions) *Judge {
	if opts.Schemas == nil {
		opts.Schemas = NewJSONSchemaValidator(0)
	}
	return &Judge{schemas: opts.Schemas, engine: opts.Engine, renderer: opts.Renderer, reads: newValueReads()}
}

// Engine holds the policies and constraints the judge enforces (nil: none), for those
// that keep them up to date and report on them.
func (j *Judge) Engine() *Engine { return j.engine }

// Renderer renders the charts the judge judges (nil: in-process). The controllers'
// installs render with it too, so that what Helm applies is rendered under the same
// bounds as what admission judged.
func (j *Judge) Renderer() *Renderer { return j.renderer }

// Timeout is the deadline of one decision: the engine's (DefaultTimeout without one).
// The schema check and the policies share it, so that together they stay below the
// webhook's timeout.
func (j *Judge) Timeout() time.Duration {
	if j.engine != nil {
		return j.engine.Timeout()
	}
	return DefaultTimeout
}

// Decide returns every violation of r: its values against its chart's schemas when r
// carries a chart and an object (a composition being created or updated), then every
// policy and constraint that matches it. The error is for trouble other than
// violations: a chart whose schema cannot be compiled (ErrSchemaCompile, ErrRemoteRef).
func (j *Judge) Decide(ctx context.Context, r *Request) (Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, j.Timeout())
	defer cancel()
	out, err := j.values(ctx, r)
	if err != nil {
		return Decision{}, err
	}
	if len(out) > 0 {
		// Rendered policies wait until the values pass the schema.
		copied := *r
		copied.schemaFailed = true
		r = &copied
	}
	out = append(out, j.Policies(ctx, r)...)
	SortViolations(out)
	return Decision{Violations: out}, nil
}

// Values checks r's values against its chart's schemas, and nothing else: what
// /mutate tells before defaulting, and what the install gate checks before it renders.
func (j *Judge) Values(ctx context.Context, r *Request) (Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, j.Timeout())
	defer cancel()
	out, err := j.values(ctx, r)
	if err != nil {
		return Decision{}, err
	}
	SortViolations(out)
	return Decision{Violations: out}, nil
}

// values are the schema violations of r's values: those admission found already for
// these very values (SchemaChecked), else the check's, until ctx is done.
func (j *Judge) values(ctx context.Context, r *Request) ([]Violation, error) {
	if j.schemas == nil || r.Chart == nil || r.Object == nil {
		return nil, nil // a Judge{} checks no values
	}
	if r.SchemaChecked {
		return r.SchemaViolations, nil
	}
	vs, err := j.renderer.validate(ctx, j.schemas, r.Chart, r.ChartDigest, r.Spec())
	if err != nil {
		return nil, fmt.Errorf("validating %s %s/%s against its chart's schema: %w", r.Kind.Kind, r.Namespace, r.Name, err)
	}
	return vs, nil
}

// Unread are the keys of r's values that its chart neither declares nor reads (see
// UnreadValues), the first max of them in sorted order, and how many there are; an
// update's are those it changes. None when r carries no chart or no object. What a
// chart declares and reads is kept per chart digest.
func (j *Judge) Unread(r *Request, max int) ([]UnreadValue, int) {
	if r.Chart == nil || r.Object == nil {
		return nil, 0
	}
	reads := j.reads
	if reads == nil { // a Judge{}
		reads = newValueReads()
	}
	var old map[string]any
	if r.OldObject != nil {
		old, _ = r.OldObject["spec"].(map[string]any)
	}
	known := reads.known(r.Chart, r.ChartDigest)
	keys := known.unread(r.Spec(), old, requestReads(r.Spec(), known.computedKeys), nil, nil)
	return told(keys, max), len(keys)
}

// Policies runs every policy and constraint that matches r and returns their
// violations, whatever their action, in the order of SortViolations; the rendered ones
// judge r.Rendered, or the chart rendered with the judge's Renderer. The audit asks
// this: what exists passed its schema when it was written.
func (j *Judge) Policies(ctx context.Context, r *Request) []Violation {
	if j.engine == nil {
		return nil
	}
	return j.engine.evaluate(ctx, r, j.renderer)
}

// Objects judges the objects about to be applied for r (the install gate's: what Helm
// built from the one render), with every policy and constraint that matches r, and
// renders nothing.
func (j *Judge) Objects(ctx context.Context, r *Request, objs []RenderedObject) Decision {
	judged := *r
	judged.Rendered = objs
	if judged.Rendered == nil {
		judged.Rendered = []RenderedObject{}
	}
	return Decision{Violations: j.Policies(ctx, &judged)}
}
