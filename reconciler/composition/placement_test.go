package composition

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/multicluster"
)

func TestClusterStatusesRoundTripThroughTheStatus(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]interface{}{"status": map[string]interface{}{"observedGeneration": int64(3)}}}
	want := map[string]ClusterStatus{
		"eu-1": {Name: "eu-1", Ready: true, Reason: "Available", ChartVersion: "1.1.5", Fingerprint: "abc", Revision: 4},
		"us-1": {Name: "us-1", Reason: ReasonTargetForbidden, Message: "cluster us-1: nothing was installed"},
	}
	setClusters(obj, want)
	assert.Equal(t, want, Clusters(obj))
	list, _, _ := unstructured.NestedSlice(obj.Object, "status", "clusters")
	require.Len(t, list, 2)
	assert.Equal(t, "eu-1", list[0].(map[string]interface{})["name"], "sorted by name")
	assert.Equal(t, int64(3), obj.Object["status"].(map[string]interface{})["observedGeneration"], "the rest of status is kept")

	setClusters(obj, nil)
	_, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "clusters")
	assert.False(t, found, "no entry removes the field")
}

// A status written by someone else (the status subresource accepts unknown fields) is
// read as far as it makes sense, never with a panic.
func TestClustersReadsAMangledStatus(t *testing.T) {
	for _, status := range []string{
		`{clusters: "not a list"}`,
		`{clusters: [1, "two", null, {name: ""}, {ready: "yes", name: x}, {name: ok, revision: 2}]}`,
		`{clusters: [{name: dup, revision: 1}, {name: dup, revision: 2}]}`,
		`"not a map"`,
	} {
		var parsed interface{}
		require.NoError(t, yaml.Unmarshal([]byte(status), &parsed))
		obj := &unstructured.Unstructured{Object: map[string]interface{}{"status": parsed}}
		assert.NotPanics(t, func() { Clusters(obj) }, status)
	}
	var parsed interface{}
	require.NoError(t, yaml.Unmarshal([]byte(`{clusters: [1, {name: ""}, {name: ok, revision: 2}]}`), &parsed))
	got := Clusters(&unstructured.Unstructured{Object: map[string]interface{}{"status": parsed}})
	assert.Equal(t, map[string]ClusterStatus{"ok": {Name: "ok", Revision: 2}}, got)
}

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

// A cluster that does not answer is held, for longer each time, and answers end the
// hold; what is not a silence (an answer that refuses) never holds it.
func TestTargetsHoldAClusterThatDoesNotAnswer(t *testing.T) {
	targets := &Targets{}
	cl := multicluster.Cluster{Name: "eu-1"}
	_, held := targets.held(cl, ReasonInstallFailed)
	assert.False(t, held)

	refused := &url.Error{Op: "Get", URL: "https://eu-1:6443/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	a := targets.observe(cl, failed(ReasonInstallFailed, fmt.Errorf("reading the history: %w", refused)))
	assert.Equal(t, retryTarget, a.requeue)
	fast, held := targets.held(cl, ReasonInstallFailed)
	require.True(t, held)
	assert.Contains(t, fast.message, "the cluster did not answer (reading the history: Get \"https://eu-1:6443/api\": dial tcp: connection refused); it is asked again after ")
	assert.Error(t, fast.err)
	assert.Equal(t, 2*retryTarget, targets.observe(cl, fast).requeue, "the hold doubles")
	for range 10 {
		a = targets.observe(cl, fast)
	}
	assert.Equal(t, maxHold, a.requeue, "up to maxHold")

	targets.observe(cl, attempt{ready: true})
	_, held = targets.held(cl, ReasonInstallFailed)
	assert.False(t, held, "an answer ends the hold")

	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "x", errors.New("no"))
	a = targets.observe(cl, failed(ReasonInstallFailed, forbidden))
	assert.Zero(t, a.requeue)
	_, held = targets.held(cl, ReasonInstallFailed)
	assert.False(t, held, "a refusal is an answer")
	for _, err := range []error{apierrors.NewServiceUnavailable("down"), apierrors.NewTimeoutError("slow", 1), context.DeadlineExceeded} {
		assert.True(t, unanswered(fmt.Errorf("wrapped: %w", err)), "%v", err)
	}
}

func TestNotReadyNamesEveryClusterThatIsNot(t *testing.T) {
	clusters := map[string]ClusterStatus{
		"b": {Name: "b", Reason: ReasonInstallFailed, Message: "dial tcp: connection refused"},
		"a": {Name: "a", Ready: true, Reason: "Available", Message: "release x is installed on cluster a"},
		"c": {Name: "c", Reason: ReasonTargetForbidden, Message: "cluster c: nothing was installed"},
	}
	assert.Equal(t, "cluster b: dial tcp: connection refused; cluster c: nothing was installed", notReadyMessage(clusters))
	assert.Equal(t, ReasonInstallFailed, notReadyReason(clusters), "the first, by name")
}
