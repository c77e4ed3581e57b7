package composition

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
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

func TestNotReadyNamesEveryClusterThatIsNot(t *testing.T) {
	clusters := map[string]ClusterStatus{
		"b": {Name: "b", Reason: ReasonInstallFailed, Message: "dial tcp: connection refused"},
		"a": {Name: "a", Ready: true, Reason: "Available", Message: "release x is installed on cluster a"},
		"c": {Name: "c", Reason: ReasonTargetForbidden, Message: "cluster c: nothing was installed"},
	}
	assert.Equal(t, "cluster b: dial tcp: connection refused; cluster c: nothing was installed", notReadyMessage(clusters))
	assert.Equal(t, ReasonInstallFailed, notReadyReason(clusters), "the first, by name")
}
