package e2e

import (
	"context"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// Issue 18, sharding: two replicas of Compositor, electing a leader, share three
// target clusters. Each cluster is held by one replica (its shard Lease names it),
// which alone installs there and writes its entry of status.clusters; a composition
// placed on all three is Ready with revision 1 on each. When the replica holding
// clusters goes, the other takes them over, and an update reaches all three. A third
// replica joins and takes a share; deleting the composition uninstalls it from all
// three, each cluster by the replica that holds it.
func TestReplicasShareTheDelivery(t *testing.T) {
	hub := controlplane.Start(t)
	targets := map[string]*controlplane.ControlPlane{}
	for _, name := range []string{"target-a", "target-b", "target-c"} {
		targets[name] = controlplane.Start(t)
	}
	clusters := slices.Sorted(maps.Keys(targets))
	ctx := context.Background()

	// Both replicas serve the webhooks behind one address, as a Service does.
	front := startWebhookFront(t)
	stops := map[string]func(){}
	replicas := []string{"replica-1", "replica-2"}
	// replica runs a replica of Compositor that shares the clusters, behind front.
	replica := func(id string) func(*app.ServeOptions) {
		return func(o *app.ServeOptions) {
			o.Controllers = app.ControllersInProcess
			o.Multicluster = true
			o.LeaderElection = true
			o.ReplicaID = id
			o.ShardLeaseDuration = 4 * time.Second
			front.add(o.WebhookAddr)
			o.WebhookURL = front.URL
		}
	}
	for _, id := range replicas {
		stops[id] = startCompositor(t, hub, replica(id))
	}
	for name, target := range targets {
		require.NoError(t, hub.Client.Create(ctx, kubeconfigSecret(t, name, target, map[string]string{"env": "prod"})))
	}
	applyDefinition(t, hub, serveCharts(t, placedChart).URL, placedNamespace, "placed-app", "0.1.0")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("DEBUG %s", hub.Kubectl(ctx, "", "get", placedResource, "-A", "-o", "yaml").Stdout)
		}
	})

	// holders maps each cluster to the replica its shard Lease names, while it lasts.
	holders := func(c *assert.CollectT) map[string]string {
		out := map[string]string{}
		for _, name := range clusters {
			lease := &coordinationv1.Lease{}
			if !assert.NoError(c, hub.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: "compositor-shard-" + name}, lease), name) {
				continue
			}
			if holder := lease.Spec.HolderIdentity; holder != nil && *holder != "" && lease.Spec.RenewTime != nil &&
				time.Since(lease.Spec.RenewTime.Time) < time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second {
				out[name] = *holder
			}
		}
		return out
	}
	// Rendezvous hashing of these names gives each replica a share, once each knows
	// the other: the first to start may hold them all for a moment.
	var held map[string]string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		held = holders(c)
		assert.Len(c, held, len(clusters), "every cluster held by a replica")
		assert.ElementsMatch(c, replicas, slices.Compact(slices.Sorted(maps.Values(held))), "each replica holds a share")
	}, 2*time.Minute, 200*time.Millisecond)
	// leader is the replica the leader election Lease names.
	leader := func() string {
		lease := &coordinationv1.Lease{}
		if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: "compositor.compositor.dev"}, lease); err != nil || lease.Spec.HolderIdentity == nil {
			return "none"
		}
		return *lease.Spec.HolderIdentity
	}
	t.Logf("clusters held: %v; the leader: %s", held, leader())

	start := time.Now()
	res := hub.Kubectl(ctx, placedApp("hello", "env=prod", "one"), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release hello is installed on target-a, target-b, target-c", readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, 2*time.Minute, 100*time.Millisecond)
	t.Logf("placed on three targets by two replicas: Ready %v after kubectl apply", time.Since(start).Round(10*time.Millisecond))
	assertOnTargets(t, targets, "hello", map[string]string{"target-a": "one", "target-b": "one", "target-c": "one"})
	statuses := clusterStatuses(t, hub, "hello")
	require.Len(t, statuses, len(clusters))
	for _, name := range clusters {
		assert.True(t, statuses[name].Ready, "%s: %+v", name, statuses[name])
		assert.Equal(t, int64(1), statuses[name].Revision, "%s got the release once", name)
		records := releaseRecords(t, targets[name], "hello")
		if assert.Len(t, records, 1, "%s keeps one revision of the release", name) {
			assert.Equal(t, held[name], records[0].Labels[vocab.LabelReplica], "%s was installed by the replica holding it", name)
		}
	}

	// The replica holding the most clusters goes; the other takes them over.
	counts := map[string]int{}
	for _, holder := range held {
		counts[holder]++
	}
	victim := slices.MaxFunc(replicas, func(a, b string) int { return counts[a] - counts[b] })
	survivor := replicas[0]
	if survivor == victim {
		survivor = replicas[1]
	}
	stops[victim]()
	stopped := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range clusters {
			assert.Equal(c, survivor, holders(c)[name], name)
		}
	}, 2*time.Minute, 200*time.Millisecond)
	t.Logf("%s (held %d clusters) stopped: %s held all three %v later; the leader: %s", victim, counts[victim], survivor, time.Since(stopped).Round(10*time.Millisecond), leader())

	updateEverywhere(t, hub, targets, "hello", "two")
	for name, st := range clusterStatuses(t, hub, "hello") {
		assert.Equal(t, int64(2), st.Revision, name)
	}

	// A third replica joins and takes a share. Deleting the composition uninstalls it
	// from every cluster, each by the replica that holds it; then the definition goes.
	stops["replica-3"] = startCompositor(t, hub, replica("replica-3"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		held = holders(c)
		assert.Len(c, held, len(clusters))
		assert.ElementsMatch(c, []string{survivor, "replica-3"}, slices.Compact(slices.Sorted(maps.Values(held))), "each replica holds a share")
	}, 2*time.Minute, 200*time.Millisecond)
	t.Logf("clusters held: %v", held)
	deleting := time.Now()
	res = hub.Kubectl(ctx, "", "delete", placedResource, "hello", "-n", placedNamespace, "--timeout=2m")
	require.NoError(t, res.Err, res.Stderr)
	t.Logf("deleted, uninstalled from three clusters by two replicas, in %v", time.Since(deleting).Round(10*time.Millisecond))
	assertOnTargets(t, targets, "hello", nil)
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(placedGVK)
	assert.True(t, apierrors.IsNotFound(hub.Client.Get(ctx, client.ObjectKey{Namespace: placedNamespace, Name: "hello"}, obj)))
	res = hub.Kubectl(ctx, "", "delete", "compositiondefinition", "placed-app", "-n", placedNamespace, "--timeout=2m")
	require.NoError(t, res.Err, res.Stderr)
}

// releaseRecords are the revisions Helm keeps of release on target.
func releaseRecords(t *testing.T, target *controlplane.ControlPlane, release string) []corev1.Secret {
	t.Helper()
	list := &corev1.SecretList{}
	require.NoError(t, target.Client.List(context.Background(), list, client.InNamespace(placedNamespace),
		client.MatchingLabels{"owner": "helm", "name": release}))
	return list.Items
}

// webhookFront is one address for the webhooks of several replicas, as a Service is:
// each connection goes, as it is (TLS included), to the first replica that accepts it.
type webhookFront struct {
	URL string

	mu       sync.Mutex
	backends []string
}

func startWebhookFront(t *testing.T) *webhookFront {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	f := &webhookFront{URL: "https://" + l.Addr().String()}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go f.serve(conn)
		}
	}()
	return f
}

func (f *webhookFront) add(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backends = append(f.backends, addr)
}

func (f *webhookFront) serve(conn net.Conn) {
	defer conn.Close()
	f.mu.Lock()
	backends := slices.Clone(f.backends)
	f.mu.Unlock()
	for _, addr := range backends {
		backend, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			continue
		}
		defer backend.Close()
		go func() {
			_, _ = io.Copy(backend, conn)
			_ = backend.(*net.TCPConn).CloseWrite()
		}()
		_, _ = io.Copy(conn, backend)
		return
	}
}
