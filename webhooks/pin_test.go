package webhooks

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gomodules.xyz/jsonpatch/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/compositor-dev/compositor/api/vocab"
)

// The version a composition is pinned to (its label) is set when it is created and
// changed only by a write that changes the label: never by the version written through.
func TestPinnedVersion(t *testing.T) {
	labelled := func(version string) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{Object: composition(nil)}
		if version != "" {
			withLabel(obj.Object, vocab.LabelCompositionVersion, version)
		}
		return obj
	}
	for _, tc := range []struct {
		name             string
		through, written string
		old              *unstructured.Unstructured
		want             string
	}{
		{name: "a create pins the version written through", through: "v1-1-5", want: "v1-1-5"},
		{name: "a create may name another", through: "v1-1-5", written: "v2-0-0", want: "v2-0-0"},
		{name: "an update through another version keeps the pin", through: "v2-0-0", old: labelled("v1-1-5"), want: "v1-1-5"},
		{name: "so does one that drops the label", through: "v2-0-0", written: "", old: labelled("v1-1-5"), want: "v1-1-5"},
		{name: "and one that writes the label as it was", through: "v2-0-0", written: "v1-1-5", old: labelled("v1-1-5"), want: "v1-1-5"},
		{name: "a changed label moves it", through: "v1-1-5", written: "v2-0-0", old: labelled("v1-1-5"), want: "v2-0-0"},
		{name: "an update of an unpinned composition pins the version written through", through: "v2-0-0", old: labelled(""), want: "v2-0-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &Request{Object: labelled(tc.written), OldObject: tc.old}
			req.Kind = metav1.GroupVersionKind{Group: vocab.CompositionGroup, Version: tc.through, Kind: "FireworksApp"}
			assert.Equal(t, tc.want, pinnedVersion(req))
		})
	}
}

// /mutate puts the pin back on an update that went through another version and left
// the label out, and /validate warns that the write moved nothing.
func TestAnUpdateThroughAnotherVersionKeepsThePin(t *testing.T) {
	m, _, _ := countingHandlers(t, 0, 0, nil)
	ctx := context.Background()
	old := named(map[string]any{"replicaCount": 2}) // pinned to v1-1-5
	written := named(map[string]any{"replicaCount": 3})
	delete(written["metadata"].(map[string]any), "labels")
	req := compositionRequest("UPDATE", written, old)
	req["kind"].(map[string]any)["version"] = "v2-0-0"
	req["resource"].(map[string]any)["version"] = "v2-0-0"

	resp := m.Handle(ctx, admissionRequest(t, req))
	require.True(t, resp.Allowed, "%v", resp.Result)
	var ops []jsonpatch.JsonPatchOperation
	require.NoError(t, json.Unmarshal(mustJSON(t, resp.Patches), &ops))
	assert.Contains(t, ops, jsonpatch.NewOperation("add", "/metadata/labels", map[string]any{vocab.LabelCompositionVersion: "v1-1-5"}))

	withLabel(written, vocab.LabelCompositionVersion, "v1-1-5") // as /mutate left it
	decoded, bad := decode(admissionRequest(t, req))
	require.Nil(t, bad)
	errs, warnings := pinnedVersionCheck{definitions: oneDefinition{}}.Check(ctx, decoded)
	assert.Empty(t, errs)
	assert.Contains(t, warnings, "FireworksApp demo runs the chart of version v1-1-5 (label krateo.io/composition-version); this write through v2-0-0 changed only what it wrote. To run the chart of v2-0-0: kubectl label -n default fireworksapps demo krateo.io/composition-version=v2-0-0 --overwrite")
}

// metadataString reads what GetAnnotations and GetLabels give, without their copy.
func TestMetadataStringAgreesWithGetAnnotations(t *testing.T) {
	for _, object := range []map[string]any{
		{},
		{"metadata": "not an object"},
		{"metadata": map[string]any{}},
		{"metadata": map[string]any{"annotations": nil, "labels": []any{"a"}}},
		{"metadata": map[string]any{"annotations": map[string]any{"k": "v", "n": nil}, "labels": map[string]any{"k": "w"}}},
		{"metadata": map[string]any{"annotations": map[string]any{"k": "v", "x": int64(1)}, "labels": map[string]any{"k": true}}},
	} {
		obj := &unstructured.Unstructured{Object: object}
		for _, key := range []string{"k", "n", "x", "absent"} {
			want, wantOK := obj.GetAnnotations()[key]
			got, ok := metadataString(obj, "annotations", key)
			assert.Equal(t, want, got, "annotation %s of %v", key, object)
			assert.Equal(t, wantOK, ok, "annotation %s of %v", key, object)
			assert.Equal(t, obj.GetLabels()[key], labelOf(obj, key), "label %s of %v", key, object)
		}
	}
	got, ok := metadataString(nil, "annotations", "k")
	assert.Empty(t, got)
	assert.False(t, ok)
}
