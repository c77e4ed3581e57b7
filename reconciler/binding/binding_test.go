package binding_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/lightinformer"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/reconciler/binding"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/generatedkind"
)

const (
	wait = 30 * time.Second
	tick = 50 * time.Millisecond
)

// TestReleaseBinding runs the binder of a served version against a real API server:
// its compositions come from an informer of the version (as kinds.Runtime gives it),
// its definitions from a cache with ownership's index, and each subtest serves a kind
// of its own, so that the definitions of one do not decide the ownership of another.
func TestReleaseBinding(t *testing.T) {
	e := newEnv(t)

	t.Run("bound where compositions of the version are", func(t *testing.T) {
		k := e.installKind(t, "alpha")
		e.serve(t, "alpha-system", "alpha", k)
		informer := e.informer(t, k)
		e.composition(t, k, "alpha-apps", "one", k.gvk.Version)
		e.composition(t, k, "alpha-other", "one", "v9-9-9") // of another served version
		e.namespace(t, "alpha-empty")
		e.seen(t, informer, "alpha-apps", 1)
		r := e.binder(k, "alpha-system", informer)

		for _, ns := range []string{"alpha-apps", "alpha-other", "alpha-empty"} {
			_, err := r.Reconcile(e.ctx, request(ns))
			require.NoError(t, err, ns)
		}
		got := e.bound(t, r, "alpha-apps")
		names := rbac.NamesFor("alpha-system", k.plural, k.gvk.Version)
		assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: names.ReleaseRole}, got.RoleRef)
		assert.Equal(t, []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: names.ServiceAccount, Namespace: "alpha-system"}}, got.Subjects)
		assert.Equal(t, "alpha-system", got.Labels[vocab.LabelDefinitionNamespace])
		e.unbound(t, r, "alpha-other")
		e.unbound(t, r, "alpha-empty")
	})

	// While an installation moves its identities to Compositor's namespace, the binding
	// names the ServiceAccount the old controller Deployment runs as too, and only it
	// besides; once the move is done, the new one only.
	t.Run("the former ServiceAccount while identities move", func(t *testing.T) {
		k := e.installKind(t, "former")
		e.serve(t, "former-system", "former", k)
		informer := e.informer(t, k)
		e.composition(t, k, "former-apps", "one", k.gvk.Version)
		e.seen(t, informer, "former-apps", 1)
		r := e.binder(k, "former-system", informer)
		moving := true
		r.Former = func() bool { return moving }
		names := rbac.NamesFor("former-system", k.plural, k.gvk.Version)
		self := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: names.ServiceAccount, Namespace: "former-system"}
		legacy := rbac.LegacySubject("former-system", k.plural, k.gvk.Version)

		_, err := r.Reconcile(e.ctx, request("former-apps"))
		require.NoError(t, err)
		assert.Equal(t, []rbacv1.Subject{self, legacy}, e.bound(t, r, "former-apps").Subjects)

		moving = false
		_, err = r.Reconcile(e.ctx, request("former-apps"))
		require.NoError(t, err)
		assert.Equal(t, []rbacv1.Subject{self}, e.bound(t, r, "former-apps").Subjects)
	})

	t.Run("unbound once the last composition is gone", func(t *testing.T) {
		k := e.installKind(t, "beta")
		e.serve(t, "beta-system", "beta", k)
		informer := e.informer(t, k)
		one := e.composition(t, k, "beta-apps", "one", k.gvk.Version)
		two := e.composition(t, k, "beta-apps", "two", k.gvk.Version)
		e.seen(t, informer, "beta-apps", 2)
		r := e.binder(k, "beta-system", informer)

		_, err := r.Reconcile(e.ctx, request("beta-apps"))
		require.NoError(t, err)
		first := e.bound(t, r, "beta-apps")

		require.NoError(t, e.cp.Client.Delete(e.ctx, one))
		e.seen(t, informer, "beta-apps", 1)
		_, err = r.Reconcile(e.ctx, request("beta-apps"))
		require.NoError(t, err)
		assert.Equal(t, first.UID, e.bound(t, r, "beta-apps").UID, "one composition remains: the binding stays")

		require.NoError(t, e.cp.Client.Delete(e.ctx, two))
		e.seen(t, informer, "beta-apps", 0)
		_, err = r.Reconcile(e.ctx, request("beta-apps"))
		require.NoError(t, err)
		e.unbound(t, r, "beta-apps")

		_, err = r.Reconcile(e.ctx, request("beta-apps"))
		assert.NoError(t, err, "a binding already gone")
	})

	t.Run("the API server is asked before unbinding", func(t *testing.T) {
		k := e.installKind(t, "gamma")
		e.serve(t, "gamma-system", "gamma", k)
		e.namespace(t, "gamma-apps")
		// The informer lists the namespace empty, then stops: it never sees what follows,
		// as an informer that lags behind the API server.
		stale := e.informer(t, k)
		stale.stop()
		r := e.binder(k, "gamma-system", stale)
		require.NoError(t, e.cp.Client.Create(e.ctx, r.RBAC.ReleaseBinding("gamma-apps")))
		before := e.bound(t, r, "gamma-apps")

		composition := e.composition(t, k, "gamma-apps", "new", k.gvk.Version)
		list := r.NewList()
		require.NoError(t, stale.List(e.ctx, list, client.InNamespace("gamma-apps")))
		require.Zero(t, meta.LenList(list), "the informer has not seen the composition")

		_, err := r.Reconcile(e.ctx, request("gamma-apps"))
		require.NoError(t, err)
		assert.Equal(t, before.UID, e.bound(t, r, "gamma-apps").UID, "the API server holds a composition: the binding stays")

		// Once the API server holds none either, the binding goes.
		require.NoError(t, e.cp.Client.Delete(e.ctx, composition))
		_, err = r.Reconcile(e.ctx, request("gamma-apps"))
		require.NoError(t, err)
		e.unbound(t, r, "gamma-apps")
	})

	t.Run("not bound where another definition owns the compositions", func(t *testing.T) {
		k := e.installKind(t, "delta")
		// Two teams serve the version; delta-a's definition is the owner (the older, or
		// first by namespace), delta-b's holds the compositions of its own namespace.
		e.serve(t, "delta-a", "delta", k)
		b := e.serve(t, "delta-b", "delta", k)
		informer := e.informer(t, k)
		e.composition(t, k, "delta-b", "one", k.gvk.Version)
		e.composition(t, k, "delta-apps", "one", k.gvk.Version)
		e.seen(t, informer, "delta-b", 1)
		e.seen(t, informer, "delta-apps", 1)
		ra, rb := e.binder(k, "delta-a", informer), e.binder(k, "delta-b", informer)
		// A binding of delta-a's controller left in delta-b, say from before delta-b's
		// definition served the version.
		require.NoError(t, e.cp.Client.Create(e.ctx, ra.RBAC.ReleaseBinding("delta-b")))

		for _, r := range []*binding.Reconciler{ra, rb} {
			for _, ns := range []string{"delta-b", "delta-apps"} {
				_, err := r.Reconcile(e.ctx, request(ns))
				require.NoError(t, err, "%s in %s", r.DefinitionNamespace, ns)
			}
		}
		e.bound(t, rb, "delta-b")
		e.unbound(t, ra, "delta-b")
		e.bound(t, ra, "delta-apps")
		e.unbound(t, rb, "delta-apps")

		// delta-b's definition moves on to another version: its namespace's compositions
		// of this one are the owner's now.
		b.Status.APIVersion = k.gvk.Group + "/v9-9-9"
		require.NoError(t, e.cp.Client.Status().Update(e.ctx, b))
		e.servers(t, k, "delta-a")
		for _, r := range []*binding.Reconciler{ra, rb} {
			_, err := r.Reconcile(e.ctx, request("delta-b"))
			require.NoError(t, err, r.DefinitionNamespace)
		}
		e.bound(t, ra, "delta-b")
		e.unbound(t, rb, "delta-b")
	})

	t.Run("kept while no definition serves the version", func(t *testing.T) {
		k := e.installKind(t, "epsilon")
		// A definition whose status reports no version yet (not Ready, say) serves none.
		e.definition(t, "epsilon-system", "epsilon")
		informer := e.informer(t, k)
		e.composition(t, k, "epsilon-apps", "one", k.gvk.Version)
		e.seen(t, informer, "epsilon-apps", 1)
		r := e.binder(k, "epsilon-system", informer)

		_, err := r.Reconcile(e.ctx, request("epsilon-apps"))
		require.NoError(t, err)
		e.bound(t, r, "epsilon-apps")
	})

	t.Run("a namespace being deleted is no error", func(t *testing.T) {
		k := e.installKind(t, "zeta")
		e.serve(t, "zeta-system", "zeta", k)
		informer := e.informer(t, k)
		e.composition(t, k, "zeta-leaving", "one", k.gvk.Version)
		e.seen(t, informer, "zeta-leaving", 1)
		// No namespace controller runs here: the namespace stays Terminating, with its
		// composition, and the API server refuses new objects in it.
		require.NoError(t, e.cp.Client.Delete(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "zeta-leaving"}}))
		ns := &corev1.Namespace{}
		require.NoError(t, e.cp.Client.Get(e.ctx, client.ObjectKey{Name: "zeta-leaving"}, ns))
		require.Equal(t, corev1.NamespaceTerminating, ns.Status.Phase)
		r := e.binder(k, "zeta-system", informer)

		_, err := r.Reconcile(e.ctx, request("zeta-leaving"))
		assert.NoError(t, err, "the binding goes with its namespace")
		e.unbound(t, r, "zeta-leaving")
	})
}

// TestBoundNamespacesList runs the binder of a version whose controller runs in a
// Deployment, which follows the ConfigMap of the namespaces where its release role is
// bound. A reconcile that changes nothing writes nothing: a merge patch of what is
// there already leaves the ConfigMap as it was, its resourceVersion too (the API
// server does not store it), so the writes are counted as the binder sends them.
func TestBoundNamespacesList(t *testing.T) {
	e := newEnv(t)
	k := e.installKind(t, "eta")
	e.serve(t, "eta-system", "eta", k)
	informer := e.informer(t, k)
	e.composition(t, k, "eta-apps", "one", k.gvk.Version)
	e.composition(t, k, "eta-apps", "two", k.gvk.Version)
	more := e.composition(t, k, "eta-more", "one", k.gvk.Version)
	e.namespace(t, "eta-empty")
	e.seen(t, informer, "eta-apps", 2)
	e.seen(t, informer, "eta-more", 1)
	r, writes := e.listingBinder(t, k, "eta-system", informer)
	reconciled := func(namespace string) *corev1.ConfigMap {
		t.Helper()
		_, err := r.Reconcile(e.ctx, request(namespace))
		require.NoError(t, err, namespace)
		cm := &corev1.ConfigMap{}
		if err := e.cp.Client.Get(e.ctx, client.ObjectKey(r.RBAC.BoundNamespaces), cm); !apierrors.IsNotFound(err) {
			require.NoError(t, err)
		}
		return cm
	}

	cm := reconciled("eta-empty")
	assert.Empty(t, cm.UID, "no namespace bound: no ConfigMap")
	assert.Zero(t, writes.n(), "nothing to unlist")

	cm = reconciled("eta-apps")
	assert.Equal(t, map[string]string{"eta-apps": "bound"}, cm.Data)
	for key, value := range rbac.IdentityLabels("eta-system", k.plural, k.gvk.Version) {
		assert.Equal(t, value, cm.Labels[key], "made with the version's identity labels, which retiring it deletes it by")
	}
	assert.Equal(t, 1, writes.n(), "made")
	made := cm.ResourceVersion

	for _, ns := range []string{"eta-apps", "eta-apps", "eta-empty"} {
		cm = reconciled(ns)
		assert.Equal(t, made, cm.ResourceVersion, "%s: nothing changed", ns)
		assert.Equal(t, 1, writes.n(), "%s: the ConfigMap says so already: no write", ns)
	}

	cm = reconciled("eta-more")
	assert.Equal(t, map[string]string{"eta-apps": "bound", "eta-more": "bound"}, cm.Data)
	assert.NotEqual(t, made, cm.ResourceVersion, "a namespace bound is listed")
	assert.Equal(t, 2, writes.n())
	listed := cm.ResourceVersion
	cm = reconciled("eta-more")
	assert.Equal(t, listed, cm.ResourceVersion)
	assert.Equal(t, 2, writes.n(), "listed already")

	require.NoError(t, e.cp.Client.Delete(e.ctx, more))
	e.seen(t, informer, "eta-more", 0)
	cm = reconciled("eta-more")
	assert.Equal(t, map[string]string{"eta-apps": "bound"}, cm.Data)
	assert.NotEqual(t, listed, cm.ResourceVersion, "a namespace unbound is unlisted")
	assert.Equal(t, 3, writes.n())
	e.unbound(t, r, "eta-more")
	unlisted := cm.ResourceVersion
	cm = reconciled("eta-more")
	assert.Equal(t, unlisted, cm.ResourceVersion)
	assert.Equal(t, 3, writes.n(), "unlisted already")

	// Whatever else a key says is made what the binder writes.
	cm.Data["eta-apps"] = "something else"
	require.NoError(t, e.cp.Client.Update(e.ctx, cm))
	cm = reconciled("eta-apps")
	assert.Equal(t, map[string]string{"eta-apps": "bound"}, cm.Data)
	assert.Equal(t, 4, writes.n())

	// The ConfigMap removed by someone else is made again, with what it lists.
	require.NoError(t, e.cp.Client.Delete(e.ctx, cm))
	cm = reconciled("eta-apps")
	assert.Equal(t, map[string]string{"eta-apps": "bound"}, cm.Data)
	assert.Equal(t, 5, writes.n(), "made again")
}

func request(namespace string) reconcile.Request {
	return reconcile.Request{NamespacedName: client.ObjectKey{Name: namespace}}
}

type env struct {
	ctx context.Context
	cp  *controlplane.ControlPlane
	// definitions is a cache of CompositionDefinitions with ownership's index, as
	// Compositor's manager has.
	definitions cache.Cache
	metadata    metadata.Interface
}

func newEnv(t *testing.T) *env {
	cp := controlplane.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	definitions, err := cache.New(cp.Config, cache.Options{Scheme: cp.Client.Scheme()})
	require.NoError(t, err)
	require.NoError(t, ownership.IndexServed(ctx, definitions))
	if _, err := definitions.GetInformer(ctx, &corev1alpha1.CompositionDefinition{}); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = definitions.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	require.True(t, definitions.WaitForCacheSync(ctx))
	md, err := metadata.NewForConfig(cp.Config)
	require.NoError(t, err)
	return &env{ctx: ctx, cp: cp, definitions: definitions, metadata: md}
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
	err := e.cp.Client.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// definition creates a CompositionDefinition that serves nothing yet.
func (e *env) definition(t *testing.T, namespace, name string) *corev1alpha1.CompositionDefinition {
	t.Helper()
	e.namespace(t, namespace)
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: "oci://charts.invalid/" + name, Version: "0.1.0"}},
	}
	require.NoError(t, e.cp.Client.Create(e.ctx, def))
	return def
}

// serve creates a definition whose status reports serving k, and waits until the
// cache of definitions has it.
func (e *env) serve(t *testing.T, namespace, name string, k kind) *corev1alpha1.CompositionDefinition {
	t.Helper()
	def := e.definition(t, namespace, name)
	def.Status.APIVersion, def.Status.Kind, def.Status.Resource = k.gvk.GroupVersion().String(), k.gvk.Kind, k.plural
	require.NoError(t, e.cp.Client.Status().Update(e.ctx, def))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &corev1alpha1.CompositionDefinitionList{}
		if assert.NoError(c, e.definitions.List(e.ctx, list, ownership.ServingVersion(k.gvk))) {
			assert.Contains(c, servingNamespaces(list), namespace)
		}
	}, wait, tick)
	return def
}

// servers waits until the cache of definitions has exactly the definitions of
// namespaces serving k.
func (e *env) servers(t *testing.T, k kind, want ...string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &corev1alpha1.CompositionDefinitionList{}
		if assert.NoError(c, e.definitions.List(e.ctx, list, ownership.ServingVersion(k.gvk))) {
			assert.ElementsMatch(c, want, servingNamespaces(list))
		}
	}, wait, tick)
}

func servingNamespaces(list *corev1alpha1.CompositionDefinitionList) []string {
	var out []string
	for _, d := range list.Items {
		if ownership.Serves(&d, schema.FromAPIVersionAndKind(d.Status.APIVersion, d.Status.Kind)) {
			out = append(out, d.Namespace)
		}
	}
	return out
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
	require.NoError(t, e.cp.Client.Create(e.ctx, obj))
	return obj
}

// informer runs the metadata informer of k's compositions labelled with its version,
// as kinds.Runtime does for a version whose controllers run elsewhere, until the test
// ends, and returns it once synced.
func (e *env) informer(t *testing.T, k kind) *versionInformer {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	i := &versionInformer{Informer: lightinformer.NewMetadata(e.metadata, lightinformer.Options{
		Resource:      k.gvk.GroupVersion().WithResource(k.plural),
		LabelSelector: labels.SelectorFromSet(labels.Set{vocab.LabelCompositionVersion: k.gvk.Version}).String(),
	}), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(i.done)
		i.Run(ctx)
	}()
	t.Cleanup(i.stop)
	require.Eventually(t, i.HasSynced, wait, tick)
	return i
}

// seen waits until the informer holds n compositions in namespace.
func (e *env) seen(t *testing.T, i *versionInformer, namespace string, n int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := i.Lister().ByNamespace(namespace).List(labels.Everything())
		if assert.NoError(c, err) {
			assert.Len(c, got, n)
		}
	}, wait, tick, "compositions the informer holds in %s", namespace)
}

// binder is the binder of k's version served by the definition in defNamespace, built
// as kinds.Runtime builds it without in-process controllers.
func (e *env) binder(k kind, defNamespace string, compositions client.Reader) *binding.Reconciler {
	objs, err := rbac.Generate(rbac.Options{Namespace: defNamespace, DefinitionName: k.plural, Plural: k.plural, Version: k.gvk.Version})
	if err != nil {
		panic(err)
	}
	return &binding.Reconciler{
		Compositions: compositions,
		NewList: func() client.ObjectList {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
			return list
		},
		Definitions:         e.definitions,
		Live:                e.cp.Client,
		Writer:              e.cp.Client,
		GVK:                 k.gvk,
		DefinitionNamespace: defNamespace,
		RBAC:                objs,
	}
}

// listingBinder is the binder of k's version served by the definition in
// defNamespace whose controller runs in a Deployment, built as kinds.Runtime builds it:
// the identity in Compositor's namespace, which keeps the ConfigMap of the namespaces
// where it is bound. Its writes go through the returned counter.
func (e *env) listingBinder(t *testing.T, k kind, defNamespace string, compositions client.Reader) (*binding.Reconciler, *configMapWrites) {
	t.Helper()
	const compositorNamespace = "compositor-system"
	e.namespace(t, compositorNamespace)
	objs, err := rbac.Generate(rbac.Options{Namespace: defNamespace, IdentityNamespace: compositorNamespace,
		DefinitionName: k.plural, Plural: k.plural, Version: k.gvk.Version})
	require.NoError(t, err)
	objs.BoundNamespaces = types.NamespacedName{Namespace: compositorNamespace, Name: rbac.NamesFor(defNamespace, k.plural, k.gvk.Version).BoundNamespaces}
	r := e.binder(k, defNamespace, compositions)
	r.RBAC = objs
	writes := &configMapWrites{Client: e.cp.Client}
	r.Writer = writes
	return r, writes
}

// configMapWrites is a client of the API server that counts the writes of ConfigMaps
// sent through it.
type configMapWrites struct {
	client.Client
	count atomic.Int64
}

func (c *configMapWrites) n() int { return int(c.count.Load()) }

func (c *configMapWrites) counted(obj client.Object) {
	if _, ok := obj.(*corev1.ConfigMap); ok {
		c.count.Add(1)
	}
}

func (c *configMapWrites) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.counted(obj)
	return c.Client.Create(ctx, obj, opts...)
}

func (c *configMapWrites) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.counted(obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c *configMapWrites) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.counted(obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *configMapWrites) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.counted(obj)
	return c.Client.Delete(ctx, obj, opts...)
}

// bound returns r's release binding in namespace, failing the test without one.
func (e *env) bound(t *testing.T, r *binding.Reconciler, namespace string) *rbacv1.RoleBinding {
	t.Helper()
	got := &rbacv1.RoleBinding{}
	require.NoError(t, e.cp.Client.Get(e.ctx, client.ObjectKeyFromObject(r.RBAC.ReleaseBinding(namespace)), got),
		"the release binding of %s in %s", r.DefinitionNamespace, namespace)
	return got
}

// unbound asserts that r has no release binding in namespace.
func (e *env) unbound(t *testing.T, r *binding.Reconciler, namespace string) {
	t.Helper()
	err := e.cp.Client.Get(e.ctx, client.ObjectKeyFromObject(r.RBAC.ReleaseBinding(namespace)), &rbacv1.RoleBinding{})
	assert.True(t, apierrors.IsNotFound(err), "the release binding of %s in %s: want none, got %v", r.DefinitionNamespace, namespace, err)
}

// versionInformer is a version's informer read as a client.Reader, as kinds.Runtime
// hands it to the binder: List by namespace, labels and limit.
type versionInformer struct {
	*lightinformer.Informer
	cancel context.CancelFunc
	done   chan struct{}
}

// stop stops the informer and waits until it has.
func (i *versionInformer) stop() {
	i.cancel()
	<-i.done
}

func (i *versionInformer) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("the binder lists compositions, it does not get them")
}

func (i *versionInformer) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	selector := o.LabelSelector
	if selector == nil {
		selector = labels.Everything()
	}
	got, err := i.Lister().ByNamespace(o.Namespace).List(selector)
	if err != nil {
		return err
	}
	if o.Limit > 0 && int64(len(got)) > o.Limit {
		got = got[:o.Limit]
	}
	items := make([]runtime.Object, len(got))
	for n, obj := range got {
		items[n] = obj.DeepCopyObject()
	}
	return meta.SetList(list, items)
}
