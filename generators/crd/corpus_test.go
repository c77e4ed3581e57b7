package crd

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
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
// accepts, which must admit every valid object of the suite unchanged, or a clear,
// documented error. Never an invalid CRD, never a panic.
func TestCorpus(t *testing.T) {
	base := filepath.Join(repoRoot(t), "..", "shared", "testdata", "json-schema-test-suite", "tests")
	if _, err := os.Stat(base); err != nil {
		if inCI() {
			t.Fatalf("JSON-Schema-Test-Suite missing under CI: %v", err)
		}
		t.Skipf("JSON-Schema-Test-Suite not found at %s", base)
	}
	for _, dir := range []struct{ name, uri string }{
		{"draft7", "http://json-schema.org/draft-07/schema#"},
		{"draft2020-12", "https://json-schema.org/draft/2020-12/schema"},
	} {
		t.Run(dir.name, func(t *testing.T) {
			files, err := filepath.Glob(filepath.Join(base, dir.name, "*.json"))
			require.NoError(t, err)
			require.NotEmpty(t, files)
			var total, accepted, refused, lossy, admitted int
			for _, file := range files {
				raw, err := os.ReadFile(file)
				require.NoError(t, err)
				var groups []suiteGroup
				require.NoError(t, json.Unmarshal(raw, &groups), file)
				for _, g := range groups {
					total++
					name := filepath.Base(file) + "/" + g.Description
					schema := withDialect(t, g.Schema, dir.uri)
					spec, report, err := Translate(schema, nil)
					if err == nil {
						crd, _, buildErr := Build(BuildOptions{ChartName: "corpus", Versions: []ServedVersion{{ChartVersion: "1.0.0", Spec: spec}}, Conversion: testWebhook})
						err = buildErr
						if err == nil {
							accepted++
							if len(report) > 0 {
								lossy++
							}
							a := newAdmitter(t, crd, "v1-0-0")
							for _, c := range g.Tests {
								var data any
								require.NoError(t, json.Unmarshal(c.Data, &data))
								if _, isObject := data.(map[string]any); !isObject || !c.Valid {
									continue
								}
								admitted++
								if err := a.admit(data); err != nil {
									t.Errorf("%s: valid %q refused: %v\nspec schema: %s", name, c.Description, err, mustJSON(spec))
								}
							}
							continue
						}
					}
					refused++
					if !isKnownRefusal(err) {
						t.Errorf("%s: unexpected error: %v", name, err)
					}
				}
			}
			t.Logf("%s: %d schemas: %d accepted (%d with a non-empty lossiness report), %d refused with a clear error; %d valid objects admitted",
				dir.name, total, accepted, lossy, refused, admitted)
		})
	}
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
