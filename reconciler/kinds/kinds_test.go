package kinds

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/generatedkind"
)

const (
	wait = 30 * time.Second
	tick = 50 * time.Millisecond
)

// TestRuntime runs Runtime, without in-process controllers (it keeps only the release
// bindings), in a manager against a real API server, as compositor serve sets it up.
// Each subtest serves kinds of its own, in a manager of its own.
func TestRuntime(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()

	t.Run("Ensure serves a version until Stop retires it", func(t *testing.T) {
		e := newEnv(t, cp)
		k := e.installKind(t, "alpha")
		def := e.serve(t, "alpha-system", "alpha", k)
		key := VersionKey{Namespace: "alpha-system", Plural: k.plural, Version: k.gvk.Version}

		// Before Runtime starts, Ensure waits for it, until its context ends.
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		require.ErrorIs(t, e.kinds.Ensure(cancelled, def, k.gvk.Kind, k.plural, k.gvk.Version), context.Canceled)

		e.composition(t, k, "alpha-apps", "one", k.gvk.Version)
		e.composition(t, k, "alpha-apps", "older", "v9-9-9") // written through another version
		e.start(t)
		require.Nil(t, e.kinds.version(key), "nothing served before Ensure")
		assert.Empty(t, e.kinds.Served())

		require.NoError(t, e.kinds.Ensure(ctx, def, k.gvk.Kind, k.plural, k.gvk.Version))
		v := e.kinds.version(key)
		require.NotNil(t, v)
		assert.Equal(t, []VersionKey{key}, e.kinds.Served())
		assert.Equal(t, k.gvk, v.gvk)
		// Its informer lists the compositions labelled with the version, and only those.
		require.Eventually(t, v.informer.HasSynced, wait, tick)
		assert.Equal(t, []string{"alpha-apps/one"}, v.informer.Store().ListKeys())
		// Its requests reach the binder: the release binding of the version's controller.
		got := e.eventuallyBound(t, key, "alpha-apps")
		names := rbac.NamesFor("alpha-system", k.plural, k.gvk.Version)
		assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: names.ReleaseRole}, got.RoleRef)
		assert.Equal(t, []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: names.ServiceAccount, Namespace: "alpha-system"}}, got.Subjects)
		watches(t, cp, k.plural, 1, "one watch of the version")

		// A version served is served once.
		require.NoError(t, e.kinds.Ensure(ctx, def, k.gvk.Kind, k.plural, k.gvk.Version))
		assert.Same(t, v, e.kinds.version(key))

		// Stop returns once the informer has stopped (lightinformer.Set), and the API
		// server's watch ends.
		e.kinds.Stop(key.Namespace, key.Plural, key.Version)
		assert.Nil(t, e.kinds.version(key))
		assert.Empty(t, e.kinds.Served())
		watches(t, cp, k.plural, 0, "no watch of a version no longer served")

		// A request of the version that comes up after Stop is dropped.
		e.composition(t, k, "alpha-later", "one", k.gvk.Version)
		res, err := e.kinds.reconcile(ctx, request{Version: key, NamespacedName: types.NamespacedName{Namespace: "alpha-later"}, Binding: true})
		require.NoError(t, err)
		assert.Equal(t, reconcile.Result{}, res)
		e.unbound(t, key, "alpha-later")

		// Served again, the version starts afresh and lists what came meanwhile.
		require.NoError(t, e.kinds.Ensure(ctx, def, k.gvk.Kind, k.plural, k.gvk.Version))
		again := e.kinds.version(key)
		require.NotNil(t, again)
		assert.NotSame(t, v, again)
		e.eventuallyBound(t, key, "alpha-later")
	})

	t.Run("release bindings follow the compositions", func(t *testing.T) {
		e := newEnv(t, cp)
		k := e.installKind(t, "beta")
		def := e.serve(t, "beta-system", "beta", k)
		key := VersionKey{Namespace: "beta-system", Plural: k.plural, Version: k.gvk.Version}
		e.start(t)
		require.NoError(t, e.kinds.Ensure(ctx, def, k.gvk.Kind, k.plural, k.gvk.Version))
		v := e.kinds.version(key)
		require.NotNil(t, v)
		require.Eventually(t, v.informer.HasSynced, wait, tick)

		one := e.composition(t, k, "beta-apps", "one", k.gvk.Version)
		first := e.eventuallyBound(t, key, "beta-apps")
		two := e.composition(t, k, "beta-apps", "two", k.gvk.Version)
		e.composition(t, k, "beta-more", "one", k.gvk.Version)
		e.eventuallyBound(t, key, "beta-more")

		// With one of the two compositions gone, a binding someone removes comes back.
		require.NoError(t, cp.Client.Delete(ctx, one))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{"beta-apps/two", "beta-more/one"}, sortedKeys(v))
		}, wait, tick, "the informer has seen the deletion")
		require.NoError(t, cp.Client.Delete(ctx, first))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := &rbacv1.RoleBinding{}
			if assert.NoError(c, cp.Client.Get(ctx, client.ObjectKeyFromObject(first), got)) {
				assert.NotEqual(c, first.UID, got.UID)
			}
		}, wait, tick, "the release binding restored")

		// With the last one gone, the binding goes; the other namespace keeps its own.
		require.NoError(t, cp.Client.Delete(ctx, two))
		e.eventuallyUnbound(t, key, "beta-apps")
		e.bound(t, key, "beta-more")
	})

	t.Run("the versions of each definition namespace are served apart", func(t *testing.T) {
		e := newEnv(t, cp)
		k := e.installKind(t, "gamma")
		// Two teams serve the version; gamma-a's definition is the owner (the older, or
		// first by namespace), gamma-b's holds the compositions of its own namespace.
		a := e.serve(t, "gamma-a", "gamma", k)
		b := e.serve(t, "gamma-b", "gamma", k)
		keyA := VersionKey{Namespace: "gamma-a", Plural: k.plural, Version: k.gvk.Version}
		keyB := VersionKey{Namespace: "gamma-b", Plural: k.plural, Version: k.gvk.Version}
		e.start(t)
		e.servers(t, k, "gamma-a", "gamma-b")
		require.NoError(t, e.kinds.Ensure(ctx, a, k.gvk.Kind, k.plural, k.gvk.Version))
		require.NoError(t, e.kinds.Ensure(ctx, b, k.gvk.Kind, k.plural, k.gvk.Version))
		va, vb := e.kinds.version(keyA), e.kinds.version(keyB)
		require.NotNil(t, va)
		require.NotNil(t, vb)
		assert.ElementsMatch(t, []VersionKey{keyA, keyB}, e.kinds.Served())
		assert.NotSame(t, va, vb)
		watches(t, cp, k.plural, 2, "a watch per definition namespace")

		e.composition(t, k, "gamma-b", "one", k.gvk.Version)
		e.composition(t, k, "gamma-apps", "one", k.gvk.Version)
		e.eventuallyBound(t, keyB, "gamma-b")
		e.eventuallyBound(t, keyA, "gamma-apps")
		// Each version's binder removes its binding where the other's controller owns
		// the compositions.
		require.NoError(t, cp.Client.Create(ctx, e.releaseBinding(t, keyA, "gamma-b")))
		require.NoError(t, cp.Client.Create(ctx, e.releaseBinding(t, keyB, "gamma-apps")))
		e.eventuallyUnbound(t, keyA, "gamma-b")
		e.eventuallyUnbound(t, keyB, "gamma-apps")

		// gamma-b's definition moves on to another version: the owner's controller takes
		// over its namespace's compositions of this one.
		b.Status.APIVersion = k.gvk.Group + "/v9-9-9"
		require.NoError(t, cp.Client.Status().Update(ctx, b))
		e.eventuallyBound(t, keyA, "gamma-b")
		e.eventuallyUnbound(t, keyB, "gamma-b")

		// Stopping gamma-b's version leaves gamma-a's served.
		e.kinds.Stop(keyB.Namespace, keyB.Plural, keyB.Version)
		assert.Nil(t, e.kinds.version(keyB))
		assert.Same(t, va, e.kinds.version(keyA))
		watches(t, cp, k.plural, 1, "gamma-b's watch ended")
		e.composition(t, k, "gamma-later", "one", k.gvk.Version)
		e.eventuallyBound(t, keyA, "gamma-later")
	})

	t.Run("every version stops with the manager", func(t *testing.T) {
		e := newEnv(t, cp)
		k := e.installKind(t, "delta")
		def := e.serve(t, "delta-system", "delta", k)
		key := VersionKey{Namespace: "delta-system", Plural: k.plural, Version: k.gvk.Version}
		stop := e.start(t)
		require.NoError(t, e.kinds.Ensure(ctx, def, k.gvk.Kind, k.plural, k.gvk.Version))
		require.NotNil(t, e.kinds.version(key))
		watches(t, cp, k.plural, 1, "the version's watch")

		// Runtime returns once every informer has stopped (lightinformer.Set).
		require.NoError(t, stop())
		assert.Nil(t, e.kinds.version(key))
		watches(t, cp, k.plural, 0, "no watch once Runtime has stopped")
		assert.Error(t, e.kinds.Ensure(ctx, def, k.gvk.Kind, k.plural, k.gvk.Version), "Runtime has stopped")
		assert.Nil(t, e.kinds.version(key))
	})
}

// TestPerVersionRate: each version reconciles compositions at its own rate, with a
// burst of ten seconds' worth, and release bindings are not limited.
func TestPerVersionRate(t *testing.T) {
	rates := &perVersionRate{perSecond: 1, limiters: map[VersionKey]*rate.Limiter{}}
	limits := requestRate{rates}
	busy := VersionKey{Namespace: "team-a", Plural: "fireworksapps", Version: "v1-1-5"}
	other := VersionKey{Namespace: "team-b", Plural: "fireworksapps", Version: "v1-1-5"}
	compositionOf := func(key VersionKey) request {
		return request{Version: key, NamespacedName: types.NamespacedName{Namespace: "apps", Name: "one"}}
	}

	for i := range 10 {
		require.Zero(t, limits.When(compositionOf(busy)), "request %d is within the burst", i+1)
	}
	// Ten more at once exhaust it by ten seconds: the last waits, unless the test took
	// that long.
	var last time.Duration
	for range 10 {
		last = limits.When(compositionOf(busy))
	}
	assert.Positive(t, last, "beyond the burst")
	assert.Zero(t, limits.When(compositionOf(other)), "another version has its own rate")
	assert.Zero(t, limits.When(request{Version: busy, NamespacedName: types.NamespacedName{Namespace: "apps"}, Binding: true}),
		"release bindings are not limited")
	// A version stopped and served again starts with a full burst.
	rates.forget(busy)
	assert.Zero(t, limits.When(compositionOf(busy)))
}

type env struct {
	cp    *controlplane.ControlPlane
	mgr   manager.Manager
	kinds *Runtime
}

// newEnv sets Runtime up in a new manager, as compositor serve does with
// --controllers other than in-process; start starts it.
func newEnv(t *testing.T, cp *controlplane.ControlPlane) *env {
	t.Helper()
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme: cp.Client.Scheme(),
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&rbacv1.RoleBinding{}: {Label: labels.SelectorFromSet(labels.Set{vocab.LabelManagedBy: vocab.ManagedBy})},
		}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(t, err)
	require.NoError(t, ownership.IndexServed(context.Background(), mgr.GetFieldIndexer()))
	k := &Runtime{Config: cp.Config, Workers: 4}
	require.NoError(t, k.SetupWithManager(mgr))
	return &env{cp: cp, mgr: mgr, kinds: k}
}

// start starts the manager until the test ends, or until the function it returns,
// which returns what the manager's Start did, is called.
func (e *env) start(t *testing.T) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.mgr.Start(ctx) }()
	var result error
	stopped := false
	stop := func() error {
		if !stopped {
			cancel()
			result, stopped = <-done, true
		}
		return result
	}
	t.Cleanup(func() { assert.NoError(t, stop()) })
	require.True(t, e.mgr.GetCache().WaitForCacheSync(ctx))
	return stop
}

// kind is a generated kind served at one version.
type kind struct {
	gvk    schema.GroupVersionKind
	plural string
}

// installKind installs the CRD Compositor generates for a small chart named chartName.
func (e *env) installKind(t *testing.T, chartName string) kind {
	t.Helper()
	gvk, plural := generatedkind.Install(t, e.cp, chartName)
	return kind{gvk: gvk, plural: plural}
}

func (e *env) namespace(t *testing.T, name string) {
	t.Helper()
	err := e.cp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// serve creates a definition whose status reports serving k.
func (e *env) serve(t *testing.T, namespace, name string, k kind) *corev1alpha1.CompositionDefinition {
	t.Helper()
	e.namespace(t, namespace)
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: "oci://charts.invalid/" + name, Version: "0.1.0"}},
	}
	ctx := context.Background()
	require.NoError(t, e.cp.Client.Create(ctx, def))
	def.Status.APIVersion, def.Status.Kind, def.Status.Resource = k.gvk.GroupVersion().String(), k.gvk.Kind, k.plural
	require.NoError(t, e.cp.Client.Status().Update(ctx, def))
	return def
}

// servers waits until the manager's cache has the definitions of namespaces serving k.
func (e *env) servers(t *testing.T, k kind, namespaces ...string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &corev1alpha1.CompositionDefinitionList{}
		if assert.NoError(c, e.mgr.GetCache().List(context.Background(), list, ownership.ServingVersion(k.gvk))) {
			var got []string
			for _, d := range list.Items {
				got = append(got, d.Namespace)
			}
			assert.ElementsMatch(c, namespaces, got)
		}
	}, wait, tick)
}

// composition creates a composition of k in namespace, labelled as written through
// version (as admission labels it).
func (e *env) composition(t *testing.T, k kind, namespace, name, version string) *unstructured.Unstructured {
	t.Helper()
	e.namespace(t, namespace)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": k.gvk.GroupVersion().String(),
		"kind":       k.gvk.Kind,
		"metadata": map[string]any{
			"namespace": namespace, "name": name,
			"labels": map[string]any{vocab.LabelCompositionVersion: version},
		},
		"spec": map[string]any{"message": "hello"},
	}}
	require.NoError(t, e.cp.Client.Create(context.Background(), obj))
	return obj
}

// releaseBinding is the release binding of key's controller in namespace.
func (e *env) releaseBinding(t *testing.T, key VersionKey, namespace string) *rbacv1.RoleBinding {
	t.Helper()
	objs, err := rbac.Generate(rbac.Options{Namespace: key.Namespace, Plural: key.Plural, Version: key.Version})
	require.NoError(t, err)
	return objs.ReleaseBinding(namespace)
}

// bound returns the release binding of key's controller in namespace, failing the
// test without one.
func (e *env) bound(t *testing.T, key VersionKey, namespace string) *rbacv1.RoleBinding {
	t.Helper()
	got := &rbacv1.RoleBinding{}
	require.NoError(t, e.cp.Client.Get(context.Background(), client.ObjectKeyFromObject(e.releaseBinding(t, key, namespace)), got),
		"the release binding of %s in %s", key.Namespace, namespace)
	return got
}

func (e *env) eventuallyBound(t *testing.T, key VersionKey, namespace string) *rbacv1.RoleBinding {
	t.Helper()
	want := e.releaseBinding(t, key, namespace)
	got := &rbacv1.RoleBinding{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, e.cp.Client.Get(context.Background(), client.ObjectKeyFromObject(want), got))
	}, wait, tick, "the release binding of %s in %s", key.Namespace, namespace)
	return got
}

func (e *env) unbound(t *testing.T, key VersionKey, namespace string) {
	t.Helper()
	err := e.cp.Client.Get(context.Background(), client.ObjectKeyFromObject(e.releaseBinding(t, key, namespace)), &rbacv1.RoleBinding{})
	assert.True(t, apierrors.IsNotFound(err), "the release binding of %s in %s: want none, got %v", key.Namespace, namespace, err)
}

func (e *env) eventuallyUnbound(t *testing.T, key VersionKey, namespace string) {
	t.Helper()
	want := e.releaseBinding(t, key, namespace)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := e.cp.Client.Get(context.Background(), client.ObjectKeyFromObject(want), &rbacv1.RoleBinding{})
		assert.True(c, apierrors.IsNotFound(err), "want none, got %v", err)
	}, wait, tick, "the release binding of %s in %s", key.Namespace, namespace)
}

// sortedKeys are the namespace/name keys of what v's informer holds.
func sortedKeys(v *servedVersion) []string {
	keys := v.informer.Store().ListKeys()
	slices.Sort(keys)
	return keys
}

// apiServerWatches is the number of watches the API server serves on resource of the
// generated group, from its apiserver_longrunning_requests metric.
func apiServerWatches(cp *controlplane.ControlPlane, resource string) (int, error) {
	clients, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return 0, err
	}
	body, err := clients.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		return 0, err
	}
	total := 0
	lines := bufio.NewScanner(bytes.NewReader(body))
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `verb="WATCH"`) ||
			!strings.Contains(line, `group="`+vocab.CompositionGroup+`"`) || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		fields := strings.Fields(line)
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		total += int(n)
	}
	return total, lines.Err()
}

// watches waits until the API server serves want watches on resource.
func watches(t *testing.T, cp *controlplane.ControlPlane, resource string, want int, msg string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := apiServerWatches(cp, resource)
		if assert.NoError(c, err) {
			assert.Equal(c, want, got)
		}
	}, wait, tick, msg)
}
