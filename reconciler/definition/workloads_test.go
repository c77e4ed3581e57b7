package definition

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/generators/controller"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// TestRetainedVersionsRBAC, against a real API server with the sample chart (2.0.0
// adds an Ingress to 1.1.5 and 1.1.6):
//
//   - A definition that moved from 1.1.5 to 2.0.0 and retains 1.1.5 regenerates 1.1.5's
//     RBAC from 1.1.5's chart (applyRetainedRBAC), with delete on 2.0.0's Ingresses: a
//     rollout that moves compositions back to 1.1.5 has Helm delete them. It grants
//     no more than that on them, and no controller is started.
//   - The types a version may delete include those of the charts other definitions of
//     the kind retain, not only those their status serves (removedTypes).
func TestRetainedVersionsRBAC(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"platform", "team-b"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	httpClient, err := rest.HTTPClientFor(cp.Config)
	require.NoError(t, err)
	mapper, err := apiutil.NewDynamicRESTMapper(cp.Config, httpClient)
	require.NoError(t, err)

	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	origin := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
	fetcher, err := chartfetch.New(chartfetch.Options{AllowNetworks: chartfetch.LoopbackNetworks()})
	require.NoError(t, err)
	charts := &chartstore.Source{Fetcher: fetcher}
	digests := map[string]string{}
	for _, version := range []string{"1.1.5", "1.1.6", "2.0.0"} {
		fetched, err := charts.Fetch(ctx, &corev1alpha1.CompositionDefinition{Spec: corev1alpha1.CompositionDefinitionSpec{
			Chart: corev1alpha1.ChartInfo{URL: origin.URL, Repo: samplecharts.ChartName, Version: version}}})
		require.NoError(t, err)
		digests[version] = fetched.Digest
	}
	r := &Reconciler{Client: cp.Client, Live: cp.Client, Charts: charts, Mapper: mapper}

	// definition serves chart current in namespace, retaining the charts of retained.
	definition := func(namespace, current string, retained ...string) *corev1alpha1.CompositionDefinition {
		def := &corev1alpha1.CompositionDefinition{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "fireworksapp"},
			Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: origin.URL, Repo: samplecharts.ChartName, Version: current}},
		}
		require.NoError(t, cp.Client.Create(ctx, def))
		version := func(chart string) string {
			v, err := crd.VersionName(chart)
			require.NoError(t, err)
			return v
		}
		def.Status.Kind, def.Status.Resource = "FireworksApp", "fireworksapps"
		def.Status.APIVersion, def.Status.Digest = "composition.krateo.io/"+version(current), digests[current]
		def.Status.PackageURL = origin.URL + "/fireworks-app-" + current + ".tgz"
		def.Status.Managed.VersionInfo = []corev1alpha1.VersionInfo{{Version: version(current), Served: true, Chart: current}}
		for _, chart := range retained {
			def.Status.Retained = append(def.Status.Retained, corev1alpha1.ServedChart{
				APIVersion: "composition.krateo.io/" + version(chart), Chart: chart, Digest: digests[chart],
				PackageURL: origin.URL + "/fireworks-app-" + chart + ".tgz",
			})
			def.Status.Managed.VersionInfo = append(def.Status.Managed.VersionInfo, corev1alpha1.VersionInfo{Version: version(chart), Served: true, Chart: chart})
		}
		require.NoError(t, cp.Client.Status().Update(ctx, def))
		return def
	}
	ingresses := rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}}
	rulesOn := func(role *rbacv1.ClusterRole, on rbacv1.PolicyRule) [][]string {
		var verbs [][]string
		for _, rule := range role.Rules {
			if slices.Equal(rule.APIGroups, on.APIGroups) && slices.Equal(rule.Resources, on.Resources) {
				verbs = append(verbs, rule.Verbs)
			}
		}
		return verbs
	}
	releaseRole := func(namespace, version string) *rbacv1.ClusterRole {
		t.Helper()
		role := &rbacv1.ClusterRole{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: rbac.NamesFor(namespace, "fireworksapps", version).ReleaseRole}, role))
		return role
	}

	def := definition("platform", "2.0.0", "1.1.5")
	current := &generatedAPI{ChartName: "fireworks-app", ChartVersion: "2.0.0", Kind: "FireworksApp", Plural: "fireworksapps", Version: "v2-0-0"}
	require.NoError(t, r.applyRetainedRBAC(ctx, def, current, def.Status.Retained[0]))
	role := releaseRole("platform", "v1-1-5")
	assert.Equal(t, [][]string{rbac.RemovalVerbs}, rulesOn(role, ingresses), "1.1.5's controller may delete 2.0.0's Ingresses, no more")
	assert.Equal(t, [][]string{rbac.HelmVerbs}, rulesOn(role, rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}}), "its own types, from its own chart")
	sa := &corev1.ServiceAccount{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "platform", Name: rbac.ServiceAccountName("platform", "fireworksapps", "v1-1-5")}, sa))

	deployment := &appsv1.Deployment{}
	err = cp.Client.Get(ctx, client.ObjectKey{Namespace: "platform", Name: controller.Name("platform", "fireworksapps", "v1-1-5")}, deployment)
	assert.True(t, apierrors.IsNotFound(err), "no controller Deployment: %v", err)

	// Again: nothing changes; the charts' types are kept by digest.
	require.NoError(t, r.applyRetainedRBAC(ctx, def, current, def.Status.Retained[0]))
	again := releaseRole("platform", "v1-1-5")
	assert.Equal(t, role.ResourceVersion, again.ResourceVersion, "applying the same RBAC writes nothing")
	for _, chart := range []string{"1.1.5", "2.0.0"} {
		_, ok := r.typesOf.Get(digests[chart])
		assert.True(t, ok, "the types of %s are kept by digest", chart)
	}

	// The version def serves is applyWorkloads' to apply; a version it does not retain
	// is refused.
	require.NoError(t, r.applyRetainedRBAC(ctx, def, current, corev1alpha1.ServedChart{APIVersion: "composition.krateo.io/v2-0-0", Chart: "2.0.0", Digest: digests["2.0.0"]}))
	assert.Error(t, r.applyRetainedRBAC(ctx, def, current, corev1alpha1.ServedChart{APIVersion: "composition.krateo.io/v1-1-6", Chart: "1.1.6", Digest: digests["1.1.6"]}))

	// Another definition of the kind at 1.1.6 retains nothing: what it may delete comes
	// from every chart the others serve, retained ones included. Here 2.0.0 is only
	// retained, by a definition that moved back to 1.1.5.
	require.NoError(t, cp.Client.Delete(ctx, def))
	r.typesOf.Clear()
	definition("platform", "1.1.5", "2.0.0")
	other := definition("team-b", "1.1.6")
	removed := r.removedTypes(ctx, other, &generatedAPI{Kind: "FireworksApp", Plural: "fireworksapps", Version: "v1-1-6"}, digests["1.1.6"])
	assert.True(t, slices.ContainsFunc(removed, func(t rbac.ResourceType) bool {
		return t.Group == "networking.k8s.io" && t.Resource == "ingresses"
	}), "2.0.0, retained by platform/fireworksapp, creates Ingresses: %v", removed)
}

// TestRetiredVersionsBoundNamespacesGo, against a real API server: the ConfigMap in
// Compositor's namespace that lists where a version's release role is bound, which
// the binder (package binding) keeps for the controller Deployment, goes with the
// version's identity when the version is retired, whatever it still lists. Another
// version's stays, and so does a ConfigMap of the same name without the version's
// identity labels: Compositor's namespace holds others' ConfigMaps.
func TestRetiredVersionsBoundNamespacesGo(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"compositor-system", "team-a"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	r := &Reconciler{Client: cp.Client, Live: cp.Client,
		Charts: &chartstore.Source{Store: &chartstore.Store{Client: cp.Client, Namespace: "compositor-system"}}}
	def := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "fireworksapp"}}
	// list makes version's ConfigMap as the binder makes it: with the labels of the
	// version's ServiceAccount, unless foreign.
	list := func(version string, foreign bool) client.ObjectKey {
		objs, err := rbac.Generate(rbac.Options{Namespace: "team-a", IdentityNamespace: "compositor-system",
			DefinitionName: def.Name, Plural: "fireworksapps", Version: version})
		require.NoError(t, err)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "compositor-system",
			Name: rbac.NamesFor("team-a", "fireworksapps", version).BoundNamespaces, Labels: objs.ServiceAccount.Labels}}
		if foreign {
			cm.Labels = map[string]string{"app": "someone-else"}
		} else {
			cm.Data = map[string]string{"team-b": "bound"}
		}
		require.NoError(t, cp.Client.Create(ctx, cm))
		return client.ObjectKeyFromObject(cm)
	}
	retired, kept, foreign := list("v1-1-5", false), list("v2-0-0", false), list("v1-1-6", true)

	require.NoError(t, r.deleteWorkloads(ctx, def, "fireworksapps", "v1-1-5"))
	err := cp.Client.Get(ctx, retired, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "the retired version's list of bound namespaces goes with it: %v", err)
	assert.NoError(t, cp.Client.Get(ctx, kept, &corev1.ConfigMap{}), "another version's stays")

	require.NoError(t, r.deleteWorkloads(ctx, def, "fireworksapps", "v1-1-6"))
	assert.NoError(t, cp.Client.Get(ctx, foreign, &corev1.ConfigMap{}), "not the version's: left alone")

	assert.NoError(t, r.deleteWorkloads(ctx, def, "fireworksapps", "v1-1-5"), "gone already")
}
