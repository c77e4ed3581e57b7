package crd

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/compositor-dev/compositor/test/samplecharts"
)

// FuzzTranslate: any bytes either are refused with a documented error or give a spec
// schema that Build turns into a valid CRD — never a panic, never an invalid CRD, and
// the same output every time.
func FuzzTranslate(f *testing.F) {
	for _, v := range samplecharts.Versions() {
		dir, err := samplecharts.Dir(v)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range []string{"values.schema.json", filepath.Join("charts", "cache", "values.schema.json")} {
			if b, err := os.ReadFile(filepath.Join(dir, file)); err == nil {
				f.Add(b)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join("testdata", "lossy", "values.schema.json")); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		`true`, `false`, `{}`, `{"type":"object"}`, `{"type":["object","null"]}`,
		`{"properties":{"a":{"$ref":"#"}}}`,
		`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"properties":{"x":{"$ref":"#/$defs/a"}}}`,
		`{"properties":{"a":{"anyOf":[{"type":"object","properties":{"b":{"items":{"minimum":1}}}},{"type":"array","items":{"oneOf":[{"const":1},{"enum":[[1],{"a":null}]}]}}]}}}`,
		`{"properties":{"a":{"allOf":[{"type":"integer"},{"type":"string"}]}}}`,
		`{"properties":{"metadata":{"anyOf":[{"properties":{"metadata":{"minLength":1}}},{"required":["x"]}]}}}`,
		`{"$schema":"http://json-schema.org/draft-04/schema#","properties":{"n":{"maximum":1e400,"minimum":-1e-400,"exclusiveMaximum":true}}}`,
		`{"properties":{"":{"type":"string"},"a.b":{"type":"array","uniqueItems":true,"items":{"type":["string","null"]}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		spec, report, err := Translate(schema, nil)
		if err != nil {
			if !isKnownRefusal(err) {
				t.Fatalf("undocumented error: %v", err)
			}
			return
		}
		again, report2, err := Translate(schema, nil)
		if err != nil || mustJSON(spec) != mustJSON(again) || mustJSON(report) != mustJSON(report2) {
			t.Fatalf("not deterministic: %v\n%s\n%s", err, mustJSON(spec), mustJSON(again))
		}
		crd, _, err := Build(BuildOptions{ChartName: "fuzz", Versions: []ServedVersion{{ChartVersion: "1.0.0", Spec: spec}}, Conversion: testWebhook})
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return
			}
			t.Fatalf("Build refused the translation: %v\nschema: %s\nspec: %s", err, schema, mustJSON(spec))
		}
		if err := Validate(crd); err != nil {
			t.Fatalf("invalid CRD returned: %v", err)
		}
	})
}
