package policies

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/test/samplecharts"
)

// FuzzParsePolicyFile: any Rego and sidecar bytes give a policy or an error, never a
// panic; a policy that parses compiles or fails with a CompileError.
func FuzzParsePolicyFile(f *testing.F) {
	f.Add([]byte(metadataPolicy), []byte(nil))
	f.Add([]byte(plainPolicy), []byte(plainSidecar))
	f.Add([]byte(registryPolicy), []byte("match: {kinds: [{kind: '*'}]}\n"))
	f.Add([]byte("# METADATA\n# custom:\n#   match: 3\npackage x\n"), []byte(nil))
	f.Add([]byte("# METADATA\n# custom:\n#   parameters: {a: [1, {b: null}]}\npackage x\n\nwarn contains input.parameters.a\n"), []byte(nil))
	f.Add([]byte("package x\n\ndeny contains x if { x := http.send({}) }\n"), []byte("target: rendered\n"))
	f.Fuzz(func(t *testing.T, src, sidecar []byte) {
		p, err := ParsePolicyFile("fuzz", "fuzz.rego", src, sidecar)
		if err != nil {
			var ce *CompileError
			if !errors.Is(err, ErrInvalidMetadata) && !errors.As(err, &ce) {
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			return
		}
		if err := Compile(context.Background(), p); err != nil {
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("compile error is not a *CompileError: %v", err)
			}
			for _, e := range ce.Errors {
				if e.Line < 0 || e.Column < 0 || e.Message == "" {
					t.Fatalf("bad compile error %+v", e)
				}
			}
		}
	})
}

// FuzzValidateValues: any JSON spec gives violations or nothing, never a panic or an
// internal error.
func FuzzValidateValues(f *testing.F) {
	ch, err := samplecharts.Load("1.1.5")
	if err != nil {
		f.Fatal(err)
	}
	v := NewJSONSchemaValidator(0)
	f.Add([]byte(`{"replicaCount": 11}`))
	f.Add([]byte(`{"storage": {"size": "10GB"}, "cache": {"enabled": true, "maxMemory": 1}}`))
	f.Add([]byte(`{"cache": "x", "service": null, "image": [1, 2]}`))
	f.Add([]byte(`{"podAnnotations": {"a.b/c": {"d": [null]}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var spec map[string]any
		if json.Unmarshal(raw, &spec) != nil {
			return
		}
		vs, err := v.ValidateValues(context.Background(), ch, "sha256:fuzz", spec)
		if err != nil {
			t.Fatalf("internal error for %s: %v", raw, err)
		}
		for _, x := range vs {
			if x.Path == "" || x.Message == "" {
				t.Fatalf("violation without path or message: %+v", x)
			}
		}
	})
}

// FuzzUnreadValues: any template, schema and values give an answer, never a panic:
// every key told is a key of the values, and a key the values.yaml declares is never
// told.
func FuzzUnreadValues(f *testing.F) {
	f.Add(`{{ .Values.a.b }}{{ with .Values.c }}{{ .d }}{{ end }}`, `{"properties": {"e": {"$ref": "#"}}}`, []byte(`{"a": {"b": 1, "x": 2}, "y": 3}`))
	f.Add(`{{ $v := .Values }}{{ range $k, $x := $v.m }}{{ index $v $k }}{{ $v = $x }}{{ end }}`, `{"allOf": [{"$ref": "#/a"}], "a": {"$ref": "#"}}`, []byte(`{"m": {"q": "{{ .Values.z }}"}, "z": 1}`))
	f.Add(`{{ define "x" }}{{ .context.Values.p }}{{ end }}{{ include "x" (dict "context" $) }}`, `true`, []byte(`{"p": 1, "pp": 2}`))
	f.Fuzz(func(t *testing.T, tmpl, schema string, raw []byte) {
		var spec map[string]any
		if json.Unmarshal(raw, &spec) != nil {
			return
		}
		ch := &chart.Chart{Metadata: &chart.Metadata{Name: "f", Version: "1"}, Schema: []byte(schema),
			Values:    map[string]any{"declared": map[string]any{"deep": 1}},
			Templates: []*chartcommon.File{{Name: "templates/a.yaml", Data: []byte(tmpl)}}}
		spec["declared"] = map[string]any{"deep": 2}
		for _, u := range UnreadValues(ch, spec) {
			if len(u.Path) == 0 || u.Path[0] == "declared" && len(u.Path) == 2 && u.Path[1] == "deep" {
				t.Fatalf("told %v", u.Path)
			}
			m := spec
			for i, key := range u.Path {
				v, ok := m[key]
				if !ok {
					t.Fatalf("told %v, not a key of the values", u.Path)
				}
				if i < len(u.Path)-1 {
					m = v.(map[string]any)
				}
			}
		}
	})
}
