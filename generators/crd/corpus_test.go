package crd

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

type suiteGroup struct {
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Tests       []struct {
		Description string          `json:"description"`
		Data        json.RawMessage `json:"data"`
		Valid       bool            `json:"valid"`
	} `json:"tests"`
}

// knownRefusals are the errors a schema may legitimately be refused with.
var knownRefusals = []error{ErrInvalidSchema, ErrUnsupportedDraft, ErrRootNotObject, ErrSchemaTooComplex}

// TestCorpus runs every schema of the JSON-Schema-Test-Suite (draft7 and draft2020-12)
// through Translate and Build: each either gives a CRD the API server's validation
// accepts, or a clear, documented error. Never an invalid CRD, never a panic. Every
// valid object of the suite must then pass the API server's pruning and validation
// unchanged — at the root (objects only) and, for schemas without references, nested
// under a key (any value), with and without a values.yaml default for that key.
func TestCorpus(t *testing.T) {
	base := filepath.Join("testdata", "json-schema-test-suite", "tests")
	for _, dir := range []struct{ name, uri string }{
		{"draft7", "http://json-schema.org/draft-07/schema#"},
		{"draft2020-12", "https://json-schema.org/draft/2020-12/schema"},
	} {
		t.Run(dir.name, func(t *testing.T) {
			files, err := filepath.Glob(filepath.Join(base, dir.name, "*.json"))
			require.NoError(t, err)
			require.NotEmpty(t, files)
			var total, accepted, refused, lossy, admitted, nested int
			for _, file := range files {
				raw, err := os.ReadFile(file)
				require.NoError(t, err)
				var groups []suiteGroup
				require.NoError(t, json.Unmarshal(raw, &groups), file)
				for _, g := range groups {
					total++
					name := filepath.Base(file) + "/" + g.Description
					crd, report, err := corpusCRD(withDialect(t, g.Schema, dir.uri), nil)
					if err != nil {
						refused++
						if !isKnownRefusal(err) {
							t.Errorf("%s: unexpected error: %v", name, err)
						}
					} else {
						accepted++
						if len(report) > 0 {
							lossy++
						}
						a := newAdmitter(t, crd, "v1-0-0")
						for _, c := range g.Tests {
							data := decode(t, c.Data)
							if _, isObject := data.(map[string]any); isObject && c.Valid {
								admitted++
								if err := a.admit(data); err != nil {
									t.Errorf("%s: valid %q refused: %v", name, c.Description, err)
								}
							}
						}
					}
					inner, ok := nestable(t, g.Schema)
					if !ok {
						continue
					}
					u, _ := json.Marshal(dir.uri)
					wrapped := []byte(`{"$schema":` + string(u) + `,"type":"object","properties":{"x":` + string(inner) + `}}`)
					for _, values := range []string{"", "x: null\n"} {
						crd, _, err := corpusCRD(wrapped, []byte(values))
						require.NoError(t, err, "%s nested", name)
						a := newAdmitter(t, crd, "v1-0-0")
						for _, c := range g.Tests {
							if !c.Valid {
								continue
							}
							nested++
							if err := a.admit(map[string]any{"x": decode(t, c.Data)}); err != nil {
								t.Errorf("%s: nested valid %q (values %q) refused: %v", name, c.Description, values, err)
							}
						}
					}
				}
			}
			t.Logf("%s: %d schemas: %d accepted (%d with a non-empty lossiness report), %d refused with a clear error; valid objects admitted: %d at the root, %d nested",
				dir.name, total, accepted, lossy, refused, admitted, nested)
		})
	}
}

func corpusCRD(schema, values []byte) (*apiextensionsv1.CustomResourceDefinition, Report, error) {
	spec, report, err := Translate(schema, values)
	if err != nil {
		return nil, nil, err
	}
	crd, _, err := Build(BuildOptions{ChartName: "corpus", Versions: []ServedVersion{{ChartVersion: "1.0.0", Spec: spec}}, Conversion: testWebhook})
	return crd, report, err
}

// nestable returns schema without its $schema, unless it has references or
// identifiers, whose meaning would change under another root.
func nestable(t *testing.T, schema json.RawMessage) ([]byte, bool) {
	t.Helper()
	for _, kw := range []string{`"$ref"`, `"$id"`, `"$anchor"`, `"$dynamicRef"`, `"$dynamicAnchor"`, `"$recursiveRef"`, `"$recursiveAnchor"`} {
		if bytes.Contains(schema, []byte(kw)) {
			return nil, false
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(schema, &m); err != nil {
		return schema, true // a boolean schema
	}
	delete(m, "$schema")
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b, true
}

func decode(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	return v
}

func isKnownRefusal(err error) bool {
	for _, k := range knownRefusals {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// withDialect adds $schema to an object schema that has none: the suite's directory
// names the draft.
func withDialect(t *testing.T, schema json.RawMessage, uri string) []byte {
	t.Helper()
	trimmed := bytes.TrimSpace(schema)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return trimmed
	}
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(trimmed, &m))
	if _, ok := m["$schema"]; ok {
		return trimmed
	}
	u, _ := json.Marshal(uri)
	if len(m) == 0 {
		return []byte(`{"$schema":` + string(u) + `}`)
	}
	return append([]byte(`{"$schema":`+string(u)+`,`), trimmed[1:]...)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
