package policies

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/test/samplecharts"
)

func TestSchemaCheap(t *testing.T) {
	for _, v := range []string{"1.1.5", "2.0.0"} {
		ch, err := samplecharts.Load(v)
		require.NoError(t, err)
		assert.True(t, schemasAreCheap(ch, ""), "fireworks-app %s: local $refs, no cycle, small", v)
	}

	// A $ref cycle through anyOf: checking 22 nested values takes tens of seconds.
	recursive := `{"$defs": {"n": {"anyOf": [
		{"properties": {"a": {"$ref": "#/$defs/n"}}},
		{"properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["a"]}]}},
		"$ref": "#/$defs/n"}`
	assert.False(t, schemaCheap([]byte(recursive)), "a cycle")

	// No cycle, but each level refers to the next twice: 2^14 nodes written out.
	var defs []string
	for i := range 14 {
		defs = append(defs, fmt.Sprintf(`"d%d": {"anyOf": [{"$ref": "#/$defs/d%d"}, {"$ref": "#/$defs/d%d"}]}`, i, i+1, i+1))
	}
	defs = append(defs, `"d14": {"type": "string"}`)
	doubling := `{"$defs": {` + strings.Join(defs, ",") + `}, "$ref": "#/$defs/d0"}`
	assert.False(t, schemaCheap([]byte(doubling)), "too many nodes written out")

	assert.False(t, schemaCheap([]byte(`{"$ref": "https://example.com/s.json"}`)), "not local")
	assert.False(t, schemaCheap([]byte(`{"$ref": "#/$defs/missing"}`)), "dangling")
	assert.False(t, schemaCheap([]byte(`{"type": `)), "not JSON")
	assert.True(t, schemaCheap([]byte(`{"type": "object", "properties": {"a~1b": {"type": "string"}}, "$ref": "#/properties/a~01b"}`)), "~01 is ~1, a key that is there")

	parent := &chart.Chart{Metadata: &chart.Metadata{Name: "p"}, Schema: []byte(`{"type": "object"}`)}
	parent.AddDependency(&chart.Chart{Metadata: &chart.Metadata{Name: "sub"}, Schema: []byte(recursive)})
	assert.False(t, schemasAreCheap(parent, ""), "a subchart's schema counts")
}
