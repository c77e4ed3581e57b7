package crd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDebugNested(t *testing.T) {
	base := filepath.Join(repoRoot(t), "..", "shared", "testdata", "json-schema-test-suite", "tests")
	n, fails := 0, 0
	for _, dir := range []struct{ name, uri string }{{"draft7", "http://json-schema.org/draft-07/schema#"}, {"draft2020-12", "https://json-schema.org/draft/2020-12/schema"}} {
		files, _ := filepath.Glob(filepath.Join(base, dir.name, "*.json"))
		for _, file := range files {
			raw, _ := os.ReadFile(file)
			var groups []suiteGroup
			json.Unmarshal(raw, &groups)
			for _, g := range groups {
				if strings.Contains(string(g.Schema), `"$`) { continue }
				for _, withDefault := range []bool{false, true} {
				u, _ := json.Marshal(dir.uri)
				schema := `{"$schema":` + string(u) + `,"type":"object","properties":{"x":` + string(g.Schema) + `}}`
				values := ""
				if withDefault { values = "x: null\n" }
				spec, _, err := Translate([]byte(schema), []byte(values))
				if err != nil { t.Errorf("%s %s: %v", file, g.Description, err); continue }
				crd, _, err := Build(BuildOptions{ChartName: "corpus", Versions: []ServedVersion{{ChartVersion: "1.0.0", Spec: spec}}, Conversion: testWebhook})
				if err != nil { t.Fatal(err) }
				a := newAdmitter(t, crd, "v1-0-0")
				for _, c := range g.Tests {
					if !c.Valid { continue }
					var data any
					json.Unmarshal(c.Data, &data)
					n++
					if err := a.admit(map[string]any{"x": data}); err != nil {
						fails++
						fmt.Printf("%s | %s | %s | %s\n  err=%v\n  schema=%s\n  crd=%s\n", filepath.Base(file), g.Description, c.Description, string(c.Data), err, string(g.Schema), mustJSON(spec.Properties["x"]))
					}
				}
				}
			}
		}
	}
	fmt.Println("nested valid:", n, "fails:", fails)
}
