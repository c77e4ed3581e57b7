package webhooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
)

// ConversionDataAnnotation holds, on an object read through a served version, the
// values that version does not have, as a JSON object from JSON Pointer (RFC 6901) to
// value, e.g. {"/spec/exposure":"public"}. Writing the object back through that version
// restores them; removing an entry drops its value.
const ConversionDataAnnotation = "compositor.dev/conversion-data"

var (
	// ErrBadConversionData means the ConversionDataAnnotation of an object written
	// through a served version cannot be read, or points outside spec and status.
	ErrBadConversionData = errors.New("unreadable " + ConversionDataAnnotation + " annotation")
	// ErrConversionDataTooLarge means the values a version lacks do not fit in the
	// object's annotations.
	ErrConversionDataTooLarge = errors.New("the values the target version lacks do not fit in the annotations")
)

// stashedRoots are the parts of an object whose values conversion may stash: the rest
// is metadata, which conversion must leave alone.
var stashedRoots = []string{"spec", "status"}

// convertObject converts obj, a decoded object of version from, to version to, in place.
// Served → hub restores the stash; hub → served stashes what the served version does
// not have; served → served goes through the hub.
func (s *Schemas) convertObject(obj map[string]any, from, to string) error {
	if from != to {
		if from != s.hub {
			if err := restore(obj); err != nil {
				return err
			}
		}
		if to != s.hub {
			if err := s.stash(obj, to); err != nil {
				return err
			}
		}
	}
	obj["apiVersion"] = s.group + "/" + to
	return nil
}

// restore merges the stash of obj back into spec and status and removes the
// annotation. A value the client set, or a container the client removed or replaced,
// wins over the stash: the client wrote through a served version after reading the
// stash, so its object is newer.
func restore(obj map[string]any) error {
	annotations, err := annotationsOf(obj)
	if err != nil {
		return err
	}
	raw, ok := annotations[ConversionDataAnnotation]
	if !ok {
		return nil
	}
	text, ok := raw.(string)
	if !ok {
		return fmt.Errorf("%w: it is %s, not a string", ErrBadConversionData, jsonKind(raw))
	}
	stash := map[string]any{}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&stash); err != nil {
		return fmt.Errorf("%w: %w", ErrBadConversionData, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the JSON object", ErrBadConversionData)
	}
	// Parents before children, so a hand-written stash with both restores both.
	pointers := make([]string, 0, len(stash))
	for p := range stash {
		pointers = append(pointers, p)
	}
	slices.Sort(pointers)
	for _, p := range pointers {
		tokens, err := parsePointer(p)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadConversionData, err)
		}
		if len(tokens) < 2 || !slices.Contains(stashedRoots, tokens[0]) {
			return fmt.Errorf("%w: %q is not inside spec or status", ErrBadConversionData, p)
		}
		setIfAbsent(obj, tokens, stash[p])
	}
	removeAnnotation(obj, annotations)
	return nil
}

// setIfAbsent sets the value at tokens unless the value or one of its parents is not
// there to hold it.
func setIfAbsent(obj map[string]any, tokens []string, v any) {
	parent, ok := parentOf(obj, tokens)
	if !ok {
		return
	}
	if _, set := parent[tokens[len(tokens)-1]]; !set {
		parent[tokens[len(tokens)-1]] = v
	}
}

// parentOf is the object that holds the value at tokens, if the path leads to one.
func parentOf(obj map[string]any, tokens []string) (map[string]any, bool) {
	var cur any = obj
	for _, tok := range tokens[:len(tokens)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	parent, ok := cur.(map[string]any)
	return parent, ok
}

// stash moves out of spec and status every value that version to would not show: what
// its schema prunes, and the fields it does not declare where another served version
// does (fields of other chart versions, which it would otherwise show as unknown
// fields). Fields no version declares stay: every version shows them alike.
func (s *Schemas) stash(obj map[string]any, to string) error {
	annotations, err := annotationsOf(obj)
	if err != nil {
		return err
	}
	// A stash on a hub object is stale: the hub keeps every value itself.
	if _, ok := annotations[ConversionDataAnnotation]; ok {
		removeAnnotation(obj, annotations)
	}

	target := s.versions[to]
	view := map[string]any{}
	for _, k := range stashedRoots {
		if v, ok := obj[k]; ok {
			view[k] = v
		}
	}
	undeclared := target.declared.prunedBy(view)
	if len(undeclared) == 0 {
		return nil
	}
	others := map[string]map[string]bool{}
	var pruned map[string]bool // what the API server would prune, when needed
	var moved []prunedField
	for _, f := range undeclared {
		if !s.declaredElsewhere(view, f.tokens, to, others) {
			if pruned == nil {
				pruned = pointerSet(target.pruning.prunedBy(view))
			}
			if !pruned[f.pointer] {
				continue
			}
		}
		moved = append(moved, f)
	}
	if len(moved) == 0 {
		return nil
	}
	stash := make(map[string]any, len(moved))
	for _, f := range moved {
		stash[f.pointer] = f.value
		deleteAt(obj, f.tokens)
	}
	encoded, err := compactJSON(stash)
	if err != nil {
		return fmt.Errorf("encoding the %s annotation: %w", ConversionDataAnnotation, err)
	}
	annotations, err = annotationsOf(obj)
	if err != nil {
		return err
	}
	if annotations == nil {
		annotations = map[string]any{}
		metadata, _ := obj["metadata"].(map[string]any)
		if metadata == nil {
			metadata = map[string]any{}
			obj["metadata"] = metadata
		}
		metadata["annotations"] = annotations
	}
	annotations[ConversionDataAnnotation] = encoded
	return checkAnnotationsSize(annotations, to)
}

// declaredElsewhere tells whether a served version other than to keeps the field at
// tokens when it drops every field it does not declare. others caches what each
// version drops from view.
func (s *Schemas) declaredElsewhere(view map[string]any, tokens []string, to string, others map[string]map[string]bool) bool {
	for _, name := range s.served {
		if name == to {
			continue
		}
		dropped, ok := others[name]
		if !ok {
			dropped = pointerSet(s.versions[name].declared.prunedBy(view))
			others[name] = dropped
		}
		if !droppedAtOrAbove(dropped, tokens) {
			return true
		}
	}
	return false
}

func droppedAtOrAbove(dropped map[string]bool, tokens []string) bool {
	var b strings.Builder
	for _, tok := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointerToken(tok))
		if dropped[b.String()] {
			return true
		}
	}
	return false
}

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

func deleteAt(obj map[string]any, tokens []string) {
	if parent, ok := parentOf(obj, tokens); ok {
		delete(parent, tokens[len(tokens)-1])
	}
}

// annotationsOf returns metadata.annotations of obj, nil when there are none.
func annotationsOf(obj map[string]any) (map[string]any, error) {
	metadata, ok := obj["metadata"]
	if !ok || metadata == nil {
		return nil, nil
	}
	m, ok := metadata.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: metadata is %s", ErrMalformedObject, jsonKind(metadata))
	}
	annotations, ok := m["annotations"]
	if !ok || annotations == nil {
		return nil, nil
	}
	a, ok := annotations.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: metadata.annotations is %s", ErrMalformedObject, jsonKind(annotations))
	}
	return a, nil
}

// removeAnnotation removes the stash, and the annotations with it when it was the only
// one, so a round trip gives back the object it started from.
func removeAnnotation(obj map[string]any, annotations map[string]any) {
	delete(annotations, ConversionDataAnnotation)
	if len(annotations) == 0 {
		delete(obj["metadata"].(map[string]any), "annotations")
	}
}

func checkAnnotationsSize(annotations map[string]any, version string) error {
	total := 0
	for k, v := range annotations {
		s, _ := v.(string)
		total += len(k) + len(s)
	}
	if total > apivalidation.TotalAnnotationSizeLimitB {
		return fmt.Errorf("%w: version %s lacks %d bytes of values, and annotations may hold %d bytes in all; read the object through a newer version",
			ErrConversionDataTooLarge, version, len(annotations[ConversionDataAnnotation].(string)), apivalidation.TotalAnnotationSizeLimitB)
	}
	return nil
}

// compactJSON encodes v without spaces or HTML escaping; maps come out with sorted keys,
// so equal stashes give equal annotations.
func compactJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

func pointerOf(tokens []string) string {
	var b strings.Builder
	for _, tok := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointerToken(tok))
	}
	return b.String()
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
var pointerUnescaper = strings.NewReplacer("~1", "/", "~0", "~")

func escapePointerToken(tok string) string {
	if !strings.ContainsAny(tok, "~/") {
		return tok
	}
	return pointerEscaper.Replace(tok)
}

// parsePointer splits a JSON Pointer into its unescaped tokens.
func parsePointer(p string) ([]string, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%q is not a JSON Pointer", p)
	}
	tokens := strings.Split(p[1:], "/")
	for i, tok := range tokens {
		for j := 0; j < len(tok); j++ {
			if tok[j] != '~' {
				continue
			}
			if j+1 == len(tok) || (tok[j+1] != '0' && tok[j+1] != '1') {
				return nil, fmt.Errorf("%q is not a JSON Pointer: ~ must be followed by 0 or 1", p)
			}
			j++
		}
		tokens[i] = pointerUnescaper.Replace(tok)
	}
	return tokens, nil
}

// deepCopyJSON copies a decoded JSON value.
func deepCopyJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopyJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopyJSON(e)
		}
		return out
	default:
		return v
	}
}
