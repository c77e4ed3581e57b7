package webhooks

import (
	"encoding/json"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// requirePatchDefaults checks that the patch of defaultingPatch, applied to the object as
// written, gives exactly the object DefaultComposition made of it.
func requirePatchDefaults(t *testing.T, written string, releaseName string) {
	t.Helper()
	obj := &unstructured.Unstructured{}
	require.NoError(t, json.Unmarshal([]byte(written), &obj.Object))
	annotations, labels := obj.GetAnnotations(), obj.GetLabels()
	DefaultComposition(obj, "v1-1-5", releaseName)
	want, err := json.Marshal(obj.Object)
	require.NoError(t, err)

	ops, err := json.Marshal(defaultingPatch(annotations, labels, obj))
	require.NoError(t, err)
	patch, err := jsonpatchapply.DecodePatch(ops)
	require.NoError(t, err)
	got, err := patch.Apply([]byte(written))
	require.NoError(t, err, "patch %s", ops)
	require.JSONEq(t, string(want), string(got), "patch %s", ops)
}

func TestDefaultingPatchMakesTheDefaultedObject(t *testing.T) {
	for name, written := range map[string]string{
		"no annotations or labels":  `{"apiVersion":"composition.krateo.io/v1-1-5","kind":"FireworksApp","metadata":{"name":"a"},"spec":{}}`,
		"null annotations":          `{"metadata":{"name":"a","annotations":null,"labels":null}}`,
		"empty annotations":         `{"metadata":{"name":"a","annotations":{},"labels":{}}}`,
		"some already set":          `{"metadata":{"name":"a","annotations":{"krateo.io/paused":"true","x/y~z":"1"},"labels":{"team":"a"}}}`,
		"all already set":           `{"metadata":{"name":"a","annotations":{"krateo.io/paused":"false","krateo.io/release-name":"r"},"labels":{"krateo.io/composition-version":"v1-1-5"}}}`,
		"written through a version": `{"metadata":{"name":"a","labels":{"krateo.io/composition-version":"v2-0-0","a/b":"c"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			requirePatchDefaults(t, written, "r")
			requirePatchDefaults(t, written, "")
		})
	}
}

// FuzzDefaultingPatch: whatever metadata a composition is written with, the patch makes
// exactly the defaulted object.
func FuzzDefaultingPatch(f *testing.F) {
	f.Add(`{"metadata":{"name":"a"}}`, "r")
	f.Add(`{"metadata":{"annotations":{"~1":"x","/":"y"},"labels":{"krateo.io/composition-version":""}}}`, "")
	f.Fuzz(func(t *testing.T, written, releaseName string) {
		obj := map[string]any{}
		if json.Unmarshal([]byte(written), &obj) != nil {
			return
		}
		md, ok := obj["metadata"].(map[string]any)
		if !ok {
			return
		}
		for _, f := range []string{"annotations", "labels"} {
			if m, ok := md[f].(map[string]any); ok {
				for _, v := range m {
					if _, ok := v.(string); !ok {
						return // not an object the API server would send
					}
				}
			} else if md[f] != nil {
				return
			}
		}
		requirePatchDefaults(t, written, releaseName)
	})
}
