package composition

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/compositor-dev/compositor/internal/fairshare"
	"github.com/compositor-dev/compositor/policies"
)

// A composition whose namespace's lane is full goes back to the queue for a moment
// without reading or doing anything (the Reconciler has no client to read with: it
// would panic), and other namespaces are not held.
func TestAFullNamespaceLaneDefersWithoutHoldingAWorker(t *testing.T) {
	lanes := fairshare.New(1)
	r := &Reconciler{Lanes: lanes}
	release, ok := lanes.TryAcquire(policies.CompositionsLane("team-a"))
	require.True(t, ok)
	defer release()

	result, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "x"}})
	require.NoError(t, err)
	assert.Positive(t, result.RequeueAfter)
	assert.LessOrEqual(t, result.RequeueAfter, 750*time.Millisecond)

	other, ok := r.enterLanes(policies.CompositionsLane("team-b"), clusterLane("east"))
	require.True(t, ok, "team-b and cluster east have lanes of their own")
	_, ok = r.enterLanes(clusterLane("west"), clusterLane("east"))
	assert.False(t, ok, "cluster east is full")
	assert.Zero(t, lanes.Busy(clusterLane("west")), "a lane taken before a full one is given back")
	other()
	assert.Zero(t, lanes.Busy(clusterLane("east")))
}
