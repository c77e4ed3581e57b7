package definition

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/plan"
	"github.com/compositor-dev/compositor/test/controlplane"
)

func TestPlanDigestKey(t *testing.T) {
	master := []byte("the master key, 32 bytes of it..")
	key, err := PlanDigestKey(master)
	require.NoError(t, err)
	again, err := PlanDigestKey(bytes.Clone(master))
	require.NoError(t, err)
	assert.Equal(t, key, again, "one master key, one plan key: equal values keep equal digests across restarts")
	assert.Len(t, key, 32)
	assert.NotEqual(t, master, key)
	other, err := PlanDigestKey([]byte("another master key, 32 bytes...."))
	require.NoError(t, err)
	assert.NotEqual(t, key, other)
	_, err = PlanDigestKey(nil)
	assert.Error(t, err, "no master key, no plan")
}

// TestSummarizeListsTheDefinitionsNamespace: the status, which the definition's
// namespace reads, counts every composition and names only that namespace's.
func TestSummarizeListsTheDefinitionsNamespace(t *testing.T) {
	p := &plan.Plan{Hash: "sha256:h", Summary: plan.Summary{ToMove: 3, Refused: 2, Deletions: 2}, Compositions: []plan.Composition{
		{Namespace: "payroll", Name: "payroll-eu-v2-enterprise", Refused: []string{"spec.plan: enterprise is not allowed"},
			Deleted: []plan.ObjectRef{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "payroll", Name: "payroll-eu-v2-enterprise-config"}}},
		{Namespace: "team-a", Name: "bad", Refused: []string{"spec.exposure: must be one of internal, public"},
			Deleted: []plan.ObjectRef{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team-a", Name: "bad-config"}}},
		{Namespace: "team-a", Name: "web"},
	}}
	s := summarize(p, "team-a")
	assert.EqualValues(t, 3, s.ToMove)
	assert.EqualValues(t, 2, s.Refused)
	assert.EqualValues(t, 2, s.Deletions)
	assert.Equal(t, []string{"team-a/bad: spec.exposure: must be one of internal, public"}, s.RefusedCompositions)
	assert.Equal(t, []string{"team-a/bad: ConfigMap team-a/bad-config (v1)"}, s.DeletedObjects)
}

// TestNarrowKeptPlanRecordsTheViewDigest: a rollout past its plan, whose whole plan an
// earlier Compositor kept in the definition's namespace (its hash the status's), gets
// the plan moved to Compositor's namespace, the view in its place, and the view's
// digest recorded in the status, against which compositor plan verifies the view.
func TestNarrowKeptPlanRecordsTheViewDigest(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"compositor-system", "team-a"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "fireworksapp"},
		Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: "oci://charts.invalid/fireworks-app", Version: "2.0.0"}},
	}
	require.NoError(t, cp.Client.Create(ctx, def))
	p := &plan.Plan{Chart: "fireworks-app", Kind: "FireworksApp", From: "1.1.5", To: "2.0.0", Summary: plan.Summary{ToMove: 2}, Compositions: []plan.Composition{
		{Namespace: "payroll", Name: "payroll-eu-v2-enterprise", ValuesDigest: "sha256:aa"},
		{Namespace: "team-a", Name: "web", ValuesDigest: "sha256:bb"},
	}}
	var err error
	p.Hash, err = p.Digest()
	require.NoError(t, err)
	def.Status.Rollout = &corev1alpha1.Rollout{From: "1.1.5", To: "2.0.0", FromVersion: "v1-1-5", ToVersion: "v2-0-0",
		Phase: corev1alpha1.RolloutProgressing, Plan: corev1alpha1.PlanSummary{Hash: p.Hash, ToMove: 2}}
	require.NoError(t, cp.Client.Status().Update(ctx, def))

	// As an earlier Compositor kept it.
	data, gz, err := encodeKept(p)
	require.NoError(t, err)
	legacy := newPlanConfigMap(client.ObjectKey{Namespace: "team-a", Name: PlanConfigMapName(def.Name)}, def)
	legacy.Data, legacy.BinaryData = data, map[string][]byte{PlanConfigMapKey: gz}
	require.NoError(t, controllerutil.SetControllerReference(def, legacy, cp.Client.Scheme()))
	require.NoError(t, cp.Client.Create(ctx, legacy))

	r := &Reconciler{Client: cp.Client, Live: cp.Client, Charts: &chartstore.Source{Store: &chartstore.Store{Client: cp.Client, Namespace: "compositor-system"}}}
	r.narrowKeptPlan(ctx, def)
	view := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(legacy), view))
	kept, err := DecodeKeptPlan(view)
	require.NoError(t, err)
	require.NotNil(t, kept.Scope, "the view took its place")
	assert.Equal(t, kept.Scope.Digest, def.Status.Rollout.Plan.ViewDigest, "the status records the view's digest")
	require.NoError(t, kept.Verify(def.Status.Rollout.Plan.Hash, def.Status.Rollout.Plan.ViewDigest))
	whole := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: WholePlanConfigMapName(def.UID)}, whole))
	moved, err := DecodeKeptPlan(whole)
	require.NoError(t, err)
	assert.Equal(t, p.Hash, moved.Hash)
	assert.Len(t, moved.Compositions, 2)
}
