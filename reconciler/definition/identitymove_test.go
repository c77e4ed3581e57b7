package definition

import (
	"context"
	"github.com/compositor-dev/compositor/reconciler/composition"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/generators/controller"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/reconciler/internal/ssa"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// TestIdentitiesMoveToCompositorsNamespace, against a real API server: an installation
// from before issue #46 has its controller's ServiceAccount and Deployment in the
// definition's namespace (team-a), where its tenants write. The definition reconciler
// makes them anew in Compositor's namespace and, while the new Deployment is not
// Available yet, keeps the old ServiceAccount in every binding, so that the old
// controller goes on installing; once the new one serves, the old Deployment and
// ServiceAccount are removed and the bindings name the new ServiceAccount only.
func TestIdentitiesMoveToCompositorsNamespace(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"compositor-system", "team-a"} {
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
	charts := &chartstore.Source{Fetcher: fetcher, Live: cp.Client, Store: &chartstore.Store{Client: cp.Client, Namespace: "compositor-system"}}
	r := &Reconciler{Client: cp.Client, Live: cp.Client, Charts: charts, Mapper: mapper, Seal: testMasterSeal(t)}

	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "fireworksapp"},
		Spec: corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{
			URL: origin.URL, Repo: samplecharts.ChartName, Version: "1.1.5",
			Credentials: &corev1alpha1.Credentials{Username: "u", PasswordRef: corev1alpha1.SecretKeySelector{Name: "repo-password", Namespace: "team-a", Key: "password"}},
		}},
	}
	require.NoError(t, cp.Client.Create(ctx, def))
	fetched, err := charts.Fetch(ctx, &corev1alpha1.CompositionDefinition{Spec: corev1alpha1.CompositionDefinitionSpec{
		Chart: corev1alpha1.ChartInfo{URL: origin.URL, Repo: samplecharts.ChartName, Version: "1.1.5"}}})
	require.NoError(t, err)
	api := &generatedAPI{ChartName: "fireworks-app", ChartVersion: "1.1.5", Kind: "FireworksApp", Plural: "fireworksapps", Version: "v1-1-5"}

	// What the code before the move made: everything of the identity in team-a.
	created, err := rbac.ResourceTypes(fetched.Chart, mapper)
	require.NoError(t, err)
	old, err := rbac.Generate(rbac.Options{
		Namespace: "team-a", DefinitionName: def.Name, Plural: api.Plural, Version: api.Version, Types: created,
		CredentialsSecret: "repo-password", ChartArchiveNamespace: "compositor-system", ChartDigest: fetched.Digest,
		ReleaseSealNamespace: "compositor-system", SealKeySecrets: []string{composition.KeySecretName(def.UID)}, WatchCompositions: true,
	})
	require.NoError(t, err)
	// Named as it named them: the ServiceAccount <plural>-<version>-controller of team-a.
	oldSubject := []rbacv1.Subject{rbac.LegacySubject("team-a", api.Plural, api.Version)}
	old.ServiceAccount.Name = oldSubject[0].Name
	for _, obj := range append(old.List(), old.ReleaseBinding("team-b")) {
		switch b := obj.(type) {
		case *rbacv1.RoleBinding:
			b.Subjects = oldSubject
		case *rbacv1.ClusterRoleBinding:
			b.Subjects = oldSubject
		}
		if obj.GetNamespace() == "team-b" {
			require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}))
		}
		require.NoError(t, ssa.Apply(ctx, cp.Client, obj))
	}
	legacyName := oldSubject[0].Name
	before := controller.Deployment(controller.Options{
		Definition: def, Plural: api.Plural, Version: api.Version, ReleaseSealNamespace: "compositor-system",
	})
	before.Name, before.Spec.Template.Spec.ServiceAccountName = legacyName, legacyName
	require.NoError(t, ssa.Apply(ctx, cp.Client, before))
	legacyKey := client.ObjectKey{Namespace: "team-a", Name: legacyName}
	require.NoError(t, cp.Client.Get(ctx, legacyKey, &appsv1.Deployment{}), "the old layout: a Deployment in the definition's namespace")
	require.NoError(t, cp.Client.Get(ctx, legacyKey, &corev1.ServiceAccount{}))

	newName := rbac.ServiceAccountName("team-a", api.Plural, api.Version)
	newKey := client.ObjectKey{Namespace: "compositor-system", Name: newName}
	names := rbac.NamesFor("team-a", api.Plural, api.Version)
	self := rbacv1.Subject{Kind: "ServiceAccount", Name: newName, Namespace: "compositor-system"}
	legacy := rbacv1.Subject{Kind: "ServiceAccount", Name: legacyName, Namespace: "team-a"}
	subjects := func() map[string][]rbacv1.Subject {
		t.Helper()
		out := map[string][]rbacv1.Subject{}
		crb := &rbacv1.ClusterRoleBinding{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: names.CompositionsRole}, crb))
		out["compositions"] = crb.Subjects
		for what, key := range map[string]client.ObjectKey{
			"credentials":   {Namespace: "team-a", Name: names.Credentials},
			"chart archive": {Namespace: "compositor-system", Name: names.ChartArchive},
			"release seal":  {Namespace: "compositor-system", Name: names.ReleaseSeal},
		} {
			rb := &rbacv1.RoleBinding{}
			require.NoError(t, cp.Client.Get(ctx, key, rb), what)
			out[what] = rb.Subjects
		}
		return out
	}

	// 1. The new identity and controller are made; the old ones keep serving.
	_, err = r.applyWorkloads(ctx, def, fetched.Chart, fetched.Digest, api)
	require.NoError(t, err)
	sa := &corev1.ServiceAccount{}
	require.NoError(t, cp.Client.Get(ctx, newKey, sa), "the ServiceAccount in Compositor's namespace")
	assert.Equal(t, "team-a", sa.Labels["compositor.dev/definition-namespace"])
	current := &appsv1.Deployment{}
	require.NoError(t, cp.Client.Get(ctx, newKey, current), "the controller Deployment in Compositor's namespace")
	assert.Equal(t, newName, current.Spec.Template.Spec.ServiceAccountName)
	assert.Contains(t, current.Spec.Template.Spec.Containers[0].Args, "team-a", "it acts for the definitions of team-a")
	require.NoError(t, cp.Client.Get(ctx, legacyKey, &appsv1.Deployment{}), "the old controller runs until the new one serves")
	require.NoError(t, cp.Client.Get(ctx, legacyKey, &corev1.ServiceAccount{}))
	for what, s := range subjects() {
		assert.Equal(t, []rbacv1.Subject{self, legacy}, s, "%s: both ServiceAccounts while moving", what)
	}

	// Again, still not Available: nothing is removed.
	_, err = r.applyWorkloads(ctx, def, fetched.Chart, fetched.Digest, api)
	require.NoError(t, err)
	require.NoError(t, cp.Client.Get(ctx, legacyKey, &appsv1.Deployment{}))

	// 2. The new Deployment serves (there is no Deployment controller here: its status
	// is written as the Deployment controller would).
	require.NoError(t, cp.Client.Get(ctx, newKey, current))
	current.Status = appsv1.DeploymentStatus{
		ObservedGeneration: current.Generation, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}},
	}
	require.NoError(t, cp.Client.Status().Update(ctx, current))
	assert.Equal(t, []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "fireworksapp"}}},
		r.definitionsOfController(ctx, current), "the Deployment's status brings its definition back")

	_, err = r.applyWorkloads(ctx, def, fetched.Chart, fetched.Digest, api)
	require.NoError(t, err)
	err = cp.Client.Get(ctx, legacyKey, &appsv1.Deployment{})
	assert.True(t, apierrors.IsNotFound(err), "the old Deployment is removed once the new one serves: %v", err)
	err = cp.Client.Get(ctx, legacyKey, &corev1.ServiceAccount{})
	assert.True(t, apierrors.IsNotFound(err), "the old ServiceAccount is removed: %v", err)
	require.NoError(t, cp.Client.Get(ctx, newKey, &corev1.ServiceAccount{}))
	require.NoError(t, cp.Client.Get(ctx, newKey, &appsv1.Deployment{}))
	for what, s := range subjects() {
		assert.Equal(t, []rbacv1.Subject{self}, s, "%s: the new ServiceAccount only", what)
	}

	// 3. Deleting the version removes what lives in Compositor's namespace, which no
	// owner reference could: found by name and identity labels.
	require.NoError(t, r.deleteWorkloads(ctx, def, api.Plural, api.Version))
	err = cp.Client.Get(ctx, newKey, &appsv1.Deployment{})
	assert.True(t, apierrors.IsNotFound(err), "the controller Deployment goes with the version: %v", err)
	err = cp.Client.Get(ctx, newKey, &corev1.ServiceAccount{})
	assert.True(t, apierrors.IsNotFound(err), "the ServiceAccount goes with the version: %v", err)
}
