package policies

import (
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// leaf is one schema failure a person can act on: where, and what is wrong there.
type leaf struct {
	path    []pathElem
	message string
	// typeOnly marks a failed "type" keyword: in a oneOf/anyOf it means the value is
	// not even of that branch's type, so that branch is the least relevant.
	typeOnly bool
	want     []string // the types a typeOnly leaf wanted
}

// pathElem is one step into the values: a map key or an array index.
type pathElem struct {
	key   string
	index int
	isIdx bool
}

// explain turns a jsonschema validation error tree into leaves, one per failed keyword,
// resolving oneOf/anyOf to the causes of the most relevant branch.
func explain(ve *jsonschema.ValidationError, instance any) []leaf {
	var out []leaf
	seen := map[string]bool{}
	for _, l := range collect(ve, instance) {
		k := fmt.Sprint(l.path) + "\x00" + l.message
		if !seen[k] {
			seen[k] = true
			out = append(out, l)
		}
	}
	return out
}

func collect(e *jsonschema.ValidationError, instance any) []leaf {
	at := locate(instance, e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
		if len(e.Causes) == 0 {
			return []leaf{{path: at, message: "is not valid"}}
		}
		return collectAll(e.Causes, instance)
	case *kind.OneOf:
		if len(k.Subschemas) >= 2 {
			return []leaf{{path: at, message: fmt.Sprintf(
				"must match exactly one of the oneOf alternatives, but matches alternatives %d and %d", k.Subschemas[0]+1, k.Subschemas[1]+1)}}
		}
		return bestBranch(e, at, instance, "oneOf")
	case *kind.AnyOf:
		return bestBranch(e, at, instance, "anyOf")
	case *kind.Required:
		out := make([]leaf, 0, len(k.Missing))
		for _, m := range k.Missing {
			out = append(out, leaf{path: appendKey(at, m), message: "is required"})
		}
		return out
	case *kind.DependentRequired:
		return missingWith(at, k.Missing, k.Prop)
	case *kind.Dependency:
		if len(k.Missing) == 0 {
			return collectAll(e.Causes, instance)
		}
		return missingWith(at, k.Missing, k.Prop)
	case *kind.AdditionalProperties:
		out := make([]leaf, 0, len(k.Properties))
		for _, p := range k.Properties {
			out = append(out, leaf{path: appendKey(at, p), message: "is not allowed: the schema has no such field"})
		}
		return out
	case *kind.PropertyNames:
		return []leaf{{path: appendKey(at, k.Property), message: "is not an allowed field name"}}
	case *kind.Type:
		return []leaf{{path: at, message: typeMessage(k.Want, jsonType(valueAt(instance, at))), typeOnly: true, want: k.Want}}
	default:
		return []leaf{{path: at, message: describe(e.ErrorKind)}}
	}
}

func collectAll(causes []*jsonschema.ValidationError, instance any) []leaf {
	var out []leaf
	for _, c := range causes {
		out = append(out, collect(c, instance)...)
	}
	return out
}

func missingWith(at []pathElem, missing []string, prop string) []leaf {
	out := make([]leaf, 0, len(missing))
	for _, m := range missing {
		out = append(out, leaf{path: appendKey(at, m), message: fmt.Sprintf("is required when %s is set", prop)})
	}
	return out
}

// bestBranch reports why a oneOf/anyOf failed through the branch the value most
// nearly matches: branches whose type the value does not even have come last, then
// the branch with the fewest failures (the first one on a tie). When the value has
// none of the branches' types, one leaf lists the types it may have.
func bestBranch(e *jsonschema.ValidationError, at []pathElem, instance any, keyword string) []leaf {
	var best []leaf
	bestRank := -1
	var wanted []string
	allTypeMismatch := true
	for _, branch := range e.Causes {
		leaves := collect(branch, instance)
		mismatch := false
		for _, l := range leaves {
			if l.typeOnly && samePath(l.path, at) {
				mismatch = true
				wanted = appendUnique(wanted, l.want...)
			}
		}
		if mismatch {
			continue
		}
		allTypeMismatch = false
		if bestRank == -1 || len(leaves) < bestRank {
			best, bestRank = leaves, len(leaves)
		}
	}
	if allTypeMismatch {
		if len(wanted) > 0 {
			return []leaf{{path: at, message: typeMessage(wanted, jsonType(valueAt(instance, at)))}}
		}
		return []leaf{{path: at, message: fmt.Sprintf("must match one of the %s alternatives", keyword)}}
	}
	if len(best) == 0 {
		return []leaf{{path: at, message: fmt.Sprintf("must match one of the %s alternatives", keyword)}}
	}
	return best
}

func appendUnique(dst []string, xs ...string) []string {
	for _, x := range xs {
		found := false
		for _, d := range dst {
			if d == x {
				found = true
				break
			}
		}
		if !found {
			dst = append(dst, x)
		}
	}
	return dst
}

func samePath(a, b []pathElem) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// locate turns a JSON Pointer-like instance location into path steps, telling array
// indices from map keys by looking at the values themselves.
func locate(instance any, loc []string) []pathElem {
	out := make([]pathElem, 0, len(loc))
	cur := instance
	for _, tok := range loc {
		if arr, ok := cur.([]any); ok {
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(arr) {
				out = append(out, pathElem{index: i, isIdx: true})
				cur = arr[i]
				continue
			}
		}
		out = append(out, pathElem{key: tok})
		if m, ok := cur.(map[string]any); ok {
			cur = m[tok]
		} else {
			cur = nil
		}
	}
	return out
}

func valueAt(instance any, path []pathElem) any {
	cur := instance
	for _, p := range path {
		switch c := cur.(type) {
		case []any:
			if !p.isIdx || p.index >= len(c) {
				return nil
			}
			cur = c[p.index]
		case map[string]any:
			cur = c[p.key]
		default:
			return nil
		}
	}
	return cur
}

func appendKey(at []pathElem, key string) []pathElem {
	out := make([]pathElem, len(at), len(at)+1)
	copy(out, at)
	return append(out, pathElem{key: key})
}

// plainKey is a key that reads well after a dot; others are written as [key], as
// Kubernetes field paths do.
var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

func joinPath(root *field.Path, path []pathElem) string {
	p := root
	for _, e := range path {
		switch {
		case e.isIdx:
			p = p.Index(e.index)
		case plainKey.MatchString(e.key):
			p = p.Child(e.key)
		default:
			p = p.Key(e.key)
		}
	}
	return p.String()
}

// describe words one failed keyword for a person.
func describe(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Minimum:
		return "must be >= " + ratString(k.Want)
	case *kind.Maximum:
		return "must be <= " + ratString(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be > " + ratString(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be < " + ratString(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + ratString(k.Want)
	case *kind.Pattern:
		return "must match pattern " + k.Want
	case *kind.Enum:
		return enumMessage(k.Want)
	case *kind.Const:
		return "must be " + displayValue(k.Want)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %s long", plural(k.Want, "character"))
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %s long", plural(k.Want, "character"))
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %s", plural(k.Want, "item"))
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %s", plural(k.Want, "item"))
	case *kind.AdditionalItems:
		return fmt.Sprintf("has %s more than the schema allows", plural(k.Count, "item"))
	case *kind.UniqueItems:
		return fmt.Sprintf("must not contain duplicates: items %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %s", plural(k.Want, "field"))
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %s", plural(k.Want, "field"))
	case *kind.Contains:
		return "must contain an item matching the schema"
	case *kind.MinContains:
		return fmt.Sprintf("must contain at least %s matching the schema", plural(k.Want, "item"))
	case *kind.MaxContains:
		return fmt.Sprintf("must contain at most %s matching the schema", plural(k.Want, "item"))
	case *kind.Format:
		return fmt.Sprintf("must be a valid %s", k.Want)
	case *kind.ContentEncoding:
		return fmt.Sprintf("must be %s-encoded", k.Want)
	case *kind.ContentMediaType:
		return fmt.Sprintf("must be valid %s", k.Want)
	case *kind.Not:
		return "must not match the schema under \"not\""
	case *kind.FalseSchema:
		return "is not allowed"
	case *kind.InvalidJsonValue:
		return fmt.Sprintf("holds a value of type %T, which JSON cannot represent", k.Value)
	default:
		return k.LocalizedString(englishPrinter)
	}
}

var englishPrinter = message.NewPrinter(language.English)

func enumMessage(want []any) string {
	parts := make([]string, 0, len(want))
	for _, w := range want {
		switch w.(type) {
		case []any, map[string]any:
			return "must be one of the values the schema lists"
		}
		parts = append(parts, displayValue(w))
	}
	if len(parts) == 1 {
		return "must be " + parts[0]
	}
	return "must be one of " + strings.Join(parts, ", ")
}

// displayValue writes a schema constant as a person reads it: strings as they are,
// null as null.
func displayValue(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return v
	case []any, map[string]any:
		b, _ := json.Marshal(v)
		return string(b)
	default:
		return fmt.Sprint(v)
	}
}

func ratString(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func typeMessage(want []string, got string) string {
	words := make([]string, len(want))
	for i, w := range want {
		words[i] = withArticle(w)
	}
	return fmt.Sprintf("must be %s, not %s", strings.Join(words, " or "), withArticle(got))
}

func withArticle(t string) string {
	switch t {
	case "null", "":
		return "null"
	case "integer", "object", "array":
		return "an " + t
	default:
		return "a " + t
	}
}

// jsonType names the JSON type of a Go value as JSON Schema does.
func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return "integer"
		}
		return "number"
	case float64:
		if v == float64(int64(v)) {
			return "integer"
		}
		return "number"
	case float32:
		return jsonType(float64(v))
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return "integer"
	default:
		return fmt.Sprintf("%T", v)
	}
}
