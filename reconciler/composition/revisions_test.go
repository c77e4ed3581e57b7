package composition

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// sealedRevision is revision n of composition shop (uid), sealed with seal.
func sealedRevision(t testing.TB, seal *ReleaseSeal, uid types.UID, n int64) *corev1alpha1.CompositionRevision {
	t.Helper()
	rev := &corev1alpha1.CompositionRevision{
		ObjectMeta:    metav1.ObjectMeta{Namespace: "team-a", Name: RevisionName("FireworksApp", "shop", uid, n)},
		Composition:   corev1alpha1.CompositionReference{APIVersion: "composition.krateo.io/v1-1-5", Kind: "FireworksApp", Name: "shop", UID: uid},
		Revision:      n,
		Release:       "shop",
		ServedVersion: "v1-1-5",
		ChartVersion:  "1.1.5",
		ChartDigest:   "sha256:0123",
		Spec:          apiextensionsv1.JSON{Raw: []byte(`{"replicaCount":2,"service":{"type":"NodePort","port":8080}}`)},
		Fingerprint:   "sha256:abcd",
		Time:          metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		Author:        "alice",
	}
	require.NoError(t, seal.SealRevision(rev))
	return rev
}

func TestRevisionSealHoldsOnlyForWhatCompositorWrote(t *testing.T) {
	seal := testSeal(t)
	rev := sealedRevision(t, seal, "uid-shop", 1)
	require.NoError(t, seal.VerifyRevision(rev, "uid-shop"))
	assert.True(t, strings.HasPrefix(rev.Seal, "v1:"), rev.Seal)

	// The API server re-encodes the spec (keys sorted, spaces dropped): still sealed.
	reencoded := rev.DeepCopy()
	reencoded.Spec.Raw = []byte(`{ "service": {"port": 8080, "type": "NodePort"}, "replicaCount": 2 }`)
	assert.NoError(t, seal.VerifyRevision(reencoded, "uid-shop"))

	// Every field is sealed: a tenant who changes any of them makes it tampered.
	for name, tamper := range map[string]func(r *corev1alpha1.CompositionRevision){
		"spec":           func(r *corev1alpha1.CompositionRevision) { r.Spec.Raw = []byte(`{"replicaCount":9}`) },
		"spec not JSON":  func(r *corev1alpha1.CompositionRevision) { r.Spec.Raw = []byte(`{"replicaCount":`) },
		"chart version":  func(r *corev1alpha1.CompositionRevision) { r.ChartVersion = "2.0.0" },
		"served version": func(r *corev1alpha1.CompositionRevision) { r.ServedVersion = "v2-0-0" },
		"digest":         func(r *corev1alpha1.CompositionRevision) { r.ChartDigest = "sha256:ffff" },
		"fingerprint":    func(r *corev1alpha1.CompositionRevision) { r.Fingerprint = "sha256:ffff" },
		"revision":       func(r *corev1alpha1.CompositionRevision) { r.Revision = 7 },
		"release":        func(r *corev1alpha1.CompositionRevision) { r.Release = "other" },
		"author":         func(r *corev1alpha1.CompositionRevision) { r.Author = "mallory" },
		"time":           func(r *corev1alpha1.CompositionRevision) { r.Time = metav1.NewTime(r.Time.Add(time.Hour)) },
		"name":           func(r *corev1alpha1.CompositionRevision) { r.Name = "fireworksapp.shop.9" },
		"namespace":      func(r *corev1alpha1.CompositionRevision) { r.Namespace = "team-b" },
		"kind":           func(r *corev1alpha1.CompositionRevision) { r.Composition.Kind = "OtherApp" },
		"composition":    func(r *corev1alpha1.CompositionRevision) { r.Composition.Name = "other" },
		"apiVersion":     func(r *corev1alpha1.CompositionRevision) { r.Composition.APIVersion = "composition.krateo.io/v2-0-0" },
		// Relabelled for another composition, the record still names its own UID.
		"uid":     func(r *corev1alpha1.CompositionRevision) { r.Composition.UID = "uid-other" },
		"no seal": func(r *corev1alpha1.CompositionRevision) { r.Seal = "" },
		"seal":    func(r *corev1alpha1.CompositionRevision) { r.Seal = "v1:" + strings.Repeat("0", 64) },
	} {
		t.Run(name, func(t *testing.T) {
			tampered := rev.DeepCopy()
			tamper(tampered)
			err := seal.VerifyRevision(tampered, tampered.Composition.UID)
			var refused *RevisionError
			require.ErrorAs(t, err, &refused)
			assert.True(t, refused.Tampered, err.Error())
		})
	}

	// Another key (another Compositor) did not write it.
	assert.Error(t, testSeal(t).VerifyRevision(rev, "uid-shop"))

	// Sealed, but of another composition: refused, naming whose it is.
	err := seal.VerifyRevision(rev, "uid-other")
	var refused *RevisionError
	require.ErrorAs(t, err, &refused)
	assert.False(t, refused.Tampered)
	assert.Contains(t, err.Error(), "is a revision of FireworksApp shop (uid uid-shop), not of this composition (uid uid-other)")
}

// A revision seal is never a release record's: the domains differ.
func TestRevisionSealIsNotAReleaseSeal(t *testing.T) {
	seal := testSeal(t)
	rev := sealedRevision(t, seal, "uid-shop", 1)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: rev.Name}}
	assert.NotEqual(t, seal.sum(rev.Namespace, secret), rev.Seal)
}

func TestRevisionName(t *testing.T) {
	assert.Equal(t, "fireworksapp.shop.3", RevisionName("FireworksApp", "shop", "uid-1", 3))
	long := strings.Repeat("a", 250)
	assert.Equal(t, "fireworksapp.uid-1.3", RevisionName("FireworksApp", long, "uid-1", 3))
}

func TestPrunableKeepsTheNewest(t *testing.T) {
	seal := testSeal(t)
	var revs []corev1alpha1.CompositionRevision
	for _, n := range []int64{3, 1, 5, 2, 4} {
		revs = append(revs, *sealedRevision(t, seal, "uid-shop", n))
	}
	tampered := sealedRevision(t, seal, "uid-shop", 6)
	tampered.Spec.Raw = []byte(`{"replicaCount":100}`)
	revs = append(revs, *tampered, *sealedRevision(t, seal, "uid-other", 7))

	sorted, refused := SortRevisions(seal, revs, "uid-shop")
	numbers := func(rs []*corev1alpha1.CompositionRevision) []int64 {
		var out []int64
		for _, r := range rs {
			out = append(out, r.Revision)
		}
		return out
	}
	assert.Equal(t, []int64{5, 4, 3, 2, 1}, numbers(sorted), "sealed and of the composition, newest first")
	assert.Len(t, refused, 2, "the tampered one, and the other composition's")
	assert.Equal(t, []int64{2, 1}, numbers(Prunable(sorted, 3)))
	assert.Empty(t, Prunable(sorted, 5))
	assert.Empty(t, Prunable(sorted, 10))
	assert.Equal(t, []int64{4, 3, 2, 1}, numbers(Prunable(sorted, 0)), "at least one is kept")
}

func TestRevisionHistoryLimit(t *testing.T) {
	assert.Equal(t, DefaultRevisionHistoryLimit, revisionHistoryLimit(nil))
	assert.Equal(t, DefaultRevisionHistoryLimit, revisionHistoryLimit(&corev1alpha1.CompositionDefinition{}))
	def := &corev1alpha1.CompositionDefinition{Spec: corev1alpha1.CompositionDefinitionSpec{Upgrade: &corev1alpha1.UpgradePolicy{RevisionHistoryLimit: ptr.To[int32](3)}}}
	assert.Equal(t, 3, revisionHistoryLimit(def))
}

// Against a real API server: each recorded revision is stored as written (its seal
// holds once the API server has re-encoded it), an object of its name that is not the
// record is replaced, and only the limit's newest are kept; a tampered one is reported
// and left alone.
func TestRecordRevisionPrunesToTheLimit(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}))
	seal := testSeal(t)
	recorder := events.NewFakeRecorder(100)
	r := &Reconciler{
		Client: cp.Client, Live: cp.Client, Recorder: recorder, Helm: &Helm{seal: seal},
		GVK: schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: "v1-1-5", Kind: "FireworksApp"},
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.GVK)
	obj.SetNamespace("team-a")
	obj.SetName("shop")
	obj.SetUID("uid-shop")
	obj.SetAnnotations(map[string]string{vocab.AnnotationSpecAuthor: "alice"})
	def := &corev1alpha1.CompositionDefinition{Spec: corev1alpha1.CompositionDefinitionSpec{Upgrade: &corev1alpha1.UpgradePolicy{RevisionHistoryLimit: ptr.To[int32](3)}}}
	w := func(replicas int) work {
		values := map[string]any{"replicaCount": int64(replicas), "ratio": 0.5, "name": "x"}
		fp, err := Fingerprint("sha256:0123", values)
		require.NoError(t, err)
		return work{chart: &chart.Chart{Metadata: &chart.Metadata{Name: "fireworks-app", Version: "1.1.5"}}, digest: "sha256:0123", values: values, fingerprint: fp, release: "shop"}
	}

	// A tenant's object under the name of revision 1 is replaced by the record.
	squatter := sealedRevision(t, testSeal(t), "uid-shop", 1)
	squatter.Name, squatter.Seal = RevisionName("FireworksApp", "shop", "uid-shop", 1), "v1:forged"
	require.NoError(t, cp.Client.Create(ctx, squatter))

	for n := 1; n <= 5; n++ {
		require.NoError(t, r.recordRevision(ctx, obj, def, w(n), n))
	}
	list := &corev1alpha1.CompositionRevisionList{}
	require.NoError(t, cp.Client.List(ctx, list, client.InNamespace("team-a"), client.MatchingLabels{vocab.LabelCompositionUID: "uid-shop"}))
	sorted, refused := SortRevisions(seal, list.Items, "uid-shop")
	require.Empty(t, refused)
	require.Len(t, sorted, 3)
	for i, want := range []int64{5, 4, 3} {
		rev := sorted[i]
		assert.Equal(t, want, rev.Revision)
		assert.Equal(t, "alice", rev.Author)
		assert.Equal(t, "1.1.5", rev.ChartVersion)
		assert.Equal(t, "v1-1-5", rev.ServedVersion)
		assert.Equal(t, w(int(want)).fingerprint, rev.Fingerprint)
		var spec map[string]any
		require.NoError(t, json.Unmarshal(rev.Spec.Raw, &spec))
		assert.EqualValues(t, want, spec["replicaCount"])
		assert.Equal(t, fmt.Sprintf("fireworksapp.shop.%d", want), rev.Name)
		assert.Equal(t, "shop", rev.Labels[vocab.LabelCompositionName])
		assert.Equal(t, "FireworksApp", rev.Labels[vocab.LabelCompositionKind])
	}

	// Recording the same revision again changes nothing.
	require.NoError(t, r.recordRevision(ctx, obj, def, w(5), 5))

	// A tenant edits revision 4: it is reported, neither counted nor deleted.
	edited := sorted[1].DeepCopy()
	edited.Spec.Raw = []byte(`{"replicaCount":99}`)
	require.NoError(t, cp.Client.Update(ctx, edited))
	require.NoError(t, r.recordRevision(ctx, obj, def, w(6), 6))
	list = &corev1alpha1.CompositionRevisionList{}
	require.NoError(t, cp.Client.List(ctx, list, client.InNamespace("team-a"), client.MatchingLabels{vocab.LabelCompositionUID: "uid-shop"}))
	sorted, refused = SortRevisions(seal, list.Items, "uid-shop")
	require.Len(t, refused, 1)
	var bad *RevisionError
	require.True(t, errors.As(refused[0], &bad))
	assert.Equal(t, "fireworksapp.shop.4", bad.Name)
	var kept []int64
	for _, rev := range sorted {
		kept = append(kept, rev.Revision)
	}
	assert.Equal(t, []int64{6, 5, 3}, kept)
	found := false
	for len(recorder.Events) > 0 {
		if e := <-recorder.Events; strings.Contains(e, EventRevisionTampered) {
			found = true
			assert.Contains(t, e, "fireworksapp.shop.4 was changed after Compositor wrote it")
		}
	}
	assert.True(t, found, "the tampered revision is reported")
}

// Any spec bytes: sealing either refuses them (not a JSON object) or gives a seal that
// holds for the same spec re-encoded as the API server stores it, and for no other
// spec.
func FuzzRevisionSeal(f *testing.F) {
	for _, seed := range []string{`{}`, `{"replicaCount":2}`, `{"a":{"b":[1,2.5,"x",null,true]}}`, `{"n":1e21}`, `null`, `[]`, `{"a":1} {}`, ``, `{"a":"\u00e9"}`} {
		f.Add([]byte(seed))
	}
	seal, err := NewReleaseSeal(NewSealKey())
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, spec []byte) {
		rev := &corev1alpha1.CompositionRevision{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "team-a", Name: "fireworksapp.shop.1"},
			Composition: corev1alpha1.CompositionReference{Kind: "FireworksApp", Name: "shop", UID: "uid-shop"},
			Revision:    1,
			Spec:        apiextensionsv1.JSON{Raw: spec},
		}
		if err := seal.SealRevision(rev); err != nil {
			return
		}
		require.NoError(t, seal.VerifyRevision(rev, "uid-shop"))
		// Re-encoded with its keys sorted, its spaces dropped, its numbers as written.
		dec := json.NewDecoder(bytes.NewReader(spec))
		dec.UseNumber()
		decoded := map[string]any{} // absent is the empty object
		if len(bytes.TrimSpace(spec)) > 0 {
			require.NoError(t, dec.Decode(&decoded), "sealed, so a JSON object")
		}
		stored, err := json.Marshal(decoded)
		require.NoError(t, err)
		again := rev.DeepCopy()
		again.Spec.Raw = stored
		assert.NoError(t, seal.VerifyRevision(again, "uid-shop"))
		other := rev.DeepCopy()
		other.Spec.Raw = []byte(`{"fuzz-other":true}`)
		if c, _ := canonicalJSON(spec); string(c) != `{"fuzz-other":true}` {
			assert.Error(t, seal.VerifyRevision(other, "uid-shop"))
		}
	})
}
