package crd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrInvalidSchema means values.schema.json is not JSON, or not a valid JSON Schema of
// its draft.
var ErrInvalidSchema = errors.New("invalid values.schema.json")

// ErrUnsupportedDraft means $schema names a dialect other than JSON Schema draft-04,
// -06, -07, 2019-09 or 2020-12.
var ErrUnsupportedDraft = errors.New("unsupported JSON Schema draft")

// draft is a JSON Schema dialect, named by its year or number.
type draft int

const (
	draft4    draft = 4
	draft6    draft = 6
	draft7    draft = 7
	draft2019 draft = 2019
	draft2020 draft = 2020
)

// defaultBase is the base URI of a schema without $id, the one Helm uses too.
const defaultBase = "file:///values.schema.json"

func draftFromURI(uri string) (draft, bool) {
	u := strings.TrimSuffix(uri, "#")
	u = strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	switch u {
	case "json-schema.org/draft-04/schema":
		return draft4, true
	case "json-schema.org/draft-06/schema":
		return draft6, true
	case "json-schema.org/draft-07/schema":
		return draft7, true
	case "json-schema.org/draft/2019-09/schema":
		return draft2019, true
	case "json-schema.org/draft/2020-12/schema", "json-schema.org/schema":
		return draft2020, true
	}
	return 0, false
}

// schemaInfo is where a schema object sits: its base URI, dialect and JSON pointer.
type schemaInfo struct {
	base  string
	draft draft
	ptr   string
}

// document is a parsed values.schema.json with its embedded resources ($id) and
// anchors indexed, so local references resolve without any I/O.
type document struct {
	root      any
	resources map[string]schemaTarget // absolute URI without fragment
	anchors   map[string]schemaTarget // absolute URI with #anchor
	info      map[uintptr]schemaInfo  // per schema object (map identity)
}

type schemaTarget struct {
	node any
	info schemaInfo
}

// parseSchema decodes JSON keeping every number exact (json.Number).
func parseSchema(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the top-level value", ErrInvalidSchema)
	}
	return doc, nil
}

// errNoFetch is what the compiler's loader answers: nothing is ever fetched.
var errNoFetch = errors.New("remote references are not fetched")

type refusingLoader struct{}

func (refusingLoader) Load(string) (any, error) { return nil, errNoFetch }

// compileCheck rejects schemas that are not valid under their draft's metaschema, using
// the same library Helm validates with. Schemas with remote references cannot be fully
// compiled without fetching them; those pass here and their references become
// unknown-field fragments.
func compileCheck(doc any) error {
	c := jsonschema.NewCompiler()
	c.UseLoader(refusingLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(defaultBase, doc); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	if _, err := c.Compile(defaultBase); err != nil {
		var load *jsonschema.LoadURLError
		if errors.As(err, &load) || errors.Is(err, errNoFetch) {
			return nil
		}
		return fmt.Errorf("%w: %w", ErrInvalidSchema, err)
	}
	return nil
}

// newDocument parses and checks a schema and indexes it for reference resolution. file
// prefixes the JSON pointers recorded for the report ("" for the chart's own schema).
func newDocument(b []byte, file string) (*document, error) {
	root, err := parseSchema(b)
	if err != nil {
		return nil, err
	}
	d := draft2020
	if m, ok := root.(map[string]any); ok {
		if s, ok := m["$schema"]; ok {
			uri, _ := s.(string)
			if d, ok = draftFromURI(uri); !ok {
				return nil, fmt.Errorf("%w: $schema %q", ErrUnsupportedDraft, uri)
			}
		}
	} else if _, ok := root.(bool); !ok {
		return nil, fmt.Errorf("%w: a schema is an object or a boolean, not %T", ErrInvalidSchema, root)
	}
	if err := compileCheck(root); err != nil {
		return nil, err
	}
	doc := &document{
		root:      root,
		resources: map[string]schemaTarget{},
		anchors:   map[string]schemaTarget{},
		info:      map[uintptr]schemaInfo{},
	}
	rootInfo := schemaInfo{base: defaultBase, draft: d, ptr: file + "#"}
	doc.resources[defaultBase] = schemaTarget{node: root, info: rootInfo}
	doc.index(root, rootInfo, true)
	return doc, nil
}

func identity(m map[string]any) uintptr { return reflect.ValueOf(m).Pointer() }

func resolveURI(base, ref string) (string, error) {
	b, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	r, err := url.Parse(ref)
	if err != nil {
		return "", err
	}
	return b.ResolveReference(r).String(), nil
}

func splitFragment(u string) (doc, frag string) {
	if i := strings.IndexByte(u, '#'); i >= 0 {
		return u[:i], u[i+1:]
	}
	return u, ""
}

// index records base URI, dialect and pointer of every schema object below s, and the
// resources and anchors they declare. Only keywords whose values are schemas are
// visited, so an "$id" inside an enum or a default is data, not an identifier.
func (doc *document) index(s any, in schemaInfo, isRoot bool) {
	m, ok := s.(map[string]any)
	if !ok {
		return
	}
	_, hasRef := m["$ref"]
	// Before 2019-09, $ref makes its siblings (including $id) ignored.
	if !(in.draft <= draft7 && hasRef) {
		idKey := "$id"
		if in.draft == draft4 {
			idKey = "id"
		}
		if id, ok := m[idKey].(string); ok && id != "" {
			if abs, err := resolveURI(in.base, id); err == nil {
				docURI, frag := splitFragment(abs)
				switch {
				case frag != "" && in.draft <= draft7:
					// "$id": "#name" (or "other#name") declares a plain-name anchor.
					if !strings.HasPrefix(id, "#") {
						in.base = docURI
					}
					doc.anchors[docURI+"#"+frag] = schemaTarget{node: m, info: in}
				default:
					in.base = docURI
					if s, ok := m["$schema"].(string); ok && !isRoot {
						if d, ok := draftFromURI(s); ok {
							in.draft = d
						}
					}
					doc.resources[docURI] = schemaTarget{node: m, info: in}
				}
			}
		}
	}
	if in.draft >= draft2019 {
		for _, k := range []string{"$anchor", "$dynamicAnchor"} {
			if a, ok := m[k].(string); ok && a != "" && (k == "$anchor" || in.draft == draft2020) {
				doc.anchors[in.base+"#"+a] = schemaTarget{node: m, info: in}
			}
		}
	}
	doc.info[identity(m)] = in
	forEachSubschema(m, in.draft, func(sub any, tokens ...string) {
		child := in
		child.ptr = pointerChild(in.ptr, tokens...)
		doc.index(sub, child, false)
	})
}

// forEachSubschema calls f for every subschema of m that draft d defines, in a stable
// order, with the pointer tokens leading to it.
func forEachSubschema(m map[string]any, d draft, f func(sub any, tokens ...string)) {
	single := []string{"additionalProperties", "not"}
	if d >= draft6 {
		single = append(single, "contains", "propertyNames")
	}
	if d >= draft7 {
		single = append(single, "if", "then", "else")
	}
	if d <= draft2019 {
		single = append(single, "additionalItems")
	}
	if d >= draft2019 {
		single = append(single, "unevaluatedProperties", "unevaluatedItems", "contentSchema")
	}
	maps := []string{"properties", "patternProperties", "definitions"}
	if d <= draft7 {
		maps = append(maps, "dependencies")
	}
	if d >= draft2019 {
		maps = append(maps, "$defs", "dependentSchemas")
	}
	lists := []string{"allOf", "anyOf", "oneOf"}
	if d == draft2020 {
		lists = append(lists, "prefixItems")
	}
	for _, k := range single {
		if v, ok := m[k]; ok {
			f(v, k)
		}
	}
	if v, ok := m["items"]; ok {
		if list, ok := v.([]any); ok {
			for i, s := range list {
				f(s, "items", strconv.Itoa(i))
			}
		} else {
			f(v, "items")
		}
	}
	for _, k := range maps {
		if sub, ok := m[k].(map[string]any); ok {
			for _, name := range sortedKeys(sub) {
				if _, isList := sub[name].([]any); isList {
					continue // "dependencies": {"a": ["b"]} lists names, not a schema
				}
				f(sub[name], k, name)
			}
		}
	}
	for _, k := range lists {
		if list, ok := m[k].([]any); ok {
			for i, s := range list {
				f(s, k, strconv.Itoa(i))
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// infoOf returns where schema object m sits; objects reached only through a JSON
// pointer into a non-schema keyword inherit from the place the pointer started.
func (doc *document) infoOf(m map[string]any, fallback schemaInfo) schemaInfo {
	if in, ok := doc.info[identity(m)]; ok {
		return in
	}
	return fallback
}

// errRemoteRef marks a reference outside the document; it is never fetched.
var errRemoteRef = errors.New("reference outside values.schema.json")

// resolve finds the target of reference ref written in a schema object located at in.
func (doc *document) resolve(ref string, in schemaInfo) (schemaTarget, error) {
	abs, err := resolveURI(in.base, ref)
	if err != nil {
		return schemaTarget{}, fmt.Errorf("%w: bad reference %q: %w", ErrInvalidSchema, ref, err)
	}
	docURI, frag := splitFragment(abs)
	res, ok := doc.resources[docURI]
	if !ok {
		return schemaTarget{}, errRemoteRef
	}
	if frag == "" {
		return res, nil
	}
	if !strings.HasPrefix(frag, "/") {
		if a, ok := doc.anchors[docURI+"#"+frag]; ok {
			return a, nil
		}
		return schemaTarget{}, fmt.Errorf("%w: anchor %q not found", ErrInvalidSchema, ref)
	}
	unescaped, err := url.PathUnescape(frag)
	if err != nil {
		return schemaTarget{}, fmt.Errorf("%w: bad pointer %q: %w", ErrInvalidSchema, ref, err)
	}
	cur := res.node
	info := res.info
	for _, tok := range strings.Split(unescaped, "/")[1:] {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[tok]
			if !ok {
				return schemaTarget{}, fmt.Errorf("%w: %q not found", ErrInvalidSchema, ref)
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return schemaTarget{}, fmt.Errorf("%w: %q not found", ErrInvalidSchema, ref)
			}
			cur = c[i]
		default:
			return schemaTarget{}, fmt.Errorf("%w: %q not found", ErrInvalidSchema, ref)
		}
		info.ptr = pointerChild(info.ptr, tok)
		if m, ok := cur.(map[string]any); ok {
			if known, ok := doc.info[identity(m)]; ok {
				info = known
			}
		}
	}
	return schemaTarget{node: cur, info: info}, nil
}
