package webhooks

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// guarded is a handler pair that knows the fireworks CRD's schemas, the 1.1.5 chart and a
// policy that allows only nginx images.
func guarded(t testing.TB) (*Mutator, *Validator, *policies.Judge) {
	t.Helper()
	ctx := context.Background()
	engine, err := policies.NewEngine(ctx, policies.Options{DisabledBuiltins: policies.BuiltinIDs()})
	require.NoError(t, err)
	require.NoError(t, engine.Set(ctx, policies.Policy{
		Name: "only-nginx", Origin: policies.OriginObject, File: "only-nginx.rego",
		Rego: `package onlynginx

deny contains "not nginx" if {
	repository := object.get(input.review.object.spec, ["image", "repository"], "nginx")
	not startswith(repository, "nginx")
}
`,
		Match: policyv1alpha1.Match{Kinds: []policyv1alpha1.KindMatcher{{Group: vocab.CompositionGroup, Kind: "*"}}},
	}))
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	judge := policies.NewJudge(policies.JudgeOptions{Engine: engine})
	mutator, validator := newHandlers(Options{Cached: oneDefinition{}, Live: noObjects{}, Judge: judge, Charts: fixedChart{chart: ch}})
	validator.decider.schemas = staticSchemas(fireworks(t).schemas)
	return mutator, validator, judge
}

// storedReadThroughV115 is a stored FireworksApp with a 2.0.0 field, read through
// v1-1-5: conversion stashes the field in the annotation.
func storedReadThroughV115(t testing.TB) map[string]any {
	t.Helper()
	hub := conversiontest.FireworksApp(crd.HubVersion, map[string]any{"replicaCount": 2, "exposure": "public"}, map[string]any{
		"krateo.io/release-name": "demo", "krateo.io/paused": "false"})
	hub["metadata"].(map[string]any)["labels"] = map[string]any{vocab.LabelCompositionVersion: "v1-1-5"}
	read := fireworks(t).convertOne(t, "v1-1-5", hub)
	require.Equal(t, `{"/spec/exposure":"public"}`, read["metadata"].(map[string]any)["annotations"].(map[string]any)[vocab.AnnotationConversionStash])
	return read
}

func TestConversionDataIsCompositorsAlone(t *testing.T) {
	ctx := context.Background()
	_, validator, _ := guarded(t)
	old := storedReadThroughV115(t)
	withStash := func(stash any, spec map[string]any) map[string]any {
		obj := decodeJSON(t, mustJSON(t, old))
		annotations := obj["metadata"].(map[string]any)["annotations"].(map[string]any)
		if stash == nil {
			delete(annotations, vocab.AnnotationConversionStash)
		} else {
			annotations[vocab.AnnotationConversionStash] = stash
		}
		if spec != nil {
			obj["spec"] = spec
		}
		return obj
	}
	for name, tc := range map[string]struct {
		op      string
		object  map[string]any
		allowed bool
		message string
	}{
		"kept as read":              {"UPDATE", withStash(`{"/spec/exposure":"public"}`, nil), true, ""},
		"kept, written otherwise":   {"UPDATE", withStash(`{ "/spec/exposure" : "public" }`, nil), true, ""},
		"an entry dropped":          {"UPDATE", withStash(`{}`, nil), true, ""},
		"the annotation removed":    {"UPDATE", withStash(nil, nil), true, ""},
		"a value changed":           {"UPDATE", withStash(`{"/spec/exposure":"private"}`, nil), false, "not add or change /spec/exposure"},
		"an entry added":            {"UPDATE", withStash(`{"/spec/exposure":"public","/spec/image":{"repository":"evil.io/miner"}}`, nil), false, "not add or change /spec/image"},
		"a value beyond the schema": {"UPDATE", withStash(`{"/spec/replicaCount":1000}`, map[string]any{}), false, "not add or change /spec/replicaCount"},
		"any stash on create":       {"CREATE", withStash(`{"/spec/exposure":"public"}`, nil), false, "not add or change /spec/exposure"},
		"not JSON":                  {"UPDATE", withStash(`{"/spec/exposure":`, nil), false, "unreadable compositor.dev/conversion-data annotation"},
		"not a string":              {"UPDATE", withStash(map[string]any{"/spec/exposure": "public"}, nil), false, ""},
	} {
		t.Run(name, func(t *testing.T) {
			var oldObject map[string]any
			if tc.op == "UPDATE" {
				oldObject = old
			}
			resp := validator.Handle(ctx, admissionRequest(t, compositionRequest(tc.op, tc.object, oldObject)))
			require.Equal(t, tc.allowed, resp.Allowed, "%v", resp.Result)
			if !tc.allowed {
				assert.Contains(t, resp.Result.Message, tc.message)
			}
		})
	}
}

// What the stash would restore is judged with the rest: a value the version shows,
// put in the stash, is judged as part of the spec.
func TestAsStoredJudgesRestoredValues(t *testing.T) {
	ctx := context.Background()
	schemas := staticSchemas(fireworks(t).schemas)
	gvk := schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: "v1-1-5", Kind: "FireworksApp"}

	obj := conversiontest.FireworksApp("v1-1-5", map[string]any{"replicaCount": 1}, map[string]any{
		vocab.AnnotationConversionStash: `{"/spec/image":{"repository":"evil.io/miner"},"/spec/exposure":"public","/spec/replicaCount":7}`})
	stored, err := asReadBy(ctx, schemas, gvk, obj, gvk.Version)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"replicaCount": int64(1), "image": map[string]any{"repository": "evil.io/miner"}}, stored["spec"],
		"the image v1-1-5 shows is judged; exposure, which it does not show, stays stashed; the client's replicaCount wins")
	assert.Equal(t, `{"/spec/exposure":"public"}`, stored["metadata"].(map[string]any)["annotations"].(map[string]any)[vocab.AnnotationConversionStash])
	assert.Equal(t, "v1-1-5", obj["apiVersion"].(string)[len(vocab.CompositionGroup)+1:], "obj itself is left alone")

	plain := conversiontest.FireworksApp("v1-1-5", map[string]any{"replicaCount": 1}, nil)
	same, err := asReadBy(ctx, nil, gvk, plain, gvk.Version)
	require.NoError(t, err)
	assert.Equal(t, plain, same, "without a stash nothing is read")

	_, err = asReadBy(ctx, schemas, schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: "v9-9-9", Kind: "FireworksApp"}, obj, "v9-9-9")
	assert.ErrorContains(t, err, "has no served version v9-9-9")
}

// FuzzStashCannotSmuggle writes a composition with any stash and any spec through
// v1-1-5 over a stored object, and whenever both webhooks admit the write, converts it
// to the storage version and reads it back as the controller does: what it reads must
// pass the chart's schema and the deny policy.
func FuzzStashCannotSmuggle(f *testing.F) {
	mutator, validator, judge := guarded(f)
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(f, err)
	old := storedReadThroughV115(f)
	fx := fireworks(f)
	f.Add(`{"/spec/exposure":"public"}`, `{"replicaCount":2}`)
	f.Add(`{"/spec/image":{"repository":"evil.io/miner","tag":"x"}}`, `{"replicaCount":1}`)
	f.Add(`{"/spec/replicaCount":1000}`, `{}`)
	f.Add(`{"/spec/image/repository":"evil"}`, `{"image":{"tag":"1"}}`)
	f.Add(`{"/status/x":1,"/spec/a~1b/0":[1]}`, `{"a/b":[0]}`)
	f.Fuzz(func(t *testing.T, stash, specJSON string) {
		spec := map[string]any{}
		if json.Unmarshal([]byte(specJSON), &spec) != nil {
			return
		}
		obj := decodeJSON(t, mustJSON(t, old))
		obj["spec"] = spec
		obj["metadata"].(map[string]any)["annotations"].(map[string]any)[vocab.AnnotationConversionStash] = stash
		ctx := context.Background()
		req := admissionRequest(t, compositionRequest("UPDATE", obj, old))
		if !mutator.Handle(ctx, req).Allowed || !validator.Handle(ctx, req).Allowed {
			return
		}
		stored := fx.convertOne(t, crd.HubVersion, obj)
		read := fx.convertOne(t, "v1-1-5", stored)
		r := policies.NewRequest(policies.Write{Operation: "UPDATE", Object: read, Namespace: "default", Chart: ch})
		decision, err := judge.Decide(ctx, r)
		require.NoError(t, err)
		if decision.Denied() {
			t.Fatalf("admitted stash %q with spec %s stores what is refused: %v", stash, specJSON, decision.Violations)
		}
	})
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestConversionOriginIsCompositorsAlone(t *testing.T) {
	ctx := context.Background()
	_, validator, _ := guarded(t)
	const read = `{"v2-0-0":{"values":{"/service":null}}}`
	withOrigin := func(origin any) map[string]any {
		obj := decodeJSON(t, mustJSON(t, storedReadThroughV115(t)))
		annotations := obj["metadata"].(map[string]any)["annotations"].(map[string]any)
		if origin != nil {
			annotations[vocab.AnnotationConversionOrigin] = origin
		}
		return obj
	}
	old := withOrigin(read)
	for name, tc := range map[string]struct {
		op      string
		object  map[string]any
		allowed bool
	}{
		"kept as read":           {"UPDATE", withOrigin(read), true},
		"the annotation removed": {"UPDATE", withOrigin(nil), true},
		"changed":                {"UPDATE", withOrigin(`{"v2-0-0":{"values":{"/exposure":"public"}}}`), false},
		"any origin on create":   {"CREATE", withOrigin(read), false},
	} {
		t.Run(name, func(t *testing.T) {
			var oldObject map[string]any
			if tc.op == "UPDATE" {
				oldObject = old
			}
			resp := validator.Handle(ctx, admissionRequest(t, compositionRequest(tc.op, tc.object, oldObject)))
			require.Equal(t, tc.allowed, resp.Allowed, "%v", resp.Result)
			if !tc.allowed {
				assert.Contains(t, resp.Result.Message, "metadata.annotations[compositor.dev/conversion-origin]: Forbidden: only Compositor's conversion writes this annotation")
			}
		})
	}
}

// A value written through a version that does not declare it, where another served
// version does, is admitted with a warning: that version's clients do not see it.
func TestForeignValuesAreWarnedAbout(t *testing.T) {
	ctx := context.Background()
	_, validator, _ := guarded(t)
	validator.schemas = staticSchemas(fireworks(t).schemas)
	withExposure := func(exposure string) map[string]any {
		obj := decodeJSON(t, mustJSON(t, storedReadThroughV115(t)))
		delete(obj["metadata"].(map[string]any), "annotations")
		obj["metadata"].(map[string]any)["annotations"] = map[string]any{"krateo.io/release-name": "demo", "krateo.io/paused": "false"}
		obj["spec"].(map[string]any)["exposure"] = exposure
		return obj
	}
	const warning = "spec.exposure is not a value of FireworksApp v1-1-5 (v2-0-0 has it): clients of v1-1-5 do not see it"

	resp := validator.Handle(ctx, admissionRequest(t, compositionRequest("CREATE", withExposure("public"), nil)))
	require.True(t, resp.Allowed, "%v", resp.Result)
	assert.Contains(t, resp.Warnings, warning)

	resp = validator.Handle(ctx, admissionRequest(t, compositionRequest("UPDATE", withExposure("public"), withExposure("public"))))
	require.True(t, resp.Allowed, "%v", resp.Result)
	assert.NotContains(t, resp.Warnings, warning, "an update that leaves the value as it was is not warned about")

	resp = validator.Handle(ctx, admissionRequest(t, compositionRequest("UPDATE", withExposure("internal"), withExposure("public"))))
	require.True(t, resp.Allowed, "%v", resp.Result)
	assert.Contains(t, resp.Warnings, warning)
}
