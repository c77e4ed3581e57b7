package policies

import (
	"encoding/json"
	"strings"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/utils/lru"
)

// A schema is cheap when checking values against it costs at most a small multiple of
// the values' size: its $refs are local and never cycle, and written out as a tree,
// every $ref replaced by what it points at, it has at most cheapSchemaNodes nodes. A
// recursive schema (a $ref cycle) with anyOf or oneOf can take time exponential in the
// depth of values only a few dozen nodes big; a schema is its chart's, and a chart
// may be a tenant's, so only a cheap schema is ever checked where a runaway could not
// be stopped.
const cheapSchemaNodes = 2000

// cheapSchemas remembers, by chart digest, whether every schema of a chart is cheap.
var cheapSchemas = lru.New(1024)

// schemasAreCheap reports whether the schemas of ch and of its subcharts are all
// cheap; digest, when set, keeps the answer.
func schemasAreCheap(ch *chart.Chart, digest string) bool {
	if digest != "" {
		if v, ok := cheapSchemas.Get(digest); ok {
			return v.(bool)
		}
	}
	cheap := chartSchemasCheap(ch)
	if digest != "" {
		cheapSchemas.Add(digest, cheap)
	}
	return cheap
}

func chartSchemasCheap(ch *chart.Chart) bool {
	if ch == nil {
		return false
	}
	if len(ch.Schema) > 0 && !schemaCheap(ch.Schema) {
		return false
	}
	for _, sub := range ch.Dependencies() {
		if !chartSchemasCheap(sub) {
			return false
		}
	}
	return true
}

// schemaCheap reports whether one schema document is cheap (see cheapSchemaNodes).
func schemaCheap(doc []byte) bool {
	var root any
	if err := json.Unmarshal(doc, &root); err != nil {
		return false
	}
	c := &costCounter{root: root, memo: map[string]int{}, visiting: map[string]bool{}}
	n := c.size(root)
	return n >= 0 && n <= cheapSchemaNodes
}

// costCounter counts the nodes of a schema written out as a tree; -1 means too many,
// a $ref that is not local, or a $ref cycle.
type costCounter struct {
	root     any
	memo     map[string]int
	visiting map[string]bool
}

func (c *costCounter) size(node any) int {
	switch v := node.(type) {
	case map[string]any:
		total := 1
		for key, child := range v {
			var n int
			if key == "$ref" || key == "$dynamicRef" {
				ref, ok := child.(string)
				if !ok {
					return -1
				}
				n = c.ref(ref)
			} else {
				n = c.size(child)
			}
			if n < 0 {
				return -1
			}
			if total += n; total > cheapSchemaNodes {
				return -1
			}
		}
		return total
	case []any:
		total := 1
		for _, child := range v {
			n := c.size(child)
			if n < 0 {
				return -1
			}
			if total += n; total > cheapSchemaNodes {
				return -1
			}
		}
		return total
	default:
		return 1
	}
}

// ref counts what a local $ref ("#", "#/$defs/x") points at.
func (c *costCounter) ref(ref string) int {
	if !strings.HasPrefix(ref, "#") {
		return -1
	}
	if n, ok := c.memo[ref]; ok {
		return n
	}
	if c.visiting[ref] {
		return -1 // a cycle
	}
	target, ok := resolvePointer(c.root, strings.TrimPrefix(ref, "#"))
	if !ok {
		return -1
	}
	c.visiting[ref] = true
	n := c.size(target)
	delete(c.visiting, ref)
	c.memo[ref] = n
	return n
}

// resolvePointer follows a JSON Pointer ("" is the document) through doc.
func resolvePointer(doc any, pointer string) (any, bool) {
	if pointer == "" {
		return doc, true
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, false
	}
	node := doc
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return node, true
}
