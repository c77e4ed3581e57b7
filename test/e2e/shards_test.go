package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/multicluster"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// Issue 18, sharding (a building block): two replicas of Clusters share the registered
// clusters through multicluster-runtime's sharded coordinator, each engaged on one of
// them only; when one replica stops, the other engages its clusters.
func TestReplicasShareTheClusters(t *testing.T) {
	hub, target := controlplane.Start(t), controlplane.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ns = "compositor-system"
	require.NoError(t, hub.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	registered := []string{"c1", "c2", "c3", "c4", "c5", "c6"}
	for _, name := range registered {
		require.NoError(t, hub.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{multicluster.SecretLabel: "true"}},
			Data:       map[string][]byte{multicluster.SecretKey: kubeconfigOf(t, target)},
		}))
	}

	replicas := map[string]*multicluster.Clusters{}
	stops := map[string]func(){}
	for _, id := range []string{"replica-a", "replica-b"} {
		clusters, err := multicluster.New(hub.Config, multicluster.Options{
			Namespace: ns,
			Log:       testr.NewWithOptions(t, testr.Options{Verbosity: 0}).WithName(id),
			Shard:     &multicluster.ShardOptions{ID: id, LeaseDuration: 4 * time.Second},
		})
		require.NoError(t, err)
		runCtx, stop := context.WithCancel(ctx)
		stopped := make(chan error, 1)
		go func() { stopped <- clusters.Start(runCtx) }()
		stops[id] = sync.OnceFunc(func() {
			stop()
			select {
			case err := <-stopped:
				assert.NoError(t, err, id)
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop within 30s", id)
			}
		})
		t.Cleanup(stops[id])
		replicas[id] = clusters
	}
	engaged := func(id string) []string { return names(replicas[id].List(ctx)) }

	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		a, b := engaged("replica-a"), engaged("replica-b")
		all := slices.Sorted(slices.Values(append(slices.Clone(a), b...)))
		assert.Equal(c, registered, all, "every cluster engaged once: a %v, b %v", a, b)
		assert.NotEmpty(c, a, "replica-a has a share")
		assert.NotEmpty(c, b, "replica-b has a share")
	}, 2*time.Minute, 200*time.Millisecond)
	t.Logf("shared after %v: replica-a %v, replica-b %v", time.Since(start).Round(10*time.Millisecond), engaged("replica-a"), engaged("replica-b"))

	// No cluster on both, for a while.
	for range 20 {
		a, b := engaged("replica-a"), engaged("replica-b")
		for _, name := range a {
			assert.NotContains(t, b, name, "engaged on both replicas")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// replica-a goes: replica-b takes every cluster once replica-a's Leases lapse.
	stops["replica-a"]()
	moved := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, registered, engaged("replica-b"))
	}, 2*time.Minute, 200*time.Millisecond)
	t.Logf("replica-a stopped: replica-b engaged all %d clusters %v later", len(registered), time.Since(moved).Round(10*time.Millisecond))
	leases := &metav1.PartialObjectMetadataList{}
	leases.SetGroupVersionKind(schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "LeaseList"})
	require.NoError(t, hub.Client.List(ctx, leases))
	var found []string
	for _, l := range leases.Items {
		found = append(found, fmt.Sprintf("%s/%s", l.Namespace, l.Name))
	}
	t.Logf("leases: %v", found)
}
