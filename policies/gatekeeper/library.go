package gatekeeper

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/compositor-dev/compositor/policies/membudget"
)

// Library is an immutable set of compiled templates and their Constraints.
type Library struct {
	templates   map[string]*Template // by kind
	constraints []*Constraint        // by kind, then name
	// batch evaluates the constraints that match an object together (batch.go); nil
	// when fewer than two of them can be.
	batch *batch
}

// NewLibrary returns the library of templates and constraints. A constraint whose kind
// no template defines is left out, and so is one that is not enforced here (a scoped
// action naming other enforcement points). With two constraints or more, it compiles
// them into one batch (batch.go), or takes the batch of a recent library with the same
// templates and constraints.
func NewLibrary(templates []*Template, constraints []*Constraint) *Library {
	l := &Library{templates: make(map[string]*Template, len(templates))}
	for _, t := range templates {
		l.templates[t.Kind] = t
	}
	for _, c := range constraints {
		if l.templates[c.Kind] != nil && c.Action != "" {
			l.constraints = append(l.constraints, c)
		}
	}
	slices.SortFunc(l.constraints, func(a, b *Constraint) int {
		return strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name)
	})
	if len(l.constraints) >= 2 {
		l.batch = batchOf(l.templates, l.constraints)
	}
	return l
}

// ReadsHistory reports whether a template of an enforced constraint may read the
// operation or the old object (Template.ReadsHistory).
func (l *Library) ReadsHistory() bool {
	if l == nil {
		return false
	}
	for _, c := range l.constraints {
		if l.templates[c.Kind].ReadsHistory {
			return true
		}
	}
	return false
}

// Empty reports whether the library enforces no constraint.
func (l *Library) Empty() bool { return l == nil || len(l.constraints) == 0 }

// Same reports whether l and other enforce the same thing: the very constraints, as
// parsed, with the very templates of their kinds, as compiled. Equal copies are not
// the same: a library rebuilt from what was parsed and compiled before is. Two libraries
// that enforce nothing are the same.
func (l *Library) Same(other *Library) bool {
	if l.Empty() || other.Empty() {
		return l.Empty() && other.Empty()
	}
	return slices.Equal(l.constraints, other.constraints) &&
		!slices.ContainsFunc(l.constraints, func(c *Constraint) bool { return l.templates[c.Kind] != other.templates[c.Kind] })
}

// Constraints lists the enforced constraints, by kind and name.
func (l *Library) Constraints() []*Constraint {
	if l == nil {
		return nil
	}
	return slices.Clone(l.constraints)
}

// Template returns the template of a kind, nil when there is none.
func (l *Library) Template(kind string) *Template {
	if l == nil {
		return nil
	}
	return l.templates[kind]
}

// Request is the admission context of the objects under review: what Gatekeeper's
// input.review holds besides the object.
type Request struct {
	// Operation is CREATE, UPDATE, DELETE or CONNECT; empty as in gator's and the
	// audit's reviews.
	Operation string
	// UserInfo is input.review.userInfo ({username, uid, groups, extra}); nil leaves
	// it out.
	UserInfo map[string]any
	// DryRun is input.review.dryRun.
	DryRun bool
	// Inventory is data.inventory for referential templates (see Inventory).
	Inventory map[string]any
}

// Result is one violation, or one constraint that could not be evaluated (Err).
type Result struct {
	Constraint *Constraint
	// Msg and Details are the violation's msg and details.
	Msg     string
	Details any
	// Generated says the violation is about a Pod implied by a workload's template.
	Generated bool
	Err       error
}

// Review evaluates every constraint that matches s and returns its violations, in the
// order of the constraints. A constraint whose match cannot be decided or whose
// evaluation fails yields one Result with Err set; the caller decides what that does.
//
// The constraints that match are evaluated together, in one evaluation (batch.go),
// when there are two or more of them; when that evaluation fails, each is evaluated on
// its own, so that a failure is its constraint's alone.
func (l *Library) Review(ctx context.Context, s *Subject, req *Request) []Result {
	if l.Empty() {
		return nil
	}
	return l.review(ctx, s, req, l.batch)
}

// batchFailures counts the batches whose evaluation failed, so that each of their
// constraints was evaluated on its own.
var batchFailures atomic.Uint64

// reviewEach is Review with every constraint evaluated on its own.
func (l *Library) reviewEach(ctx context.Context, s *Subject, req *Request) []Result {
	return l.review(ctx, s, req, nil)
}

// Outcomes of a constraint's match in a review.
const (
	unmatched = iota
	matched
	matchFailed
	batched // matched, and evaluated in the batch
)

func (l *Library) review(ctx context.Context, s *Subject, req *Request, b *batch) []Result {
	if l.Empty() {
		return nil
	}
	if req == nil {
		req = &Request{}
	}
	state := make([]uint8, len(l.constraints))
	var matchErrs []error
	var count, referential int
	var ls subjectLabels
	for i, c := range l.constraints {
		ok, err := c.matches(s, &ls)
		switch {
		case err != nil:
			state[i] = matchFailed
			matchErrs = append(matchErrs, err)
		case ok:
			state[i] = matched
			count++
			if l.templates[c.Kind].Referential {
				referential++
			}
		}
	}
	// The review is converted for Rego once, and shared by all the constraints: converting
	// it again for each would cost more than most templates' evaluation.
	var review, inventory *ast.Term
	var convErr, invErr error
	if count > 0 {
		var v ast.Value
		if v, convErr = reviewValue(s, req); convErr == nil {
			review = ast.NewTerm(v)
		}
	}
	if referential > 0 && convErr == nil {
		inv := req.Inventory
		if inv == nil {
			inv = map[string]any{}
		}
		var v ast.Value
		if v, invErr = inventoryMemo.value(&converter{}, inv); invErr == nil {
			inventory = ast.NewTerm(v)
		} else {
			invErr = fmt.Errorf("data.inventory: %w", invErr)
		}
	}
	var results *[2]ast.Object
	if b != nil && count >= 2 && convErr == nil {
		results = l.evalBatch(ctx, b, state, review, inventory)
	}
	var out []Result
	for i, c := range l.constraints {
		var rs []Result
		var err error
		switch state[i] {
		case unmatched:
			continue
		case matchFailed:
			err, matchErrs = matchErrs[0], matchErrs[1:]
		case batched:
			if results != nil {
				set := results[0]
				if b.slots[i].mode != direct {
					set = results[1]
				}
				rs, err = batchViolations(set.Get(b.slots[i].name))
				break
			}
			// The batch failed: this constraint is evaluated on its own.
			fallthrough
		case matched:
			t := l.templates[c.Kind]
			switch {
			case convErr != nil:
				err = fmt.Errorf("input.review: %w", convErr)
			case t.Referential && invErr != nil:
				err = invErr
			default:
				rs, err = t.eval(ctx, review, c.params, inventory)
			}
		}
		if err != nil {
			out = append(out, Result{Constraint: c, Err: err, Generated: s.Generated})
			continue
		}
		for _, r := range rs {
			r.Constraint, r.Generated = c, s.Generated
			out = append(out, r)
		}
	}
	return out
}

// evalBatch evaluates in b the matched constraints it holds, marking them batched in
// state; it returns their violations by name, nil when there are fewer than two of
// them or the evaluation fails.
func (l *Library) evalBatch(ctx context.Context, b *batch, state []uint8, review, inventory *ast.Term) *[2]ast.Object {
	var lists [wrappedReferential + 1][]*ast.Term
	n := 0
	for i, c := range l.constraints {
		slot := b.slots[i]
		if state[i] != matched || slot.mode == notBatched || (l.templates[c.Kind].Referential && inventory == nil) {
			continue
		}
		lists[slot.mode] = append(lists[slot.mode], slot.name)
		n++
	}
	if n < 2 {
		return nil
	}
	items := make([][2]*ast.Term, 0, 6)
	items = append(items,
		ast.Item(ast.InternedTerm("review"), review),
		ast.Item(ast.InternedTerm("params"), b.params),
		ast.Item(ast.InternedTerm("direct"), ast.ArrayTerm(lists[direct]...)),
		ast.Item(ast.InternedTerm("wrapped"), ast.ArrayTerm(lists[wrapped]...)),
		ast.Item(ast.InternedTerm("wrappedReferential"), ast.ArrayTerm(lists[wrappedReferential]...)))
	if inventory != nil {
		items = append(items, ast.Item(ast.InternedTerm("inventory"), inventory))
	}
	for i, c := range l.constraints {
		if state[i] == matched && b.slots[i].mode != notBatched && (!l.templates[c.Kind].Referential || inventory != nil) {
			state[i] = batched
		}
	}
	results, err := b.eval(ctx, ast.NewObject(items...), len(lists[wrapped])+len(lists[wrappedReferential]) > 0)
	if err != nil {
		batchFailures.Add(1)
		return nil
	}
	return &results
}

// Matching lists the constraints whose match selects s.
func (l *Library) Matching(s *Subject) []*Constraint {
	var out []*Constraint
	for _, c := range l.Constraints() {
		if ok, err := c.Matches(s); ok || err != nil {
			out = append(out, c)
		}
	}
	return out
}

// eval runs the template for one constraint on one review. A value Rego cannot hold
// panics in OPA's conversion; that is this evaluation's failure, not the process's.
func (t *Template) eval(ctx context.Context, review, params, inventory *ast.Term) (_ []Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("evaluating the template failed: %v", p)
		}
	}()
	var input ast.Value = ast.NewObject(ast.Item(ast.InternedTerm("review"), review), ast.Item(ast.InternedTerm("parameters"), params))
	if t.Referential {
		input = ast.NewObject(ast.Item(ast.InternedTerm("input"), ast.NewTerm(input)), ast.Item(ast.InternedTerm("inventory"), inventory))
	}
	ctx, ended := membudget.Track(ctx)
	rs, err := evalQuery(ctx, t.query, input)
	if err = ended(err); err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, nil
	}
	return violations(rs[0].Bindings["violation"])
}

// batchViolations are the Results of a template's violation as a batch gives it: as
// Rego holds it, nil when undefined.
func batchViolations(t *ast.Term) ([]Result, error) {
	if t == nil {
		return nil, nil
	}
	switch v := t.Value.(type) {
	case ast.Set:
		if v.Len() == 0 {
			return nil, nil
		}
	case *ast.Array:
		if v.Len() == 0 {
			return nil, nil
		}
	default:
		// Not a collection: no violations, as violations finds.
		return nil, nil
	}
	v, err := ast.JSON(t.Value)
	if err != nil {
		return nil, err
	}
	return violations(v)
}

// violations are the Results of a template's violation, as Rego gives it to Go.
func violations(v any) ([]Result, error) {
	set, _ := v.([]any)
	if len(set) == 0 {
		return nil, nil
	}
	out := make([]Result, 0, len(set))
	for _, v := range set {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("a violation must be an object with msg, got %s", short(v))
		}
		msg, ok := m["msg"].(string)
		if !ok {
			return nil, fmt.Errorf("a violation's msg must be a string, got %s", short(m["msg"]))
		}
		out = append(out, Result{Msg: msg, Details: m["details"]})
	}
	slices.SortFunc(out, func(a, b Result) int { return strings.Compare(a.Msg, b.Msg) })
	return out, nil
}

func short(v any) string {
	s := fmt.Sprintf("%v", v)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
