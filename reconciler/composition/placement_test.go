package composition

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	releasecommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/compositor-dev/compositor/api/vocab"
)

func TestLaterIsTheSoonestRetryOrTheBackoff(t *testing.T) {
	result, err := later([]attempt{{ready: true}, {ready: true}})
	assert.NoError(t, err)
	assert.Zero(t, result.RequeueAfter, "all well: no retry")

	result, err = later([]attempt{{ready: true}, {requeue: retryRefused}, {err: errors.New("dial tcp: connection refused"), requeue: 20 * time.Second}})
	assert.NoError(t, err, "a cluster held for not answering is retried when the hold ends, not with the queue's backoff")
	assert.Equal(t, 20*time.Second, result.RequeueAfter, "the soonest")

	_, err = later([]attempt{{requeue: retryRefused}, {err: errors.New("chart does not install there")}})
	assert.ErrorContains(t, err, "chart does not install there", "any other failure goes to the queue's backoff")
}

// A cluster another replica holds keeps the entry that replica wrote; the leader names
// it in the message only when that entry does not say why already.
func TestClustersHeldElsewhereKeepTheirEntries(t *testing.T) {
	previous := map[string]ClusterStatus{
		"mine":  {Name: "mine", Ready: true, Fingerprint: "old"},
		"ready": {Name: "ready", Ready: true, Fingerprint: "old", Revision: 3},
		"sick":  {Name: "sick", Reason: ReasonInstallFailed, Message: "dial tcp: connection refused"},
	}
	d := departures{failed: map[string]attempt{"mine": {message: "forbidden"}}, elsewhere: []string{"ready", "sick"}}
	next := map[string]ClusterStatus{}
	assert.Equal(t, []string{"mine", "ready", "sick"}, d.pending(previous, next))
	assert.Equal(t, previous["ready"], next["ready"], "another replica's entry is that replica's to write")
	assert.Equal(t, previous["sick"], next["sick"])
	assert.Equal(t, ReasonUninstalling, next["mine"].Reason)
	assert.Equal(t, "the release there is still to uninstall: forbidden", next["mine"].Message)

	assert.Equal(t, []string{"ready", "absent"}, unlisted(next, []string{"ready", "sick", "absent"}))
	assert.Equal(t, "cluster ready: the replica of Compositor that holds the cluster has not uninstalled the release there yet",
		heldElsewhere(unlisted(next, []string{"ready", "sick"}), "has not uninstalled the release there yet"))
	assert.Equal(t, "a; b", joinMessages("", "a", "", "b"))
}

// Shared among replicas, a write that changes status.clusters holds only on the
// resourceVersion the reconcile last saw; any other write, and every write of a
// controller alone, is a plain merge patch.
func TestStatusPatchLocksWhatReplicasShare(t *testing.T) {
	before := &unstructured.Unstructured{Object: map[string]interface{}{"metadata": map[string]interface{}{"name": "x", "resourceVersion": "7"}}}
	after := before.DeepCopy()
	after.SetResourceVersion("9") // an earlier write of the reconcile moved it
	setClusters(after, map[string]ClusterStatus{"eu-1": {Name: "eu-1", Ready: true}})

	shared := &Reconciler{Targets: &Targets{Sharded: true}}
	data, err := shared.statusPatch(before, after).Data(after)
	require.NoError(t, err)
	assert.JSONEq(t, `{"metadata":{"resourceVersion":"9"},"status":{"clusters":[{"name":"eu-1","ready":true}]}}`, string(data))

	conditionsOnly := before.DeepCopy()
	_ = unstructured.SetNestedField(conditionsOnly.Object, int64(2), "status", "observedGeneration")
	data, err = shared.statusPatch(before, conditionsOnly).Data(conditionsOnly)
	require.NoError(t, err)
	assert.JSONEq(t, `{"status":{"observedGeneration":2}}`, string(data), "no lock: status.clusters is left as it is")

	alone := &Reconciler{Targets: &Targets{}}
	unchanged := after.DeepCopy()
	unchanged.SetResourceVersion("7")
	data, err = alone.statusPatch(before, unchanged).Data(unchanged)
	require.NoError(t, err)
	assert.JSONEq(t, `{"status":{"clusters":[{"name":"eu-1","ready":true}]}}`, string(data))
}

// On a target cluster shared among replicas, a pending revision started by another
// replica that runs still may be its operation, still running: it is waited for, not
// taken over. One of this replica's, one whose replica is gone, or one too old, was
// interrupted.
func TestAPendingRevisionOfAnotherReplicaIsWaitedFor(t *testing.T) {
	alive := map[string]bool{"r2": true}
	shared := site{cluster: "eu-1", shared: &replicas{self: "r1", alive: func(_ context.Context, id string) bool { return alive[id] }}}
	pending := func(by string, since time.Time) *release.Release {
		return &release.Release{Name: "shop", Version: 3, Labels: map[string]string{vocab.LabelReplica: by},
			Info: &release.Info{Status: releasecommon.StatusPendingUpgrade, LastDeployed: since}}
	}
	a, running := stillRunning(context.Background(), shared, pending("r2", time.Now()))
	require.True(t, running)
	assert.Equal(t, ReasonInstalling, a.reason)
	assert.Contains(t, a.message, "release shop on cluster eu-1 has been pending-upgrade since ")
	assert.Contains(t, a.message, "by replica r2 of Compositor, which held the cluster before this one and runs still")
	assert.Equal(t, retryTarget, a.requeue)
	assert.NoError(t, a.err)

	for name, rel := range map[string]*release.Release{
		"this replica's own":     pending("r1", time.Now()),
		"a replica that is gone": pending("r3", time.Now()),
		"no replica recorded":    pending("", time.Now()),
		"pending for too long":   pending("r2", time.Now().Add(-maxPending-time.Minute)),
		"not pending":            {Name: "shop", Labels: map[string]string{vocab.LabelReplica: "r2"}, Info: &release.Info{Status: releasecommon.StatusDeployed}},
	} {
		_, running := stillRunning(context.Background(), shared, rel)
		assert.False(t, running, name)
	}
	_, running = stillRunning(context.Background(), site{}, pending("r2", time.Now()))
	assert.False(t, running, "a cluster no other replica acts on")
}
