package conversion

import (
	"fmt"
	"math/rand/v2"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
)

// valueGen makes random values of a structural schema by walking it: enums, bounds,
// patterns, required properties, list types and formats as far as a value needs them.
// Fields a schema keeps unknown get extra keys no version declares. The values are
// mostly valid; callers that need valid ones check them and draw again. The check of
// declared conversions and the tests use it.
type valueGen struct {
	r *rand.Rand
}

const maxGenDepth = 4

func (g valueGen) value(s *structuralschema.Structural, depth int) any {
	if s == nil {
		return g.anything(depth)
	}
	if s.Nullable && g.r.IntN(10) == 0 {
		return nil
	}
	if enum := enumOf(s); len(enum) > 0 {
		return enum[g.r.IntN(len(enum))].Object
	}
	if s.XIntOrString {
		if g.r.IntN(2) == 0 {
			return g.r.Int64N(100)
		}
		return g.word(1, 8)
	}
	switch s.Type {
	case "object":
		return g.object(s, depth)
	case "array":
		return g.array(s, depth)
	case "string":
		return g.str(s)
	case "integer":
		lo, hi := bounds(s, -1000, 1000)
		return int64(lo) + g.r.Int64N(int64(hi-lo)+1)
	case "number":
		lo, hi := bounds(s, -1000, 1000)
		return lo + g.r.Float64()*(hi-lo)
	case "boolean":
		return g.r.IntN(2) == 0
	}
	return g.anything(depth) // no type: the schema keeps any value
}

func (g valueGen) object(s *structuralschema.Structural, depth int) map[string]any {
	m := map[string]any{}
	var required []string
	if s.ValueValidation != nil {
		required = s.ValueValidation.Required
	}
	keys := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same seed gives the same object
	for _, k := range keys {
		if slices.Contains(required, k) || g.r.IntN(3) > 0 {
			p := s.Properties[k]
			m[k] = g.value(&p, depth+1)
		}
	}
	if ap := s.AdditionalProperties; ap != nil && ap.Structural != nil {
		for range g.r.IntN(3) {
			m[g.word(1, 6)] = g.value(ap.Structural, depth+1)
		}
	}
	if s.XPreserveUnknownFields && depth < maxGenDepth && (len(s.Properties) == 0 || g.r.IntN(3) == 0) {
		for range 1 + g.r.IntN(2) {
			m["extra"+strconv.Itoa(g.r.IntN(100))] = g.anything(depth + 1)
		}
	}
	return m
}

func (g valueGen) array(s *structuralschema.Structural, depth int) []any {
	lo, hi := 0, 3
	if vv := s.ValueValidation; vv != nil {
		if vv.MinItems != nil {
			lo = int(*vv.MinItems)
			hi = max(hi, lo)
		}
		if vv.MaxItems != nil {
			hi = min(hi, int(*vv.MaxItems))
		}
	}
	n := lo + g.r.IntN(hi-lo+1)
	out := []any{}
	seen := map[string]bool{}
	for try := 0; len(out) < n && try < 5*n; try++ {
		v := g.value(s.Items, depth+1)
		if key, unique := listKey(s, v); unique {
			if seen[key] {
				continue
			}
			seen[key] = true
		}
		out = append(out, v)
	}
	return out
}

// listKey is what makes an item unique in a list of type map or set.
func listKey(s *structuralschema.Structural, v any) (string, bool) {
	if s.XListType == nil {
		return "", false
	}
	switch *s.XListType {
	case "map":
		m, _ := v.(map[string]any)
		var key []string
		for _, k := range s.XListMapKeys {
			key = append(key, fmt.Sprint(m[k]))
		}
		return strings.Join(key, "\x00"), true
	case "set":
		return fmt.Sprint(v), true
	}
	return "", false
}

func (g valueGen) str(s *structuralschema.Structural) string {
	vv := s.ValueValidation
	if vv == nil {
		return g.word(0, 10)
	}
	if vv.Format == "date-time" {
		return time.Unix(g.r.Int64N(2e9), 0).UTC().Format(time.RFC3339)
	}
	if p := patternOf(vv); p != "" {
		if re, err := syntax.Parse(p, syntax.Perl); err == nil {
			var b strings.Builder
			g.matching(&b, re.Simplify())
			return b.String()
		}
	}
	lo, hi := 0, 10
	if vv.MinLength != nil {
		lo = int(*vv.MinLength)
		hi = max(hi, lo)
	}
	if vv.MaxLength != nil {
		hi = min(hi, int(*vv.MaxLength))
	}
	return g.word(lo, hi)
}

// matching writes a random string re matches.
func (g valueGen) matching(b *strings.Builder, re *syntax.Regexp) {
	repeat := func(lo, hi int) {
		if hi < 0 {
			hi = lo + 2
		}
		for range lo + g.r.IntN(hi-lo+1) {
			g.matching(b, re.Sub[0])
		}
	}
	switch re.Op {
	case syntax.OpLiteral:
		b.WriteString(string(re.Rune))
	case syntax.OpCharClass:
		i := 2 * g.r.IntN(len(re.Rune)/2)
		lo, hi := re.Rune[i], re.Rune[i+1]
		b.WriteRune(lo + rune(g.r.IntN(int(min(hi-lo, 25))+1)))
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.WriteString(g.word(1, 1))
	case syntax.OpCapture:
		g.matching(b, re.Sub[0])
	case syntax.OpStar:
		repeat(0, 2)
	case syntax.OpPlus:
		repeat(1, 3)
	case syntax.OpQuest:
		repeat(0, 1)
	case syntax.OpRepeat:
		repeat(re.Min, re.Max)
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			g.matching(b, sub)
		}
	case syntax.OpAlternate:
		g.matching(b, re.Sub[g.r.IntN(len(re.Sub))])
	}
}

// anything is a random JSON value, for fields that keep any value.
func (g valueGen) anything(depth int) any {
	n := 6
	if depth < maxGenDepth {
		n = 8
	}
	switch g.r.IntN(n) {
	case 0:
		return nil
	case 1:
		return g.r.IntN(2) == 0
	case 2:
		return g.r.Int64N(1 << 40)
	case 3:
		return float64(g.r.IntN(1000)) / 8
	case 4, 5:
		return g.word(0, 12)
	case 6:
		m := map[string]any{}
		for range g.r.IntN(3) {
			m[g.word(1, 6)] = g.anything(depth + 1)
		}
		return m
	default:
		var l []any
		for range g.r.IntN(3) {
			l = append(l, g.anything(depth+1))
		}
		return l
	}
}

const wordRunes = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/~ é"

func (g valueGen) word(lo, hi int) string {
	n := lo + g.r.IntN(hi-lo+1)
	runes := []rune(wordRunes)
	var b strings.Builder
	for range n {
		b.WriteRune(runes[g.r.IntN(len(runes))])
	}
	return b.String()
}

func enumOf(s *structuralschema.Structural) []structuralschema.JSON {
	vv := s.ValueValidation
	if vv == nil {
		return nil
	}
	if len(vv.Enum) > 0 {
		return vv.Enum
	}
	for _, sub := range vv.AllOf {
		if len(sub.Enum) > 0 {
			return sub.Enum
		}
	}
	return nil
}

func patternOf(vv *structuralschema.ValueValidation) string {
	if vv.Pattern != "" {
		return vv.Pattern
	}
	for _, sub := range vv.AllOf {
		if sub.Pattern != "" {
			return sub.Pattern
		}
	}
	return ""
}

func bounds(s *structuralschema.Structural, lo, hi float64) (float64, float64) {
	if vv := s.ValueValidation; vv != nil {
		if vv.Minimum != nil {
			lo = *vv.Minimum
			if vv.ExclusiveMinimum {
				lo++
			}
		}
		if vv.Maximum != nil {
			hi = *vv.Maximum
			if vv.ExclusiveMaximum {
				hi--
			}
		}
	}
	return lo, max(lo, hi)
}
