package crd

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
)

// byteSource turns fuzz input into choices; it yields zeros once exhausted, so every
// input describes a finite schema and value.
type byteSource struct {
	b []byte
	i int
}

func (s *byteSource) next() int {
	if s.i >= len(s.b) {
		return 0
	}
	s.i++
	return int(s.b[s.i-1])
}

func (s *byteSource) pick(n int) int { return s.next() % n }

var (
	genKeys     = []string{"a", "b", "metadata", "c.d"}
	genStrings  = []string{"", "a", "abc", "10.0.0.1", "123", "Abc"}
	genPatterns = []string{"^a", "c$", "^[0-9]+$", "b"}
	genTypes    = []string{"null", "boolean", "integer", "number", "string", "array", "object"}
	genNumbers  = []string{"0", "1", "2", "-1", "1.5", "10", "0.5"}
)

func (s *byteSource) value(depth int) any {
	switch s.pick(8) {
	case 0:
		return nil
	case 1:
		return s.pick(2) == 0
	case 2:
		return json.Number(genNumbers[s.pick(len(genNumbers))])
	case 3, 4:
		return genStrings[s.pick(len(genStrings))]
	case 5:
		if depth > 2 {
			return nil
		}
		var list []any
		for i := s.pick(4); i > 0; i-- {
			list = append(list, s.value(depth+1))
		}
		if list == nil {
			list = []any{}
		}
		return list
	default:
		if depth > 2 {
			return "a"
		}
		m := map[string]any{}
		for i := s.pick(4); i > 0; i-- {
			m[genKeys[s.pick(len(genKeys))]] = s.value(depth + 1)
		}
		return m
	}
}

func (s *byteSource) schema(depth int) any {
	if s.pick(12) == 0 {
		return s.pick(3) != 0 // mostly true
	}
	m := map[string]any{}
	if s.pick(3) != 0 {
		if s.pick(3) == 0 {
			m["type"] = []any{genTypes[s.pick(len(genTypes))], genTypes[s.pick(len(genTypes))]}
		} else {
			m["type"] = genTypes[s.pick(len(genTypes))]
		}
	}
	for i := s.pick(4); i > 0; i-- {
		switch s.pick(24) {
		case 0:
			m["enum"] = []any{s.value(2), s.value(2)}
		case 1:
			m["const"] = s.value(2)
		case 2:
			m["minimum"] = json.Number(genNumbers[s.pick(len(genNumbers))])
		case 3:
			m["exclusiveMaximum"] = json.Number(genNumbers[s.pick(len(genNumbers))])
		case 4:
			m["multipleOf"] = json.Number([]string{"2", "0.5", "3"}[s.pick(3)])
		case 5:
			m["maxLength"] = json.Number(fmt.Sprint(s.pick(4)))
		case 6:
			m["pattern"] = genPatterns[s.pick(len(genPatterns))]
		case 7, 8:
			if depth < 4 {
				props := map[string]any{}
				for j := s.pick(3) + 1; j > 0; j-- {
					props[genKeys[s.pick(len(genKeys))]] = s.schema(depth + 1)
				}
				m["properties"] = props
			}
		case 9:
			m["required"] = []any{genKeys[s.pick(len(genKeys))]}
		case 10:
			if s.pick(2) == 0 {
				m["additionalProperties"] = false
			} else if depth < 4 {
				m["additionalProperties"] = s.schema(depth + 1)
			}
		case 11:
			if depth < 4 {
				m["items"] = s.schema(depth + 1)
			}
		case 12, 13, 14:
			if depth < 4 {
				kw := []string{"anyOf", "oneOf", "allOf"}[s.pick(3)]
				m[kw] = []any{s.schema(depth + 1), s.schema(depth + 1)}
			}
		case 15:
			if depth < 4 {
				m["not"] = s.schema(depth + 1)
			}
		case 16:
			m["uniqueItems"] = true
		case 17:
			m["minItems"] = json.Number(fmt.Sprint(s.pick(3)))
		case 18:
			m["format"] = []string{"ipv4", "date", "email"}[s.pick(3)]
		case 19:
			m["minProperties"] = json.Number(fmt.Sprint(s.pick(3)))
		case 20:
			if depth < 4 {
				m["prefixItems"] = []any{s.schema(depth + 1)}
			}
		case 21:
			if depth < 4 {
				m["patternProperties"] = map[string]any{"^a": s.schema(depth + 1)}
			}
		case 22:
			m["$ref"] = "#/$defs/d"
		case 23:
			m["$ref"] = "#/properties/x" // recursion through the root's property
		}
	}
	return m
}

// checkSoundness builds a schema, chart defaults and a value from data. The generated
// CRD must never store the value pruned, valid or not (the webhook judges what the
// user wrote), and, if Helm's validator (jsonschema v6) accepts the value coalesced with
// the defaults, must store it unchanged.
func checkSoundness(t *testing.T, data []byte) {
	src := &byteSource{b: data}
	draftURI := []string{"https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#"}[src.pick(2)]
	inner := src.schema(0)
	def := src.schema(1)
	defaults := map[string]any{}
	switch src.pick(3) {
	case 1:
		defaults["x"] = nil
	case 2:
		defaults["x"] = src.value(0)
	}
	value := src.value(0)

	root := map[string]any{"$schema": draftURI, "type": "object", "properties": map[string]any{"x": inner},
		"$defs": map[string]any{"d": def}, "definitions": map[string]any{"d": def}}
	if draftURI != "https://json-schema.org/draft/2020-12/schema" {
		delete(root, "$defs")
		inner, _ := json.Marshal(root)
		root = nil
		_ = json.Unmarshal([]byte(strings.ReplaceAll(string(inner), `"#/$defs/d"`, `"#/definitions/d"`)), &root)
	}
	schemaJSON, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	values, err := json.Marshal(defaults)
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := Translate(schemaJSON, values)
	if err != nil {
		if !isKnownRefusal(err) {
			t.Fatalf("undocumented error %v for %s", err, schemaJSON)
		}
		return
	}
	crd, _, err := Build(BuildOptions{ChartName: "sound", Versions: []ServedVersion{{ChartVersion: "1.0.0", Spec: spec}}, Conversion: testWebhook})
	if err != nil {
		t.Fatalf("Build: %v\nschema %s\nspec %s", err, schemaJSON, mustJSON(spec))
	}

	// Whatever Helm says of the value, what the API server stores is what the user
	// wrote: a key pruned from an admitted value would reach the webhook gone, and a
	// value Helm refuses (a typo, a null without a default) be admitted.
	a := newAdmitter(t, crd, "v1-0-0")
	instance := map[string]any{"x": value}
	if err := a.silentLoss(instance); err != nil {
		t.Fatalf("the CRD loses part of %s under\n%s\n%v\nspec: %s", mustJSON(instance), schemaJSON, err, mustJSON(spec))
	}

	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(schemaJSON)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(defaultBase, doc); err != nil {
		t.Fatal(err)
	}
	compiled, err := c.Compile(defaultBase)
	if err != nil {
		return // e.g. a pattern Go cannot compile: Translate refused it too, or skip
	}
	raw, _ := json.Marshal(instance)
	// Helm validates the user's values coalesced with the chart's defaults.
	user, err := chartcommon.ReadValues(raw)
	if err != nil {
		t.Fatal(err)
	}
	chartDefaults, err := chartcommon.ReadValues(values)
	if err != nil {
		t.Fatal(err)
	}
	merged, _ := json.Marshal(chartvalues.CoalesceTables(user, chartDefaults))
	parsed, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(merged)))
	if compiled.Validate(parsed) != nil {
		return // invalid for Helm: the CRD may accept or refuse it
	}
	if inferred(defaults["x"], value) {
		return // the documented exception: see inferType
	}
	if err := a.admit(instance); err != nil {
		t.Fatalf("Helm accepts %s (defaults %s) under\n%s\nbut the CRD refuses it: %v\nspec: %s", raw, values, schemaJSON, err, mustJSON(spec))
	}
}

// quietHelm silences the warnings Helm's value coalescing logs.
func quietHelm(t testing.TB) {
	log.SetOutput(io.Discard)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
}

// FuzzSoundness: the CRD never refuses (or prunes) a value Helm's validator accepts.
func FuzzSoundness(f *testing.F) {
	quietHelm(f)
	for _, seed := range []string{
		"", "\x01\x02\x03\x04\x05", "\x00\x07\x0c\x03\x05\x02\x02", "\x01\x02\x0d\x0e\x01\x03\x07\x02\x05",
		"\x00\x01\x03\x0c\x0c\x01\x01\x04\x05\x06\x07", "\x01\x02\x02\x0b\x06\x01\x07\x07\x00\x03\x03",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(checkSoundness)
}

// TestSoundness runs many generated cases deterministically, without the fuzzer.
func TestSoundness(t *testing.T) {
	quietHelm(t)
	for i := range 5000 {
		data := make([]byte, 48)
		x := uint32(i*2654435761 + 1)
		for j := range data {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			data[j] = byte(x)
		}
		checkSoundness(t, data)
		if t.Failed() {
			t.Logf("case %d: %q", i, data)
			return
		}
	}
}

// inferred tells whether a value replaces a default map (or list), at any depth, with
// another kind of value: a schema without a type is taken as the default's kind there.
func inferred(def, value any) bool {
	switch d := def.(type) {
	case map[string]any:
		v, ok := value.(map[string]any)
		if !ok {
			return true
		}
		for k, dv := range d {
			if vv, ok := v[k]; ok && inferred(dv, vv) {
				return true
			}
		}
	case []any:
		_, ok := value.([]any)
		return !ok
	}
	return false
}
