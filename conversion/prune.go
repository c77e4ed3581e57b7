package conversion

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
)

// prunedField is a value pruning removes, with its place in the object.
type prunedField struct {
	tokens  []string
	pointer string
	value   any
}

// pruner tells which fields pruning with one schema removes from an object. What
// pruning removes depends only on the object's shape — its keys, where it has objects
// and lists, and their lengths — never on its values, and the objects of one kind in a
// review mostly share a few shapes: so the API server's pruning runs once per shape,
// and the fields it removed are looked up in each object of that shape.
type pruner struct {
	schema *structuralschema.Structural
	mu     sync.Mutex
	shapes map[string][][]string // shape → tokens of the removed fields, by pointer
}

// maxShapes bounds the shapes a pruner remembers; past it, pruning runs per object.
const maxShapes = 1024

func newPruner(s *structuralschema.Structural) *pruner {
	return &pruner{schema: s, shapes: map[string][][]string{}}
}

// prunedBy returns the fields that pruning view with the API server's own pruning
// removes, sorted by pointer. view is not modified.
func (p *pruner) prunedBy(view map[string]any) []prunedField {
	var b strings.Builder
	writeShape(&b, view)
	shape := b.String()
	p.mu.Lock()
	removed, known := p.shapes[shape]
	p.mu.Unlock()
	if !known {
		fields := pruneCopy(view, p.schema)
		removed = make([][]string, len(fields))
		for i, f := range fields {
			removed[i] = f.tokens
		}
		p.mu.Lock()
		if len(p.shapes) < maxShapes {
			p.shapes[shape] = removed
		}
		p.mu.Unlock()
		return fields
	}
	if len(removed) == 0 {
		return nil
	}
	out := make([]prunedField, len(removed))
	for i, tokens := range removed {
		parent, _ := parentOf(view, tokens)
		out[i] = prunedField{tokens: tokens, pointer: pointerOf(tokens), value: parent[tokens[len(tokens)-1]]}
	}
	return out
}

// writeShape writes what pruning depends on of v: object keys (quoted, sorted), list
// lengths, and where values are neither.
func writeShape(b *strings.Builder, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for _, k := range keys {
			b.WriteString(strconv.Quote(k))
			b.WriteByte(':')
			writeShape(b, x[k])
			b.WriteByte(',')
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for _, e := range x {
			writeShape(b, e)
			b.WriteByte(',')
		}
		b.WriteByte(']')
	default:
		b.WriteByte('.')
	}
}

// pruneCopy prunes a copy of view with s and returns the fields it removed, sorted by
// pointer.
func pruneCopy(view map[string]any, s *structuralschema.Structural) []prunedField {
	pruned := deepCopyJSON(view).(map[string]any)
	opts := structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}
	if len(pruning.PruneWithOptions(pruned, s, true, opts)) == 0 {
		return nil
	}
	// The paths pruning reports join keys with dots, which keys may contain too;
	// comparing before and after gives exact paths.
	var out []prunedField
	removedFields(view, pruned, nil, &out)
	slices.SortFunc(out, func(a, b prunedField) int { return strings.Compare(a.pointer, b.pointer) })
	return out
}

// removedFields appends the fields of orig that pruned lacks. Pruning only deletes
// object fields: lists keep their length.
func removedFields(orig, pruned any, path []string, out *[]prunedField) {
	switch o := orig.(type) {
	case map[string]any:
		p, _ := pruned.(map[string]any)
		for k, v := range o {
			pv, ok := p[k]
			if !ok {
				tokens := append(slices.Clone(path), k)
				*out = append(*out, prunedField{tokens: tokens, pointer: pointerOf(tokens), value: v})
				continue
			}
			removedFields(v, pv, append(path, k), out)
		}
	case []any:
		p, _ := pruned.([]any)
		for i, v := range o {
			if i < len(p) {
				removedFields(v, p[i], append(path, strconv.Itoa(i)), out)
			}
		}
	}
}

func pointerSet(fields []prunedField) map[string]bool {
	set := make(map[string]bool, len(fields))
	for _, f := range fields {
		set[f.pointer] = true
	}
	return set
}
