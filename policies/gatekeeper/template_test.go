package gatekeeper_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

const (
	teamV0 = `package k8steam

violation[{"msg": msg}] {
	not input.review.object.metadata.labels.team
	msg := "a team label is required"
}
`
	teamV1 = `package k8steam

violation contains {"msg": "a team label is required"} if not input.review.object.metadata.labels.team
`
	prefixV1 = `package k8steam

import data.lib.images

violation contains {"msg": msg} if {
	some image in images.all(input.review.object)
	not images.allowed(image, input.parameters.prefixes)
	msg := sprintf("image %v is not allowed", [image])
}
`
	imagesLibV1 = `package lib.images

all(obj) := [c.image | some c in object.get(obj, ["spec", "containers"], [])]

allowed(image, prefixes) if {
	some p in prefixes
	startswith(image, p)
}
`
	prefixV0 = `package k8steam

import data.lib.images

violation[{"msg": msg}] {
	image := images.all(input.review.object)[_]
	not images.allowed(image, input.parameters.prefixes)
	msg := sprintf("image %v is not allowed", [image])
}
`
	imagesLibV0 = `package lib.images

all(obj) := [c.image | c := object.get(obj, ["spec", "containers"], [])[_]]

allowed(image, prefixes) {
	startswith(image, prefixes[_])
}
`
	slotV0 = `package k8steam

violation[{"msg": msg}] {
	other := data.inventory.namespace[input.review.namespace][_].ConfigMap[name]
	name != input.review.name
	msg := sprintf("%v is taken", [name])
}
`
)

func withAnnotations(obj map[string]any, annotations map[string]any) map[string]any {
	obj["metadata"].(map[string]any)["annotations"] = annotations
	return obj
}

func withName(obj map[string]any, name string) map[string]any {
	obj["metadata"].(map[string]any)["name"] = name
	return obj
}

func withTargets(obj map[string]any, targets ...any) map[string]any {
	obj["spec"].(map[string]any)["targets"] = targets
	return obj
}

func TestCompileTemplate(t *testing.T) {
	anyInventory := serverOptions()
	anyInventory.AnyInventory = true
	tests := []struct {
		name string
		obj  map[string]any
		opts *gatekeeper.Options // serverOptions when nil
		// want is the compiled template's Referential, RegoVersion and HasCEL when the
		// template compiles.
		want        *gatekeeper.Template
		errIs       error
		errContains []string
	}{
		{
			name: "rego v0 by default",
			obj:  template("K8sTeam", regoCode("", teamV0)),
			want: &gatekeeper.Template{RegoVersion: "v0"},
		},
		{
			name: "rego v0 when asked",
			obj:  template("K8sTeam", regoCode("v0", teamV0)),
			want: &gatekeeper.Template{RegoVersion: "v0"},
		},
		{
			name: "rego v1 when asked",
			obj:  template("K8sTeam", regoCode("v1", teamV1)),
			want: &gatekeeper.Template{RegoVersion: "v1"},
		},
		{
			name:        "rego v1 syntax is not v0",
			obj:         template("K8sTeam", regoCode("", teamV1)),
			errContains: []string{"rego:"},
		},
		{
			name:        "rego v0 syntax is not v1",
			obj:         template("K8sTeam", regoCode("v1", teamV0)),
			errContains: []string{"rego:"},
		},
		{
			name:        "an unknown rego version",
			obj:         template("K8sTeam", regoCode("v2", teamV1)),
			errContains: []string{"source.version", `"v2"`},
		},
		{
			name: "libs under lib in v1",
			obj:  template("K8sTeam", regoCode("v1", prefixV1, imagesLibV1)),
			want: &gatekeeper.Template{RegoVersion: "v1"},
		},
		{
			name: "libs under lib in v0",
			obj:  template("K8sTeam", regoCode("", prefixV0, imagesLibV0)),
			want: &gatekeeper.Template{RegoVersion: "v0"},
		},
		{
			name: "legacy rego and libs fields",
			obj: withTargets(template("K8sTeam"), map[string]any{
				"target": gatekeeper.AdmissionTarget, "rego": prefixV0, "libs": []any{imagesLibV0},
			}),
			want: &gatekeeper.Template{RegoVersion: "v0"},
		},
		{
			name:        "a lib outside lib",
			obj:         template("K8sTeam", regoCode("", prefixV0, "package images\n\nall(obj) := []\n")),
			errContains: []string{"libs[0]", "data.images", "data.lib"},
		},
		{
			name:        "a lib that does not parse",
			obj:         template("K8sTeam", regoCode("", prefixV0, "package lib.images\n\nall(obj) := [\n")),
			errContains: []string{"libs[0]"},
		},
		{
			name:        "the template's own package under lib",
			obj:         template("K8sTeam", regoCode("", "package lib.k8steam\n\nviolation[{\"msg\": \"x\"}] { true }\n")),
			errContains: []string{"data.lib"},
		},
		{
			name:        "a name other than the lower-case kind",
			obj:         withName(template("K8sTeam", regoCode("", teamV0)), "k8s-team"),
			errContains: []string{"metadata.name", `"k8s-team"`, "spec.crd.spec.names.kind", `"K8sTeam"`},
		},
		{
			// Its constraint CRD would be refused: lower-cased, the kind must be a
			// DNS-1035 label, and so must its list kind.
			name:        "a kind with a dot",
			obj:         withName(template("K8s.Bad", regoCode("", teamV0)), "k8s.bad"),
			errContains: []string{"spec.crd.spec.names.kind", `"K8s.Bad"`, "cannot name a CRD"},
		},
		{
			name:        "a kind starting with a digit",
			obj:         withName(template("9Team", regoCode("", teamV0)), "9team"),
			errContains: []string{"spec.crd.spec.names.kind", `"9Team"`},
		},
		{
			name:        "a kind whose list kind is too long",
			obj:         withName(template("K"+strings.Repeat("a", 61), regoCode("", teamV0)), "k"+strings.Repeat("a", 61)),
			errContains: []string{"spec.crd.spec.names.kind", "list"},
		},
		{
			name:        "no kind",
			obj:         template("", regoCode("", teamV0)),
			errContains: []string{"spec.crd.spec.names.kind"},
		},
		{
			name:        "no violation rule",
			obj:         template("K8sTeam", regoCode("", "package k8steam\n\ndeny[msg] { msg := \"x\" }\n")),
			errContains: []string{"no violation rule"},
		},
		{
			name:        "an empty module",
			obj:         template("K8sTeam", regoCode("", "")),
			errContains: []string{"rego:"},
		},
		{
			name: "data other than lib and inventory",
			obj: template("K8sTeam", regoCode("", `package k8steam

violation[{"msg": msg}] {
	msg := data.kubernetes.namespaces[input.review.namespace].metadata.name
}
`)),
			errContains: []string{"template.rego:4", "data.kubernetes", "only data.lib and data.inventory"},
		},
		{
			name: "a lib reading data other than lib and inventory",
			obj: template("K8sTeam", regoCode("", prefixV0, `package lib.images

all(obj) := data.images.known

allowed(image, prefixes) { true }
`)),
			errContains: []string{"lib_0.rego", "data.images.known"},
		},
		{
			name: "the template's own rules through data",
			obj: template("K8sTeam", regoCode("", `package k8steam

missing { not input.review.object.metadata.labels.team }

violation[{"msg": "no team"}] { data.k8steam.missing }
`)),
			want: &gatekeeper.Template{RegoVersion: "v0"},
		},
		{
			name:        "data.inventory without the annotation",
			obj:         template("K8sTeam", regoCode("", slotV0)),
			errIs:       gatekeeper.ErrUnsupported,
			errContains: []string{gatekeeper.AnnotationInventory},
		},
		{
			name:  "data.inventory read by a lib, without the annotation",
			obj:   template("K8sTeam", regoCode("", "package k8steam\n\nimport data.lib.inv\n\nviolation[{\"msg\": \"x\"}] { inv.any }\n", "package lib.inv\n\nany { data.inventory.cluster[_] }\n")),
			errIs: gatekeeper.ErrUnsupported,
		},
		{
			name:  "data.inventory with another annotation value",
			obj:   withAnnotations(template("K8sTeam", regoCode("", slotV0)), map[string]any{gatekeeper.AnnotationInventory: "cluster"}),
			errIs: gatekeeper.ErrUnsupported,
		},
		{
			name: "data.inventory with the annotation",
			obj:  withAnnotations(template("K8sTeam", regoCode("", slotV0)), map[string]any{gatekeeper.AnnotationInventory: "release"}),
			want: &gatekeeper.Template{RegoVersion: "v0", Referential: true},
		},
		{
			name: "data.inventory with AnyInventory",
			obj:  template("K8sTeam", regoCode("", slotV0)),
			opts: &anyInventory,
			want: &gatekeeper.Template{RegoVersion: "v0", Referential: true},
		},
		{
			name:        "CEL only",
			obj:         template("K8sTeam", celCode()),
			errIs:       gatekeeper.ErrUnsupported,
			errContains: []string{"K8sNativeValidation"},
		},
		{
			name: "CEL and Rego",
			obj:  template("K8sTeam", celCode(), regoCode("", teamV0)),
			want: &gatekeeper.Template{RegoVersion: "v0", HasCEL: true},
		},
		{
			name:        "no code at all",
			obj:         template("K8sTeam"),
			errContains: []string{"no Rego code"},
		},
		{
			name:        "a Rego source that is not an object",
			obj:         template("K8sTeam", map[string]any{"engine": "Rego", "source": "package k8steam"}),
			errContains: []string{"code[0].source"},
		},
		{
			name:        "no admission target",
			obj:         withTargets(template("K8sTeam"), map[string]any{"target": "audit.example.com", "rego": teamV0}),
			errContains: []string{"no target " + gatekeeper.AdmissionTarget},
		},
		{
			name: "the admission target twice",
			obj: withTargets(template("K8sTeam"),
				map[string]any{"target": gatekeeper.AdmissionTarget, "rego": teamV0},
				map[string]any{"target": gatekeeper.AdmissionTarget, "rego": teamV0}),
			errContains: []string{"given twice"},
		},
		{
			name: "http.send is disabled",
			obj: template("K8sTeam", regoCode("", `package k8steam

violation[{"msg": msg}] {
	resp := http.send({"method": "GET", "url": "http://example.com"})
	msg := resp.body.reason
}
`)),
			errContains: []string{"http.send"},
		},
		{
			name: "time.now_ns is disabled",
			obj: template("K8sTeam", regoCode("v1", `package k8steam

violation contains {"msg": "too late"} if time.now_ns() > 0
`)),
			errContains: []string{"time.now_ns"},
		},
		{
			name: "http.send compiles under OPA's own capabilities",
			obj: template("K8sTeam", regoCode("", `package k8steam

violation[{"msg": msg}] {
	resp := http.send({"method": "GET", "url": "http://example.com"})
	msg := resp.body.reason
}
`)),
			opts: &gatekeeper.Options{Capabilities: ast.CapabilitiesForThisVersion()},
			want: &gatekeeper.Template{RegoVersion: "v0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := serverOptions()
			if tt.opts != nil {
				opts = *tt.opts
			}
			got, err := compileObject(t, tt.obj, opts)
			if tt.want == nil {
				require.Error(t, err)
				if tt.errIs != nil {
					assert.ErrorIs(t, err, tt.errIs)
				} else {
					assert.NotErrorIs(t, err, gatekeeper.ErrUnsupported)
				}
				for _, s := range tt.errContains {
					assert.ErrorContains(t, err, s)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "k8steam", got.Name)
			assert.Equal(t, "K8sTeam", got.Kind)
			assert.Equal(t, tt.want.RegoVersion, got.RegoVersion)
			assert.Equal(t, tt.want.Referential, got.Referential)
			assert.Equal(t, tt.want.HasCEL, got.HasCEL)
		})
	}
}

// TestCompileTemplateFiles compiles the suites' templates as they are written in YAML.
func TestCompileTemplateFiles(t *testing.T) {
	tests := []struct {
		file                string
		kind, version       string
		referential, cel    bool
		schemaProperty      string
		unsupportedToServer bool
	}{
		{file: "testdata/suites/requiredteam/template.yaml", kind: "K8sRequiredTeam", version: "v0", schemaProperty: "teams"},
		{file: "testdata/suites/imageprefix/template.yaml", kind: "K8sImagePrefix", version: "v1", schemaProperty: "prefixes"},
		{file: "testdata/suites/uniqueslot/template.yaml", kind: "K8sUniqueSlot", version: "v0", referential: true, unsupportedToServer: true},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			data, err := os.ReadFile(tt.file)
			require.NoError(t, err)
			src, err := gatekeeper.ParseTemplate(data)
			require.NoError(t, err)

			_, err = gatekeeper.Compile(context.Background(), src, serverOptions())
			if tt.unsupportedToServer {
				require.ErrorIs(t, err, gatekeeper.ErrUnsupported)
			} else {
				require.NoError(t, err)
			}

			opts := serverOptions()
			opts.AnyInventory = true
			got, err := gatekeeper.Compile(context.Background(), src, opts)
			require.NoError(t, err)
			assert.Equal(t, tt.kind, got.Kind)
			assert.Equal(t, tt.version, got.RegoVersion)
			assert.Equal(t, tt.referential, got.Referential)
			if tt.schemaProperty != "" {
				require.NotNil(t, got.ParametersSchema)
				assert.Contains(t, got.ParametersSchema["properties"], tt.schemaProperty)
			} else {
				assert.Nil(t, got.ParametersSchema)
			}
		})
	}
}

func TestParseTemplateRefusesMalformedYAML(t *testing.T) {
	_, err := gatekeeper.ParseTemplate([]byte("spec: [unclosed"))
	assert.Error(t, err)
	_, err = gatekeeper.ParseTemplate([]byte("spec:\n  targets: 3\n"))
	assert.Error(t, err)
}

// Reading data as a whole (import data as d) could read data.inventory without the
// reference saying so: such a template is refused, whatever the options, so that the
// inventory opt-in cannot be bypassed.
func TestCompileTemplateInventoryThroughDataImport(t *testing.T) {
	const aliased = `package k8steam

import data as everything

violation[{"msg": msg}] {
	other := everything.inventory.namespace[input.review.namespace][_].ConfigMap[name]
	name != input.review.name
	msg := sprintf("%v is taken", [name])
}
`
	for _, anyInventory := range []bool{false, true} {
		opts := serverOptions()
		opts.AnyInventory = anyInventory
		_, err := compileObject(t, template("K8sTeam", regoCode("", aliased)), opts)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "data is read as a whole: templates may read only data.lib and data.inventory")
	}
}

// A template reads the history of a write when it may read input.review.operation or
// input.review.oldObject: by name, through input.review as a whole, or by a variable.
func TestCompileTemplateReadsHistory(t *testing.T) {
	for rego, want := range map[string]bool{
		"package p\nviolation[{\"msg\": \"m\"}] { input.review.object.spec.x }\n":                            false,
		"package p\nviolation[{\"msg\": \"m\"}] { input.review.operation == \"UPDATE\" }\n":                  true,
		"package p\nviolation[{\"msg\": \"m\"}] { input.review.oldObject.spec.x }\n":                         true,
		"package p\nviolation[{\"msg\": \"m\"}] { r := input.review; r.operation == \"CREATE\" }\n":          true,
		"package p\nviolation[{\"msg\": \"m\"}] { some k; input.review[k] == \"CREATE\" }\n":                 true,
		"package p\nviolation[{\"msg\": \"m\"}] { x := input; x.review.object }\n":                           true,
		"package p\nviolation[{\"msg\": \"m\"}] { input.parameters.x; input.review.kind.kind == \"Pod\" }\n": false,
	} {
		tmpl, err := compileObject(t, template("K8sHist", regoCode("", rego)), serverOptions())
		require.NoError(t, err, rego)
		assert.Equal(t, want, tmpl.ReadsHistory, rego)
	}
}
