package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gomodules.xyz/jsonpatch/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
)

// keptRevisions reads the CompositionRevisions it holds, whatever the selector: the
// webhook must prove each itself.
type keptRevisions struct {
	noObjects
	items []corev1alpha1.CompositionRevision
}

func (k keptRevisions) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	if revs, ok := list.(*corev1alpha1.CompositionRevisionList); ok {
		revs.Items = append([]corev1alpha1.CompositionRevision(nil), k.items...)
	}
	return nil
}

// sealWord stands for the release seal: a revision is sealed when its seal is "sealed".
type sealWord struct{}

func (sealWord) VerifyRevision(_ context.Context, _ *corev1alpha1.CompositionDefinition, rev *corev1alpha1.CompositionRevision, uid types.UID) error {
	switch {
	case rev.Seal != "sealed":
		return errors.New("CompositionRevision default/" + rev.Name + " was changed after Compositor wrote it")
	case rev.Composition.UID != uid:
		return errors.New("CompositionRevision default/" + rev.Name + " is a revision of another composition")
	}
	return nil
}

func keptRevision(n int64, uid types.UID, version, spec string) corev1alpha1.CompositionRevision {
	return corev1alpha1.CompositionRevision{
		ObjectMeta:    metav1.ObjectMeta{Namespace: "default", Name: "fireworksapp.demo." + string(rune('0'+n))},
		Composition:   corev1alpha1.CompositionReference{Kind: "FireworksApp", Name: "demo", UID: uid},
		Revision:      n,
		ServedVersion: version,
		ChartVersion:  "1.1.5",
		Spec:          apiextensionsv1.JSON{Raw: []byte(spec)},
		Seal:          "sealed",
	}
}

func withUID(object map[string]any, uid string) map[string]any {
	object["metadata"].(map[string]any)["uid"] = uid
	return object
}

func patchOps(t *testing.T, patches []jsonpatch.JsonPatchOperation) []jsonpatch.JsonPatchOperation {
	t.Helper()
	var ops []jsonpatch.JsonPatchOperation
	require.NoError(t, json.Unmarshal(mustJSON(t, patches), &ops))
	return ops
}

func TestRollbackRestoresAProvenRevision(t *testing.T) {
	ctx := context.Background()
	tampered := keptRevision(3, "uid-demo", "v1-1-5", `{"replicaCount":9}`)
	tampered.Seal = "forged"
	m := &Mutator{Definitions: oneDefinition{}, Revisions: sealWord{}, Live: keptRevisions{items: []corev1alpha1.CompositionRevision{
		keptRevision(1, "uid-demo", "v1-1-5", `{"replicaCount":1,"service":{"type":"NodePort"}}`),
		keptRevision(2, "uid-demo", "v1-1-5", `{"replicaCount":2}`),
		tampered,
		keptRevision(4, "uid-other", "v1-1-5", `{"replicaCount":4}`),
		keptRevision(5, "uid-demo", "v2-0-0", `{"replicaCount":5}`),
	}}}
	write := func(to string) (map[string]any, map[string]any) {
		old := withUID(named(map[string]any{"replicaCount": 3}), "uid-demo")
		written := withUID(named(map[string]any{"replicaCount": 3}), "uid-demo")
		written["metadata"].(map[string]any)["annotations"].(map[string]any)[vocab.AnnotationRollbackTo] = to
		return written, old
	}
	rollback := func(to string) ([]jsonpatch.JsonPatchOperation, string) {
		t.Helper()
		written, old := write(to)
		resp := m.Handle(ctx, admissionRequest(t, compositionRequest("UPDATE", written, old)))
		if !resp.Allowed {
			return nil, resp.Result.Message
		}
		return patchOps(t, resp.Patches), ""
	}

	ops, refused := rollback("1")
	require.Empty(t, refused)
	assert.ElementsMatch(t, []jsonpatch.JsonPatchOperation{
		jsonpatch.NewOperation("remove", "/metadata/annotations/compositor.dev~1rollback-to", nil),
		jsonpatch.NewOperation("add", "/metadata/annotations/compositor.dev~1spec-author", "alice"),
		jsonpatch.NewOperation("replace", "/spec/replicaCount", float64(1)),
		jsonpatch.NewOperation("add", "/spec/service", map[string]any{"type": "NodePort"}),
	}, ops, "the spec of revision 1, written by the one who asked for it, and the annotation gone")

	ops, refused = rollback("previous")
	require.Empty(t, refused)
	assert.Contains(t, ops, jsonpatch.NewOperation("replace", "/spec/replicaCount", float64(2)), "the newest proven revision is 5 (v2-0-0), the one before it 2")

	for to, want := range map[string]string{
		"3":    `metadata.annotations[compositor.dev/rollback-to]: Invalid value: "3": CompositionRevision default/fireworksapp.demo.3 was changed after Compositor wrote it: it is never restored`,
		"4":    `metadata.annotations[compositor.dev/rollback-to]: Invalid value: "4": CompositionRevision default/fireworksapp.demo.4 is a revision of another composition: it is never restored`,
		"5":    `metadata.annotations[compositor.dev/rollback-to]: Invalid value: "5": revision 5 ran version v2-0-0 (chart 1.1.5), which no CompositionDefinition serves to namespace default any more`,
		"9":    `FireworksApp demo has no revision 9: it keeps revisions 5, 2, 1`,
		"last": `must be a revision number (kubectl get compositionrevisions -n default -l compositor.dev/composition-uid=uid-demo) or "previous"`,
		"0":    `must be a revision number`,
	} {
		_, refused := rollback(to)
		assert.Contains(t, refused, want, to)
	}

	// A create has nothing to restore.
	created := withUID(named(map[string]any{"replicaCount": 3}), "uid-demo")
	created["metadata"].(map[string]any)["annotations"].(map[string]any)[vocab.AnnotationRollbackTo] = "1"
	resp := m.Handle(ctx, admissionRequest(t, compositionRequest("CREATE", created, nil)))
	require.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, "a composition being created has no revision to restore")

	// Without the seal, nothing is restored.
	unsealed := &Mutator{Definitions: oneDefinition{}}
	written, old := write("1")
	resp = unsealed.Handle(ctx, admissionRequest(t, compositionRequest("UPDATE", written, old)))
	require.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, "Compositor was started without the release seal")

	// The validating webhook refuses one that is left on the object.
	written, old = write("1")
	decoded, bad := decode(admissionRequest(t, compositionRequest("UPDATE", written, old)))
	require.Nil(t, bad)
	errs, _ := rollbackLeftOver(ctx, decoded)
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0].Error(), "was not restored by Compositor's mutating webhook")
}

func TestSpecAuthorIsTheWriterOfTheSpec(t *testing.T) {
	ctx := context.Background()
	m := &Mutator{Definitions: noObjects{}}
	author := func(object map[string]any, value string) map[string]any {
		object["metadata"].(map[string]any)["annotations"].(map[string]any)[vocab.AnnotationSpecAuthor] = value
		return object
	}
	mutate := func(written, old map[string]any) []jsonpatch.JsonPatchOperation {
		t.Helper()
		op := "UPDATE"
		if old == nil {
			op = "CREATE"
		}
		resp := m.Handle(ctx, admissionRequest(t, compositionRequest(op, written, old)))
		require.True(t, resp.Allowed, "%v", resp.Result)
		return patchOps(t, resp.Patches)
	}
	authorOp := func(value string) jsonpatch.JsonPatchOperation {
		return jsonpatch.NewOperation("add", "/metadata/annotations/compositor.dev~1spec-author", value)
	}

	// A create, whatever it says: the requesting user.
	assert.Contains(t, mutate(author(named(map[string]any{"replicaCount": 2}), "mallory"), nil), authorOp("alice"))
	// An update of the spec: the requesting user.
	assert.Contains(t, mutate(author(named(map[string]any{"replicaCount": 3}), "mallory"), author(named(map[string]any{"replicaCount": 2}), "bob")), authorOp("alice"))
	// Any other update keeps who wrote the spec.
	assert.Contains(t, mutate(author(named(map[string]any{"replicaCount": 2}), "mallory"), author(named(map[string]any{"replicaCount": 2}), "bob")), authorOp("bob"))
	assert.Contains(t, mutate(named(map[string]any{"replicaCount": 2}), author(named(map[string]any{"replicaCount": 2}), "bob")), authorOp("bob"))
	assert.Empty(t, mutate(author(named(map[string]any{"replicaCount": 2}), "bob"), author(named(map[string]any{"replicaCount": 2}), "bob")))
	// Stored without one (written before Compositor kept it), none may be made up.
	assert.Equal(t, []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("remove", "/metadata/annotations/compositor.dev~1spec-author", nil)},
		mutate(author(named(map[string]any{"replicaCount": 2}), "mallory"), named(map[string]any{"replicaCount": 2})))
}
