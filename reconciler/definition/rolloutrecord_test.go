package definition

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// TestPublishRolloutListsTheDefinitionsNamespace: the status, which the definition's
// namespace reads, counts every composition of the record and lists only that
// namespace's; messages name only those, and count the others.
func TestPublishRolloutListsTheDefinitionsNamespace(t *testing.T) {
	at := metav1.NewTime(time.Now().Truncate(time.Second))
	rec := &RolloutRecord{
		Pending: []string{"payroll/payroll-eu-v2-enterprise", "team-a/api"},
		Moved:   []corev1alpha1.MovedComposition{{Name: "billing/invoices-nightly", Generation: 2, At: at}, {Name: "team-a/web", Generation: 1, At: at}},
		Failed:  []string{"billing/invoices-nightly: InstallFailed: ConfigMap invoices-nightly_Three is invalid"},
		Stayed:  []string{"payroll/payroll-refused: spec.exposure: must be internal", "team-a/old: spec.replicaCount: must be at most 4"},
	}
	ro := &corev1alpha1.Rollout{}
	publishRollout(ro, rec, "team-a")
	assert.Equal(t, []string{"team-a/api"}, ro.Pending)
	assert.Equal(t, []corev1alpha1.MovedComposition{{Name: "team-a/web", Generation: 1, At: at}}, ro.Moved)
	assert.Nil(t, ro.Failed, "billing's failure is not team-a's to read")
	assert.Equal(t, []string{"team-a/old: spec.replicaCount: must be at most 4"}, ro.Stayed)
	assert.EqualValues(t, 2, ro.PendingCount)
	assert.EqualValues(t, 2, ro.MovedCount)
	assert.EqualValues(t, 1, ro.FailedCount)
	assert.EqualValues(t, 2, ro.StayedCount)

	assert.Equal(t, "team-a/web", told([]string{"team-a/web"}, "team-a", ", "))
	assert.Equal(t, "team-a/web, 1 composition of another namespace", told([]string{"billing/invoices-nightly", "team-a/web"}, "team-a", ", "))
	assert.Equal(t, "2 compositions of other namespaces", told([]string{"billing/invoices-nightly: why", "payroll/x: why"}, "team-a", "; "))
	assert.Empty(t, told(nil, "team-a", ", "))
}

// TestRolloutRecordIsCompositorsNamespaces: a status an earlier Compositor wrote, which
// lists every namespace's compositions, becomes the record in Compositor's namespace,
// and the status is narrowed to the definition's namespace; from then on the rollout is
// read back from the record alone, and a rollout whose record is gone moves nothing.
func TestRolloutRecordIsCompositorsNamespaces(t *testing.T) {
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
	at := metav1.NewTime(time.Now().Truncate(time.Second))
	def.Status.Rollout = &corev1alpha1.Rollout{From: "1.1.5", To: "2.0.0", FromVersion: "v1-1-5", ToVersion: "v2-0-0", ToDigest: "sha256:new",
		Phase: corev1alpha1.RolloutProgressing, Plan: corev1alpha1.PlanSummary{Hash: "sha256:plan", ToMove: 3},
		Pending: []string{"payroll/payroll-eu-v2-enterprise"},
		Moved:   []corev1alpha1.MovedComposition{{Name: "billing/invoices-nightly", Generation: 1, At: at}, {Name: "team-a/web", Generation: 1, At: at}},
		Failed:  []string{"billing/invoices-nightly: InstallFailed: invoices-nightly_Three"},
	}
	require.NoError(t, cp.Client.Status().Update(ctx, def))

	r := &Reconciler{Client: cp.Client, Live: cp.Client, Charts: &chartstore.Source{Store: &chartstore.Store{Client: cp.Client, Namespace: "compositor-system"}}}
	rec, err := r.loadRollout(ctx, def)
	require.NoError(t, err)
	require.NotNil(t, rec, "the earlier Compositor's status is the record")
	require.NoError(t, r.commitRollout(ctx, def, rec))
	ro := def.Status.Rollout
	assert.Equal(t, "compositor-system/"+RolloutRecordName(def.UID), ro.Record)
	assert.Nil(t, ro.Pending)
	assert.Equal(t, []corev1alpha1.MovedComposition{{Name: "team-a/web", Generation: 1, At: at}}, ro.Moved)
	assert.Nil(t, ro.Failed)
	assert.EqualValues(t, 1, ro.PendingCount)
	assert.EqualValues(t, 2, ro.MovedCount)
	assert.EqualValues(t, 1, ro.FailedCount)
	require.NoError(t, cp.Client.Status().Update(ctx, def))

	cm := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: RolloutRecordName(def.UID)}, cm))
	kept, err := DecodeRolloutRecord(cm)
	require.NoError(t, err)
	assert.True(t, kept.Follows(ro))
	assert.Equal(t, []string{"payroll/payroll-eu-v2-enterprise"}, kept.Pending)
	assert.Len(t, kept.Moved, 2)
	assert.Equal(t, []string{"billing/invoices-nightly: InstallFailed: invoices-nightly_Three"}, kept.Failed)

	// Read back from the record, not from the status, which lists team-a's only.
	again, err := r.loadRollout(ctx, def)
	require.NoError(t, err)
	require.NotNil(t, again)
	assert.Equal(t, kept.Pending, again.Pending)
	assert.Equal(t, kept.Moved, again.Moved)
	version := again.cm.ResourceVersion
	require.NoError(t, r.commitRollout(ctx, def, again))
	assert.Equal(t, version, again.cm.ResourceVersion, "an unchanged record is not written again")

	// Without its record, a rollout the status says has one moves nothing.
	require.NoError(t, cp.Client.Delete(ctx, cm))
	lost, err := r.loadRollout(ctx, def)
	require.NoError(t, err)
	assert.Nil(t, lost)
	assert.Contains(t, def.Status.Rollout.Message, "is gone or records another rollout")

	// A ConfigMap of the record's name that is not labelled as Compositor's record of
	// the definition is never taken.
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "compositor-system", Name: RolloutRecordName(def.UID)}}
	require.NoError(t, cp.Client.Create(ctx, forged))
	_, err = r.loadRollout(ctx, def)
	assert.ErrorContains(t, err, "is not Compositor's rollout record")

	// The record goes with the definition.
	require.NoError(t, cp.Client.Delete(ctx, forged))
	rec = recordFor(def)
	require.NoError(t, r.saveRecord(ctx, def, rec))
	require.NoError(t, r.forgetRollout(ctx, def))
	assert.Error(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(rec.cm), &corev1.ConfigMap{}))
}
