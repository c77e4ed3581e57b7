package policies

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
	"github.com/compositor-dev/compositor/policies/membudget"
)

// DefaultTimeout is the default evaluation deadline of one request, well below the
// webhook's default timeout of 5s so the API server always gets an answer from us.
const DefaultTimeout = 2 * time.Second

// Options configure an Engine.
type Options struct {
	// Timeout bounds the evaluation of all policies for one request (DefaultTimeout
	// when zero). A policy still running at the deadline is cut off.
	Timeout time.Duration
	// FailOpen admits a request whose deny policy could not be evaluated (deadline,
	// runtime error, chart that does not render) with a warning. The default, false,
	// is fail-closed: such a policy denies with a message saying why.
	FailOpen bool
	// DisabledBuiltins are ids of built-in policies to switch off (see BuiltinIDs).
	DisabledBuiltins []string
	// EnabledBuiltins are ids of the built-in policies that are off by default to
	// switch on (see OptInBuiltinIDs).
	EnabledBuiltins []string
	// RenderMemoBytes bounds what the engine remembers of the renders of admitted
	// writes, to find an update's old objects without rendering them again
	// (DefaultRenderMemoBytes when zero; nothing is remembered when negative).
	RenderMemoBytes int
}

// Engine holds the compiled policies and evaluates them. Updates compile first and
// then swap the whole set atomically; a policy that fails to compile leaves its last
// good version in force. Evaluate never waits for an update and is safe for
// concurrent use.
type Engine struct {
	opts Options

	mu  sync.Mutex // serialises updates
	set atomic.Pointer[policySet]
	// constraints are the Gatekeeper constraints in force by origin, swapped whole.
	constraints atomic.Pointer[map[Origin]*gatekeeper.Library]
	// pending are the origins of constraints not read yet (under mu); hasPending
	// says whether there are any.
	pending    []Origin
	hasPending atomic.Bool
	// renders are the renders of writes, remembered while a constraint library
	// tells updates from creations.
	renders *renderMemo
}

type policyKey struct {
	origin Origin
	name   string
}

// policySet is an immutable snapshot of the enforced policies.
type policySet struct {
	byKey   map[policyKey]*compiled
	ordered []*compiled // by origin, then name
}

func newPolicySet(m map[policyKey]*compiled) *policySet {
	s := &policySet{byKey: m, ordered: make([]*compiled, 0, len(m))}
	for _, c := range m {
		s.ordered = append(s.ordered, c)
	}
	slices.SortFunc(s.ordered, func(a, b *compiled) int {
		if a.Origin != b.Origin {
			return strings.Compare(string(a.Origin), string(b.Origin))
		}
		return strings.Compare(a.Name, b.Name)
	})
	return s
}

// NewEngine returns an engine enforcing the built-in policies not listed in
// opts.DisabledBuiltins. An unknown id there is an error wrapping ErrUnknownBuiltin.
func NewEngine(ctx context.Context, opts Options) (*Engine, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.RenderMemoBytes == 0 {
		opts.RenderMemoBytes = DefaultRenderMemoBytes
	}
	e := &Engine{opts: opts, renders: newRenderMemo(opts.RenderMemoBytes)}
	e.set.Store(newPolicySet(map[policyKey]*compiled{}))
	builtins, err := SelectBuiltins(opts.EnabledBuiltins, opts.DisabledBuiltins)
	if err != nil {
		return nil, err
	}
	if err := e.Sync(ctx, OriginBuiltin, builtins); err != nil {
		return nil, fmt.Errorf("built-in policies: %w", err)
	}
	return e, nil
}

// Set compiles p and enforces it in place of the previous version of the policy with
// the same origin and name. When p does not compile, the previous version (if any)
// stays in force and the error is a *CompileError.
func (e *Engine) Set(ctx context.Context, p Policy) error {
	c, err := compile(ctx, p)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.copySet()
	m[policyKey{c.Origin, c.Name}] = c
	e.set.Store(newPolicySet(m))
	logr.FromContextOrDiscard(ctx).V(1).Info("policy enforced", "origin", c.Origin, "policy", c.Name, "action", c.Action, "target", c.Target)
	return nil
}

// Remove stops enforcing a policy.
func (e *Engine) Remove(origin Origin, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.copySet()
	delete(m, policyKey{origin, name})
	e.set.Store(newPolicySet(m))
}

// Sync makes the policies of origin exactly ps, in one swap: every policy of ps that
// compiles replaces its previous version; one that does not, and every name in keep
// (files that could not even be read), keeps its previous version; policies of origin
// in neither are removed. The error joins the *CompileError of every policy that did
// not compile.
func (e *Engine) Sync(ctx context.Context, origin Origin, ps []Policy, keep ...string) error {
	fresh := map[string]*compiled{}
	var errs []error
	for _, p := range ps {
		p.Origin = origin
		c, err := compile(ctx, p)
		if err != nil {
			errs = append(errs, err)
			keep = append(keep, p.Name)
			continue
		}
		fresh[p.Name] = c
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	m := e.copySet()
	for k := range m {
		if k.origin == origin && !slices.Contains(keep, k.name) {
			delete(m, k)
		}
	}
	for name, c := range fresh {
		m[policyKey{origin, name}] = c
	}
	e.set.Store(newPolicySet(m))
	return errors.Join(errs...)
}

func (e *Engine) copySet() map[policyKey]*compiled {
	cur := e.set.Load().byKey
	m := make(map[policyKey]*compiled, len(cur)+1)
	for k, v := range cur {
		m[k] = v
	}
	return m
}

// PolicyInfo describes an enforced policy.
type PolicyInfo struct {
	Name   string
	Origin Origin
	Action v1alpha1.EnforcementAction
	Target v1alpha1.Target
	// Rego is the source of the version in force.
	Rego string
}

// Policies lists the policies in force, by origin and name.
func (e *Engine) Policies() []PolicyInfo {
	set := e.set.Load()
	out := make([]PolicyInfo, 0, len(set.ordered))
	for _, c := range set.ordered {
		out = append(out, PolicyInfo{Name: c.Name, Origin: c.Origin, Action: c.Action, Target: c.Target, Rego: c.Rego})
	}
	return out
}

// Timeout is the deadline of one request's evaluation.
func (e *Engine) Timeout() time.Duration { return e.opts.Timeout }

// Version identifies what the engine enforces: the policies, the constraints and
// whether constraints are still to be read. Two Versions are equal exactly when no
// policy or constraint was enforced, changed or removed between the calls, so a verdict
// found under one holds under the other for the same request.
type Version struct {
	set         *policySet
	constraints *map[Origin]*gatekeeper.Library
	pending     bool
}

// Version returns what the engine enforces now.
func (e *Engine) Version() Version {
	return Version{set: e.set.Load(), constraints: e.constraints.Load(), pending: e.hasPending.Load()}
}

// evaluate runs every policy that matches r and returns their violations, whatever
// their action, in the order of SortViolations; rr renders r's chart when a rendered
// policy or a constraint needs it and r carries no rendered objects. All policies of
// one request share the engine's deadline; a policy that cannot finish, fails at run
// time, or needs a chart that does not render yields one violation saying so (deny, or
// warn with FailOpen; a warn or dryrun policy keeps its own action). Judge.Policies
// asks it.
func (e *Engine) evaluate(ctx context.Context, r *Request, rr *Renderer) []Violation {
	set := e.set.Load()
	var matched []*compiled
	for _, c := range set.ordered {
		if c.matches(r) {
			matched = append(matched, c)
		}
	}
	libs := e.constraintLibraries()
	// A write (not the audit's review of what exists) of a composition.
	pending := e.hasPending.Load() && r.Object != nil && (r.Chart != nil || r.Rendered != nil) &&
		(r.Operation == "CREATE" || r.Operation == "UPDATE")
	if len(matched) == 0 && len(libs) == 0 && !pending {
		return nil
	}
	doc := newInputDoc(r)
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()

	var out []Violation
	var objs []RenderedObject
	var rendered []renderedTerm
	var renderErr error
	// What a write renders is remembered when a library may need it as the old
	// objects of the composition's next update.
	remember := r.Rendered == nil && readHistory(libs)
	renderOnce := sync.OnceFunc(func() {
		if objs, renderErr = renderFor(ctx, r, rr); renderErr == nil {
			if remember {
				if key, ok := keyOf(r.ChartDigest, r.Spec(), boundedBy(renderOptionsOf(r), rr)); ok {
					e.renders.remember(key, objs)
				}
			}
			var outside []Violation
			objs, outside = r.keepToNamespace(objs)
			out = append(out, outside...)
			rendered, renderErr = renderedTerms(objs)
		}
	})
	for _, c := range matched {
		if ctx.Err() != nil {
			out = append(out, e.failure(ctx, c, errNotReached))
			continue
		}
		if c.Target != v1alpha1.TargetRendered {
			vs, err := c.eval(ctx, doc.input(c.params, nil), "")
			out = append(out, vs...)
			if err != nil {
				out = append(out, e.failure(ctx, c, err))
			}
			continue
		}
		if (r.Chart == nil && r.Rendered == nil) || r.Object == nil || r.schemaFailed {
			continue // nothing renders for this request (a definition, a deletion, values the schema refuses)
		}
		renderOnce()
		if renderErr != nil {
			out = append(out, e.failure(ctx, c, renderErr))
			continue
		}
		for _, obj := range rendered {
			vs, err := c.eval(ctx, doc.input(c.params, obj.list), obj.ref)
			out = append(out, vs...)
			if err != nil {
				out = append(out, e.failure(ctx, c, err))
				break
			}
		}
	}
	if pending {
		out = append(out, e.pendingViolation())
	}
	// The constraints a chart that does not render keeps from its objects, of every
	// library, are one failure (per outcome), not one per constraint.
	var unrendered []*gatekeeper.Constraint
	var unrenderedErr error
	for _, lib := range libs {
		vs, skipped, err := e.reviewConstraints(ctx, lib, r, rr, func() ([]RenderedObject, error) {
			renderOnce()
			return objs, renderErr
		})
		out = append(out, vs...)
		if len(skipped) > 0 {
			unrendered, unrenderedErr = append(unrendered, skipped...), err
		}
	}
	out = append(out, e.renderFailures(ctx, r, unrendered, unrenderedErr)...)
	SortViolations(out)
	return out
}

// renderOptionsOf are the options r's chart renders with: as `helm install` on a
// create, as `helm upgrade` on an update or when the release is installed already.
func renderOptionsOf(r *Request) RenderOptions {
	return RenderOptions{ReleaseName: cmp.Or(r.ReleaseName, r.Name), Namespace: r.Namespace, IsUpgrade: r.Operation == "UPDATE" || r.Installed,
		Revision: r.Revision, Capabilities: r.Capabilities}
}

// readHistory tells whether a library tells updates from creations.
func readHistory(libs []*gatekeeper.Library) bool {
	for _, lib := range libs {
		if lib.ReadsHistory() {
			return true
		}
	}
	return false
}

// renderedTerm is one rendered object, ready to be input.rendered.
type renderedTerm struct {
	ref  string
	list *ast.Term
}

// renderFor renders the composition's chart, or returns the objects the request
// carries already rendered.
func renderFor(ctx context.Context, r *Request, rr *Renderer) ([]RenderedObject, error) {
	objs := r.Rendered
	if objs == nil {
		var err error
		objs, err = rr.Render(ctx, r.Chart, r.ChartDigest, r.Spec(), renderOptionsOf(r))
		if err != nil {
			// A render stopped at the deadline, or whose sandbox worker died, is a chart
			// that does not render, as a template error is.
			return nil, renderError(err)
		}
	}
	return objs, nil
}

// renderedTerms converts rendered objects for rendered policies. A rendered policy is
// evaluated once per rendered object, with input.rendered holding that object alone,
// so each violation names the object it is about; `some obj in input.rendered` reads
// the same either way.
func renderedTerms(objs []RenderedObject) ([]renderedTerm, error) {
	out := make([]renderedTerm, 0, len(objs))
	for _, o := range objs {
		v, err := ast.InterfaceToValue(o.Object)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrRender, o.Ref(), err)
		}
		out = append(out, renderedTerm{ref: o.Ref(), list: ast.ArrayTerm(ast.NewTerm(v))})
	}
	return out, nil
}

// errNotReached marks a policy the deadline came before.
var errNotReached = errors.New("deadline passed before the policy was evaluated")

// failure is the violation standing for a policy that could not give an answer.
func (e *Engine) failure(ctx context.Context, c *compiled, err error) Violation {
	action, msg := e.failureOf(ctx, c.Action, err)
	logr.FromContextOrDiscard(ctx).Info("policy evaluation failed", "policy", c.Name, "origin", c.Origin, "error", err.Error())
	return Violation{Message: msg, Source: "policy " + c.Name, Policy: c.Name, Action: action, Failed: true}
}

// failureOf is what an evaluation that failed with err does, for a policy or
// constraint of the declared action: deny (or warn with FailOpen) for deny, its own
// action otherwise; and the message saying why.
func (e *Engine) failureOf(ctx context.Context, declared v1alpha1.EnforcementAction, err error) (v1alpha1.EnforcementAction, string) {
	action := e.failureAction(declared)
	var msg string
	switch {
	case errors.Is(err, errNotReached):
		msg = fmt.Sprintf("not evaluated: the request's evaluation deadline of %s passed while other policies ran", e.opts.Timeout)
	case errors.Is(err, ErrRender):
		msg = fmt.Sprintf("cannot evaluate: %v", err)
	case ctx.Err() != nil || topdown.IsCancel(err):
		msg = fmt.Sprintf("evaluation did not finish within %s and was stopped", e.opts.Timeout)
	default:
		msg = fmt.Sprintf("evaluation failed: %v", err)
	}
	return action, msg + failureNote(declared, action)
}

// failureAction is what a policy or constraint of the declared action does when it
// cannot be evaluated: deny denies (warns with FailOpen); warn and dryrun keep theirs.
func (e *Engine) failureAction(declared v1alpha1.EnforcementAction) v1alpha1.EnforcementAction {
	if declared == v1alpha1.EnforcementDeny && e.opts.FailOpen {
		return v1alpha1.EnforcementWarn
	}
	return declared
}

// failureNote ends the message of a failure that denies, or of a deny policy admitted
// because policies fail open, saying which; other failures keep their action and need
// no note.
func failureNote(declared, action v1alpha1.EnforcementAction) string {
	switch {
	case action == v1alpha1.EnforcementDeny:
		return " (denied: policies fail closed)"
	case declared == v1alpha1.EnforcementDeny:
		return " (admitted: policies fail open)"
	}
	return ""
}

// eval runs the policy's prepared query once and turns its deny and warn sets into
// violations. Undefined (no result) is no violation; an error is returned as such.
func (c *compiled) eval(ctx context.Context, input ast.Value, object string) (_ []Violation, err error) {
	defer func() {
		// Input is converted as the policy reads it; a value Rego cannot hold panics
		// there. It is the policy's failure, not the process's.
		if p := recover(); p != nil {
			err = fmt.Errorf("evaluating the policy failed: %v", p)
		}
	}()
	// OPA times each evaluation into fresh metrics unless told otherwise; nobody reads
	// them here.
	ctx, ended := membudget.Track(ctx)
	rs, err := c.query.Eval(ctx, rego.EvalParsedInput(input), rego.EvalMetrics(metrics.NoOp()))
	if err = ended(err); err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, nil
	}
	var out []Violation
	for _, set := range []struct {
		name   string
		action v1alpha1.EnforcementAction
	}{{"deny", c.Action}, {"warn", warnAction(c.Action)}} {
		val, ok := rs[0].Bindings[set.name]
		if !ok {
			continue
		}
		for _, item := range items(val) {
			v := toViolation(item)
			v.Source, v.Policy, v.Object, v.Action = "policy "+c.Name, c.Name, object, set.action
			out = append(out, v)
		}
	}
	return out, nil
}

// warnAction is what a warn rule does under a policy's action: it warns, unless the
// whole policy is a dry run.
func warnAction(a v1alpha1.EnforcementAction) v1alpha1.EnforcementAction {
	if a == v1alpha1.EnforcementDryRun {
		return a
	}
	return v1alpha1.EnforcementWarn
}

// items flattens a rule's value: a set (or array) of violations, or a single one.
func items(v any) []any {
	switch v := v.(type) {
	case []any:
		return v
	case nil:
		return nil
	case map[string]any:
		if _, ok := v["msg"]; ok {
			return []any{v}
		}
		// deny defined as an object of sets (deny.x contains ...): every value counts.
		var out []any
		for _, inner := range v {
			out = append(out, items(inner)...)
		}
		return out
	default:
		return []any{v}
	}
}

// toViolation reads one element of deny/warn: a string, or {msg, path, id}.
func toViolation(item any) Violation {
	switch x := item.(type) {
	case string:
		return Violation{Message: x}
	case map[string]any:
		v := Violation{Message: scalarString(x["msg"])}
		if v.Message == "" {
			v.Message = compactJSON(x)
		}
		v.Path = pathString(x["path"])
		v.ID = scalarString(x["id"])
		return v
	default:
		return Violation{Message: compactJSON(item)}
	}
}

func scalarString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	default:
		return compactJSON(x)
	}
}

// pathString accepts "spec.a.b" or ["spec", "a", 0, "b"].
func pathString(v any) string {
	arr, ok := v.([]any)
	if !ok {
		return scalarString(v)
	}
	var b strings.Builder
	for i, p := range arr {
		switch x := p.(type) {
		case json.Number:
			fmt.Fprintf(&b, "[%s]", x)
		default:
			if i > 0 {
				b.WriteString(".")
			}
			b.WriteString(scalarString(x))
		}
	}
	return b.String()
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
