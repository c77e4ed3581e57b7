package gatekeeper

import (
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The objects under review are converted to Rego values once per review (and shared
// by its constraints), yet that conversion was still about a quarter of the bytes an
// admission write allocated. A converter makes the very values ast.InterfaceToValue
// makes, with fewer allocations: the terms of an object's keys and values in one block,
// and no slice of pointers to them nor of the object's pairs, which ast.NewObject copies.

// converter converts values for Rego; items is room for the pairs of the object being
// made, reused from one object to the next.
type converter struct {
	items [][2]*ast.Term
}

// value is ast.InterfaceToValue(x): maps and lists are walked here, and every other
// value (strings, numbers, booleans, null, a Rego value, and whatever
// ast.InterfaceToValue converts by a JSON round trip or refuses) is converted by
// ast.InterfaceToValue, with its errors.
func (c *converter) value(x any) (ast.Value, error) {
	switch x := x.(type) {
	case map[string]any:
		terms := make([]ast.Term, 2*len(x))
		i := 0
		for k, v := range x {
			var key ast.Value = ast.String(k)
			val, err := c.value(v)
			if err != nil {
				return nil, err
			}
			terms[i].Value, terms[i+1].Value = key, val
			i += 2
		}
		// The values are converted above, before items is filled: converting one of
		// them fills items for its own pairs.
		c.items = c.items[:0]
		for i := 0; i < len(terms); i += 2 {
			c.items = append(c.items, [2]*ast.Term{&terms[i], &terms[i+1]})
		}
		return ast.NewObject(c.items...), nil
	case []any:
		terms := make([]ast.Term, len(x))
		elems := make([]*ast.Term, len(x))
		for i, v := range x {
			val, err := c.value(v)
			if err != nil {
				return nil, err
			}
			terms[i].Value = val
			elems[i] = &terms[i]
		}
		return ast.NewArray(elems...), nil
	}
	return ast.InterfaceToValue(x)
}

// What a write's reviews share is converted once: its objects are reviewed one by
// one (Library.Review), each with the same Namespace object, the same userInfo and the
// same inventory, which made about half of the objects converted. A valueMemo keeps
// the last of them converted, with a copy of what it was converted from, and hands its
// value over again for an equal one: equal as Go values, of the same types (so that
// converting it would make the very same value). A Rego value is never modified once
// made, so reviews may share it.
type valueMemo struct {
	last atomic.Pointer[memoEntry]
}

type memoEntry struct {
	src map[string]any // a deep copy: the caller's map may change after
	val ast.Value
}

var namespaceMemo, userInfoMemo, inventoryMemo valueMemo

// value is c.value(x), or the value remembered for an equal x.
func (m *valueMemo) value(c *converter, x map[string]any) (ast.Value, error) {
	if e := m.last.Load(); e != nil && sameValue(e.src, x) {
		return e.val, nil
	}
	v, err := c.value(x)
	if err != nil {
		return nil, err
	}
	if cp, ok := copyValue(x); ok {
		m.last.Store(&memoEntry{src: cp.(map[string]any), val: v})
	}
	return v, nil
}

// reviewValue is input.review for s, the shape of the AdmissionRequest Gatekeeper
// passes its templates, with namespaceObject beside it; made for Rego directly, its
// namespaceObject and userInfo converted once for all the reviews that share them.
func reviewValue(s *Subject, req *Request) (ast.Value, error) {
	var c converter
	object, err := c.value(s.Object)
	if err != nil {
		return nil, err
	}
	namespaceObject := ast.Value(ast.Null{})
	if s.NamespaceObject != nil {
		if namespaceObject, err = namespaceMemo.value(&c, s.NamespaceObject); err != nil {
			return nil, err
		}
	}
	// An AdmissionRequest always carries userInfo, empty in gator's reviews.
	userInfo := req.UserInfo
	if userInfo == nil {
		userInfo = map[string]any{}
	}
	user, err := userInfoMemo.value(&c, userInfo)
	if err != nil {
		return nil, err
	}
	items := make([][2]*ast.Term, 0, 9)
	items = append(items,
		ast.Item(reviewKeys.kind, ast.NewTerm(ast.NewObject(
			ast.Item(reviewKeys.group, ast.StringTerm(s.Group)),
			ast.Item(reviewKeys.version, ast.StringTerm(s.Version)),
			ast.Item(reviewKeys.kind, ast.StringTerm(s.Kind))))),
		ast.Item(reviewKeys.name, ast.StringTerm(s.name())),
		ast.Item(reviewKeys.namespace, ast.StringTerm(s.Namespace)),
		ast.Item(reviewKeys.operation, ast.StringTerm(req.Operation)),
		ast.Item(reviewKeys.object, ast.NewTerm(object)),
		ast.Item(reviewKeys.namespaceObject, ast.NewTerm(namespaceObject)),
		ast.Item(reviewKeys.userInfo, ast.NewTerm(user)))
	switch {
	case s.OldObject != nil:
		old, err := c.value(s.OldObject)
		if err != nil {
			return nil, err
		}
		items = append(items, ast.Item(reviewKeys.oldObject, ast.NewTerm(old)))
	case req.Operation == "DELETE":
		items = append(items, ast.Item(reviewKeys.oldObject, ast.NewTerm(object)))
	}
	if req.DryRun {
		items = append(items, ast.Item(reviewKeys.dryRun, ast.InternedTerm(true)))
	}
	return ast.NewObject(items...), nil
}

// reviewKeys are the keys of input.review.
var reviewKeys = struct {
	kind, group, version, name, namespace, operation, object, namespaceObject, userInfo, oldObject, dryRun *ast.Term
}{
	ast.StringTerm("kind"), ast.StringTerm("group"), ast.StringTerm("version"), ast.StringTerm("name"),
	ast.StringTerm("namespace"), ast.StringTerm("operation"), ast.StringTerm("object"),
	ast.StringTerm("namespaceObject"), ast.StringTerm("userInfo"), ast.StringTerm("oldObject"), ast.StringTerm("dryRun"),
}

// sameValue tells whether a and b are equal values of the types a JSON or YAML
// decoder makes (maps, lists, strings, numbers, booleans, null), of the same types;
// any other value is equal to nothing.
func sameValue(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case string, bool, int, int64, uint64, float64:
		return a == b
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !sameValue(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// copyValue is a deep copy of x, when x is made only of the types sameValue compares.
func copyValue(x any) (any, bool) {
	switch x := x.(type) {
	case nil, string, bool, int, int64, uint64, float64:
		return x, true
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, v := range x {
			cp, ok := copyValue(v)
			if !ok {
				return nil, false
			}
			out[k] = cp
		}
		return out, true
	case []any:
		out := make([]any, len(x))
		for i, v := range x {
			cp, ok := copyValue(v)
			if !ok {
				return nil, false
			}
			out[i] = cp
		}
		return out, true
	}
	return nil, false
}
