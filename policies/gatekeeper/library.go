package gatekeeper

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
)

// Library is an immutable set of compiled templates and their Constraints.
type Library struct {
	templates   map[string]*Template // by kind
	constraints []*Constraint        // by kind, then name
}

// NewLibrary returns the library of templates and constraints. A constraint whose kind
// no template defines is left out, and so is one that is not enforced here (a scoped
// action naming other enforcement points).
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
func (l *Library) Review(ctx context.Context, s *Subject, req *Request) []Result {
	if l.Empty() {
		return nil
	}
	if req == nil {
		req = &Request{}
	}
	var out []Result
	// The review is converted for Rego once, at the first constraint that matches, and
	// shared by all: converting it lazily again for each would cost more than most
	// templates' evaluation.
	var review, inventory *ast.Term
	var convErr error
	for _, c := range l.constraints {
		ok, err := c.Matches(s)
		if err != nil {
			out = append(out, Result{Constraint: c, Err: err, Generated: s.Generated})
			continue
		}
		if !ok {
			continue
		}
		if review == nil && convErr == nil {
			var v ast.Value
			if v, convErr = ast.InterfaceToValue(reviewInput(s, req)); convErr == nil {
				review = ast.NewTerm(v)
			}
		}
		if convErr != nil {
			out = append(out, Result{Constraint: c, Err: fmt.Errorf("input.review: %w", convErr), Generated: s.Generated})
			continue
		}
		t := l.templates[c.Kind]
		if t.Referential && inventory == nil {
			inv := req.Inventory
			if inv == nil {
				inv = map[string]any{}
			}
			v, err := ast.InterfaceToValue(inv)
			if err != nil {
				out = append(out, Result{Constraint: c, Err: fmt.Errorf("data.inventory: %w", err), Generated: s.Generated})
				continue
			}
			inventory = ast.NewTerm(v)
		}
		rs, err := t.eval(ctx, review, c.params, inventory)
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

// reviewInput is input.review for s, the shape of the AdmissionRequest Gatekeeper
// passes its templates, with namespaceObject beside it.
func reviewInput(s *Subject, req *Request) map[string]any {
	review := map[string]any{
		"kind":            map[string]any{"group": s.Group, "version": s.Version, "kind": s.Kind},
		"name":            s.name(),
		"namespace":       s.Namespace,
		"operation":       req.Operation,
		"object":          s.Object,
		"namespaceObject": nilIfEmpty(s.NamespaceObject),
	}
	// An AdmissionRequest always carries userInfo, empty in gator's reviews.
	review["userInfo"] = req.UserInfo
	if req.UserInfo == nil {
		review["userInfo"] = map[string]any{}
	}
	if s.OldObject != nil {
		review["oldObject"] = s.OldObject
	}
	if req.DryRun {
		review["dryRun"] = true
	}
	if req.Operation == "DELETE" && s.OldObject == nil {
		review["oldObject"] = s.Object
	}
	return review
}

func nilIfEmpty(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m
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
	rs, err := t.query.Eval(ctx, rego.EvalParsedInput(input), rego.EvalMetrics(metrics.NoOp()))
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, nil
	}
	set, _ := rs[0].Bindings["violation"].([]any)
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
