package gatekeeper_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// serverOptions compile templates as the server does: under Compositor's capabilities.
func serverOptions() gatekeeper.Options {
	return gatekeeper.Options{Capabilities: policies.Capabilities()}
}

// template is a ConstraintTemplate of kind for the admission target with the given
// code entries (see regoCode and celCode), as an unstructured object.
func template(kind string, code ...map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "templates.gatekeeper.sh/v1",
		"kind":       "ConstraintTemplate",
		"metadata":   map[string]any{"name": strings.ToLower(kind)},
		"spec": map[string]any{
			"crd":     map[string]any{"spec": map[string]any{"names": map[string]any{"kind": kind}}},
			"targets": []any{map[string]any{"target": gatekeeper.AdmissionTarget, "code": code}},
		},
	}
}

// regoCode is a code entry of engine Rego; version "" leaves the field out (v0).
func regoCode(version, rego string, libs ...string) map[string]any {
	src := map[string]any{"rego": rego}
	if version != "" {
		src["version"] = version
	}
	if len(libs) > 0 {
		src["libs"] = libs
	}
	return map[string]any{"engine": "Rego", "source": src}
}

func celCode() map[string]any {
	return map[string]any{"engine": "K8sNativeValidation", "source": map[string]any{
		"validations": []any{map[string]any{
			"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
			"message":    "a team label is required",
		}},
	}}
}

// compileObject compiles a template given as an unstructured object.
func compileObject(t testing.TB, obj map[string]any, opts gatekeeper.Options) (*gatekeeper.Template, error) {
	t.Helper()
	src, err := gatekeeper.TemplateFromObject(obj)
	require.NoError(t, err)
	return gatekeeper.Compile(context.Background(), src, opts)
}

// mustCompile compiles a v0 template of kind whose package is its lower-case kind.
func mustCompile(t testing.TB, kind, rego string) *gatekeeper.Template {
	t.Helper()
	tmpl, err := compileObject(t, template(kind, regoCode("", rego)), serverOptions())
	require.NoError(t, err)
	return tmpl
}

// object decodes one YAML document.
func object(t testing.TB, doc string) map[string]any {
	t.Helper()
	var obj map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
	return obj
}

// constraint parses a Constraint of kind named name whose spec is given in YAML.
func constraint(t testing.TB, kind, name, spec string) *gatekeeper.Constraint {
	t.Helper()
	c, err := gatekeeper.ParseConstraint(constraintObject(t, kind, name, spec))
	require.NoError(t, err)
	return c
}

func constraintObject(t testing.TB, kind, name, spec string) map[string]any {
	t.Helper()
	return map[string]any{
		"apiVersion": "constraints.gatekeeper.sh/v1beta1",
		"kind":       kind,
		"metadata":   map[string]any{"name": name},
		"spec":       object(t, spec),
	}
}

// pod is a Pod named name in namespace ns ("" for none) with labels.
func pod(name, ns string, labels map[string]any) map[string]any {
	meta := map[string]any{"name": name}
	if ns != "" {
		meta["namespace"] = ns
	}
	if labels != nil {
		meta["labels"] = labels
	}
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   meta,
		"spec":       map[string]any{"containers": []any{map[string]any{"name": "app", "image": "registry.example.com/app:1"}}},
	}
}

func namespace(name string, labels map[string]any) map[string]any {
	meta := map[string]any{"name": name}
	if labels != nil {
		meta["labels"] = labels
	}
	return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
}
