package conversion

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPrunerRemembersShapesNotValues: the fields a version prunes are found once per
// shape of object and then read from each object of that shape, values and all; an
// object of another shape, even one key more or a list one item longer, is pruned anew.
func TestPrunerRemembersShapesNotValues(t *testing.T) {
	fx := fireworks(t)
	p := fx.schemas.versions["v1-1-5"].declared
	spec := func(exposure any, ports []any, extra map[string]any) map[string]any {
		s := map[string]any{"replicaCount": 2, "exposure": exposure, "storage": map[string]any{"size": "1Gi"}, "ports": ports}
		for k, v := range extra {
			s[k] = v
		}
		return map[string]any{"spec": s}
	}
	cases := []map[string]any{
		spec("public", []any{map[string]any{"name": "web", "port": 80}}, nil),
		spec("private", []any{map[string]any{"name": "api", "port": 8080}}, nil), // same shape, other values
		spec(map[string]any{"mode": "private"}, []any{map[string]any{"name": "api", "port": 8080}}, nil),
		spec("public", []any{map[string]any{"name": "a"}, map[string]any{"name": "b", "typo": true}}, nil),
		spec("public", []any{map[string]any{"name": "web", "port": 80}}, map[string]any{"unknown": map[string]any{"x": 1}}),
	}
	p.mu.Lock()
	known := len(p.shapes) // the fixture is shared with other tests
	p.mu.Unlock()
	for i, view := range cases {
		before := deepCopyJSON(view)
		got := p.prunedBy(view)
		assert.Equal(t, pruneCopy(view, p.schema), got, "case %d", i)
		assert.Equal(t, before, view, "case %d: the object is left alone", i)
	}
	p.mu.Lock()
	assert.LessOrEqual(t, len(p.shapes)-known, len(cases)-1, "the second case reused the first one's shape")
	p.mu.Unlock()
	got := p.prunedBy(cases[1])
	if assert.NotEmpty(t, got, "v1-1-5 does not declare exposure") {
		assert.Equal(t, "private", got[0].value, "values come from the object, not from the one the shape was learnt on")
	}
}
