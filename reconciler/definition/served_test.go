package definition

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/reconciler/kinds"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/generatedkind"
)

// TestFollowingMode runs the following mode on a replica that does not lead, with the
// kinds runtime as compositor serve sets it up when replicas share the target clusters
// (without in-process controllers: it keeps the release bindings), against a real API
// server. It serves exactly the versions the definitions' status serves, a definition
// being deleted included, stops the others, and writes nothing; once the replica is
// elected it has ended, and the runtime reconciles what it left alone.
func TestFollowingMode(t *testing.T) {
	const (
		wait = 30 * time.Second
		tick = 50 * time.Millisecond
	)
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, name := range []string{"team-a", "team-b", "team-c", "apps"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	}

	// Another replica leads, for an hour.
	const leaseName = "following-mode"
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: leaseName},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("another-replica"),
			LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime:          &metav1.MicroTime{Time: time.Now()},
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
	require.NoError(t, cp.Client.Create(ctx, lease))

	gvk, plural := generatedkind.Install(t, cp, "alpha")
	// serving creates a definition whose status serves the kind, with resource unless
	// it is empty.
	serving := func(namespace, resource string, finalizers ...string) *corev1alpha1.CompositionDefinition {
		def := &corev1alpha1.CompositionDefinition{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "alpha", Finalizers: finalizers},
			Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: "oci://charts.invalid/alpha", Version: "0.1.0"}},
		}
		require.NoError(t, cp.Client.Create(ctx, def))
		def.Status.APIVersion, def.Status.Kind, def.Status.Resource = gvk.GroupVersion().String(), gvk.Kind, resource
		require.NoError(t, cp.Client.Status().Update(ctx, def))
		return def
	}
	a := serving("team-a", plural)
	b := serving("team-b", "") // no resource yet: not served
	const hold = "test.compositor.dev/hold"
	c := serving("team-c", plural, hold)
	require.NoError(t, cp.Client.Delete(ctx, c)) // being deleted, it keeps its status
	keyOf := func(namespace string) kinds.VersionKey {
		return kinds.VersionKey{Namespace: namespace, Plural: plural, Version: gvk.Version}
	}
	// A composition of the version in namespace apps, which team-a's definition owns.
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvk.GroupVersion().String(),
		"kind":       gvk.Kind,
		"metadata": map[string]any{
			"namespace": "apps", "name": "one",
			"labels": map[string]any{vocab.LabelCompositionVersion: gvk.Version},
		},
		"spec": map[string]any{"message": "hello"},
	}}
	require.NoError(t, cp.Client.Create(ctx, app))

	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme: cp.Client.Scheme(),
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&rbacv1.RoleBinding{}: {Label: labels.SelectorFromSet(labels.Set{vocab.LabelManagedBy: vocab.ManagedBy})},
		}},
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		Controller:                    ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		LeaderElection:                true,
		LeaderElectionID:              leaseName,
		LeaderElectionNamespace:       metav1.NamespaceDefault,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(4 * time.Second),
		RenewDeadline:                 ptr.To(3 * time.Second),
		RetryPeriod:                   ptr.To(200 * time.Millisecond),
	})
	require.NoError(t, err)
	require.NoError(t, ownership.IndexServed(ctx, mgr.GetFieldIndexer()))
	runtime := &kinds.Runtime{Config: cp.Config, Workers: 2, Targets: &composition.Targets{Sharded: true}}
	require.NoError(t, runtime.SetupWithManager(mgr))
	require.False(t, runtime.NeedLeaderElection(), "the runtime runs on every replica")
	r := &Reconciler{Client: mgr.GetClient(), Kinds: runtime}
	require.NoError(t, r.setupFollower(mgr))
	require.NotNil(t, r.follower, "the following mode runs where the runtime runs on every replica")

	mgrCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	require.True(t, mgr.GetCache().WaitForCacheSync(mgrCtx))

	served := func(want ...kinds.VersionKey) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.ElementsMatch(c, want, runtime.Served())
		}, wait, tick)
	}
	// bindingOf is the release binding of the controller of namespace's version in
	// namespace apps.
	bindingOf := func(namespace string) client.ObjectKey {
		objs, err := rbac.Generate(rbac.Options{Namespace: namespace, Plural: plural, Version: gvk.Version})
		require.NoError(t, err)
		return client.ObjectKeyFromObject(objs.ReleaseBinding("apps"))
	}
	unbound := func(namespace string) {
		t.Helper()
		err := cp.Client.Get(ctx, bindingOf(namespace), &rbacv1.RoleBinding{})
		assert.True(t, apierrors.IsNotFound(err), "no release binding of %s's version: got %v", namespace, err)
	}

	// What the status serves is served: team-c's definition being deleted too, not
	// team-b's, which names no resource.
	served(keyOf("team-a"), keyOf("team-c"))

	// The status changes: team-b's definition names its resource, and team-c's is gone
	// once its compositions are.
	b.Status.Resource = plural
	require.NoError(t, cp.Client.Status().Update(ctx, b))
	served(keyOf("team-a"), keyOf("team-b"), keyOf("team-c"))
	// The following mode acts on one change at a time: having served team-b's version,
	// it is done with the definitions as first seen. It wrote nothing to them, and the
	// runtime left the release bindings to the leader.
	unbound("team-a")
	for _, def := range []*corev1alpha1.CompositionDefinition{a, b} {
		got := &corev1alpha1.CompositionDefinition{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(def), got))
		assert.Empty(t, got.Finalizers, "%s: no finalizer added", def.Namespace)
		assert.Empty(t, got.Status.Conditions, "%s: no status written", def.Namespace)
	}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(c), c))
	controllerutil.RemoveFinalizer(c, hold)
	require.NoError(t, cp.Client.Update(ctx, c))
	served(keyOf("team-a"), keyOf("team-b"))

	// Before this replica leads, the leading mode waits for the following mode.
	waiting, stopWaiting := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stopWaiting()
	require.ErrorIs(t, r.handOver(waiting), context.DeadlineExceeded)

	// The other replica steps down: this one is elected, the following mode ends, and
	// the runtime reconciles what it left alone, the release bindings.
	require.NoError(t, cp.Client.Delete(ctx, lease))
	select {
	case <-mgr.Elected():
	case <-time.After(wait):
		t.Fatal("not elected")
	}
	handedOver, stopHandOver := context.WithTimeout(ctx, wait)
	defer stopHandOver()
	require.NoError(t, r.handOver(handedOver), "the following mode has ended")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, cp.Client.Get(ctx, bindingOf("team-a"), &rbacv1.RoleBinding{}))
	}, wait, tick, "the release binding of team-a's version, once this replica leads")

	// From then on, the following mode serves and stops nothing: it has returned (the
	// hand-off above), and the leading mode decides.
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(a), a))
	a.Status.Resource = ""
	require.NoError(t, cp.Client.Status().Update(ctx, a))
	assert.ElementsMatch(t, []kinds.VersionKey{keyOf("team-a"), keyOf("team-b")}, runtime.Served())
	require.NoError(t, r.stopVersion(ctx, "team-a", plural, gvk.Version))
	assert.Equal(t, []kinds.VersionKey{keyOf("team-b")}, runtime.Served())
}

// TestNoFollowingModeOnTheLeaderAlone: where the kinds runtime runs on the leader
// only, the leading mode alone serves versions, and waits for nothing.
func TestNoFollowingModeOnTheLeaderAlone(t *testing.T) {
	for name, runtime := range map[string]*kinds.Runtime{
		"one replica":                    {},
		"clusters engaged on the leader": {Targets: &composition.Targets{}},
	} {
		r := &Reconciler{Kinds: runtime}
		require.NoError(t, r.setupFollower(nil), name)
		assert.Nil(t, r.follower, name)
		assert.NoError(t, r.handOver(context.Background()), name)
	}
	r := &Reconciler{}
	require.NoError(t, r.setupFollower(nil), "no runtime")
	assert.Nil(t, r.follower, "no runtime")
}
