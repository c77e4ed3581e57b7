package gatekeeper

import (
	"encoding/json"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConverterMakesWhatInterfaceToValueMakes: the converter's values are
// ast.InterfaceToValue's, for what decoders make and for what it converts otherwise,
// and it refuses what ast.InterfaceToValue refuses.
func TestConverterMakesWhatInterfaceToValueMakes(t *testing.T) {
	type port struct {
		Name string `json:"name"`
		Port int    `json:"port"`
	}
	for name, x := range map[string]any{
		"object": map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "p", "labels": map[string]any{"app": "web"}, "annotations": map[string]any{}},
			"spec": map[string]any{
				"containers": []any{map[string]any{"name": "web", "image": "nginx:1", "ports": []any{map[string]any{"containerPort": int64(80)}}}},
				"replicas":   float64(2.5), "paused": false, "none": nil, "big": uint64(1) << 63, "n": 7,
				"nested": []any{[]any{}, []any{"a", int64(-1)}, map[string]any{}},
			},
		},
		"empty":        map[string]any{},
		"nil map":      map[string]any(nil),
		"typed values": map[string]any{"strings": []string{"a", "b"}, "labels": map[string]string{"a": "b"}, "number": json.Number("12.50")},
		"structs":      map[string]any{"ports": []port{{"http", 80}}, "one": port{"https", 443}},
		"a list":       []any{"x", map[string]any{"y": true}},
		"a string":     "s",
	} {
		want, err := ast.InterfaceToValue(x)
		require.NoError(t, err, name)
		var c converter
		got, err := c.value(x)
		require.NoError(t, err, name)
		assert.Equal(t, 0, ast.Compare(want, got), "%s: %v, want %v", name, got, want)
		assert.Equal(t, want.Hash(), got.Hash(), name)
	}
	bad := map[string]any{"ok": "x", "bad": map[string]any{"ch": make(chan int)}}
	_, wantErr := ast.InterfaceToValue(bad)
	require.Error(t, wantErr)
	var c converter
	_, err := c.value(bad)
	assert.EqualError(t, err, wantErr.Error())
}

// TestValueMemo: a value is remembered for equal input only, of the same types, and
// a change to the map it was converted from does not change what is remembered.
func TestValueMemo(t *testing.T) {
	var m valueMemo
	var c converter
	ns := map[string]any{"metadata": map[string]any{"name": "a", "labels": map[string]any{"team": "x"}}, "n": int64(1)}
	first, err := m.value(&c, ns)
	require.NoError(t, err)
	again, err := m.value(&c, map[string]any{"metadata": map[string]any{"name": "a", "labels": map[string]any{"team": "x"}}, "n": int64(1)})
	require.NoError(t, err)
	assert.Same(t, first.(ast.Object), again.(ast.Object), "an equal map is converted once")

	// The caller changes its map: what is remembered is what was converted.
	ns["metadata"].(map[string]any)["labels"].(map[string]any)["team"] = "y"
	changed, err := m.value(&c, ns)
	require.NoError(t, err)
	assert.NotSame(t, first.(ast.Object), changed.(ast.Object))
	want, _ := ast.InterfaceToValue(ns)
	assert.Equal(t, 0, ast.Compare(want, changed))

	// A float where there was an integer is another value.
	other, err := m.value(&c, map[string]any{"metadata": ns["metadata"], "n": float64(1)})
	require.NoError(t, err)
	want, _ = ast.InterfaceToValue(map[string]any{"metadata": ns["metadata"], "n": float64(1)})
	assert.Equal(t, 0, ast.Compare(want, other))
	assert.NotSame(t, changed.(ast.Object), other.(ast.Object))

	for _, pair := range [][2]any{
		{int64(1), float64(1)}, {int64(1), 1}, {[]any{}, map[string]any{}}, {nil, map[string]any{}},
		{map[string]any{"a": nil}, map[string]any{"b": nil}}, {[]any{"a"}, []any{"a", "b"}}, {[]string{"a"}, []string{"a"}},
	} {
		assert.False(t, sameValue(pair[0], pair[1]), "%#v and %#v", pair[0], pair[1])
	}
	assert.True(t, sameValue(map[string]any{"a": []any{int64(1), nil, "x"}}, map[string]any{"a": []any{int64(1), nil, "x"}}))
}

// TestRefCache: what OPA's virtual cache answers, refCache answers, across frames and
// after a reset; the references it is handed may be reused by the caller after.
func TestRefCache(t *testing.T) {
	c := refCaches.Get().(*refCache)
	defer refCaches.Put(c)
	c.reset()
	ref := func(s string) ast.Ref { return ast.MustParseRef(s) }
	v1, v2 := ast.StringTerm("one"), ast.StringTerm("two")

	key := ref(`data.a.b["x"]`)
	c.Put(key, v1)
	key[3] = ast.StringTerm("y") // the caller reuses its slice
	got, undefined := c.Get(ref(`data.a.b["x"]`))
	assert.Same(t, v1, got)
	assert.False(t, undefined)
	got, undefined = c.Get(ref(`data.a.b["y"]`))
	assert.Nil(t, got)
	assert.False(t, undefined, "never put")
	got, _ = c.Get(ref(`data.a.b`))
	assert.Nil(t, got, "a prefix of what was put")
	got, _ = c.Get(ref(`data.b.a["x"]`))
	assert.Nil(t, got, "the same terms in another order")

	// Undefined stays undefined, as in OPA's tree.
	c.Put(ref("data.a.u"), nil)
	c.Put(ref("data.a.u"), v2)
	got, undefined = c.Get(ref("data.a.u"))
	assert.Nil(t, got)
	assert.True(t, undefined)

	// A frame of its own (with), then back.
	c.Push()
	got, _ = c.Get(ref(`data.a.b["x"]`))
	assert.Nil(t, got, "a pushed frame starts empty")
	c.Put(ref(`data.a.b["x"]`), v2)
	got, _ = c.Get(ref(`data.a.b["x"]`))
	assert.Same(t, v2, got)
	assert.Len(t, c.Keys(), 1)
	c.Pop()
	got, _ = c.Get(ref(`data.a.b["x"]`))
	assert.Same(t, v1, got)
	assert.Len(t, c.Keys(), 2, "data.a.b.x, and data.a.u, which holds a value though undefined")

	// Many entries, some with the same hash by the order of their terms.
	for i := range 1000 {
		c.Put(ast.Ref{ast.DefaultRootDocument, ast.IntNumberTerm(i), ast.IntNumberTerm(1000 - i)}, ast.IntNumberTerm(i))
	}
	for i := range 1000 {
		got, _ := c.Get(ast.Ref{ast.DefaultRootDocument, ast.IntNumberTerm(i), ast.IntNumberTerm(1000 - i)})
		require.NotNil(t, got, i)
		assert.Equal(t, 0, ast.Compare(ast.IntNumberTerm(i).Value, got.Value), i)
	}

	c.reset()
	got, undefined = c.Get(ref(`data.a.b["x"]`))
	assert.Nil(t, got)
	assert.False(t, undefined)
	assert.Empty(t, c.Keys())
}

// reviewInput is input.review as Review made it before reviewValue: a Go map, which
// ast.InterfaceToValue converted.
func reviewInput(s *Subject, req *Request) map[string]any {
	review := map[string]any{
		"kind":            map[string]any{"group": s.Group, "version": s.Version, "kind": s.Kind},
		"name":            s.name(),
		"namespace":       s.Namespace,
		"operation":       req.Operation,
		"object":          s.Object,
		"namespaceObject": nil,
	}
	if s.NamespaceObject != nil {
		review["namespaceObject"] = s.NamespaceObject
	}
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

// TestReviewValue: input.review is what converting reviewInput made, for every
// operation and with or without what is optional; and a value Rego cannot hold is
// this review's error, as it was.
func TestReviewValue(t *testing.T) {
	obj := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d", "namespace": "n"}, "spec": map[string]any{"replicas": int64(2)}}
	old := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d", "namespace": "n"}, "spec": map[string]any{"replicas": int64(1)}}
	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "n", "labels": map[string]any{"team": "a"}}}
	alice := map[string]any{"username": "alice", "groups": []any{"dev"}, "extra": map[string]any{}}
	for i, c := range []struct {
		s   Subject
		req Request
	}{
		{Subject{Object: obj, Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "n", NamespaceObject: ns}, Request{Operation: "CREATE", UserInfo: alice}},
		{Subject{Object: obj, OldObject: old, Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "n"}, Request{Operation: "UPDATE", DryRun: true}},
		{Subject{Object: obj, Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "n", Name: "other"}, Request{Operation: "DELETE", UserInfo: map[string]any{}}},
		{Subject{Object: old, OldObject: obj, Kind: "Deployment"}, Request{Operation: "DELETE"}},
		{Subject{Object: obj, Generated: true, Version: "v1", Kind: "Pod", NamespaceObject: map[string]any{}}, Request{}},
		{Subject{Kind: "Nothing"}, Request{Operation: "CONNECT"}},
	} {
		want, err := ast.InterfaceToValue(reviewInput(&c.s, &c.req))
		require.NoError(t, err)
		got, err := reviewValue(&c.s, &c.req)
		require.NoError(t, err)
		assert.Equal(t, 0, ast.Compare(want, got), "%d: %v, want %v", i, got, want)
	}
	bad := &Subject{Object: map[string]any{"spec": map[string]any{"ch": make(chan int)}}, Kind: "Bad"}
	_, wantErr := ast.InterfaceToValue(reviewInput(bad, &Request{}))
	require.Error(t, wantErr)
	_, err := reviewValue(bad, &Request{})
	assert.EqualError(t, err, wantErr.Error())
}
