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

// oldLayout is an installation from before issue #46, against a real API server: the
// controller's ServiceAccount and Deployment of fireworksapps v1-1-5 in the
// definition's namespace (team-a), where its tenants write, bound cluster-wide to
// get/list/watch/patch/update every composition, and to the chart archive and the seal
// keys in Compositor's namespace (compositor-system).
type oldLayout struct {
	cp                *controlplane.ControlPlane
	r                 *Reconciler
	def               *corev1alpha1.CompositionDefinition
	fetched           *chartfetch.Result
	api               *generatedAPI
	legacyKey, newKey client.ObjectKey
	names             rbac.Names
	self, legacy      rbacv1.Subject
}

func startOldLayout(t *testing.T, chartVersion string) *oldLayout {
	t.Helper()
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"compositor-system", "team-a", "team-b"} {
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
			URL: origin.URL, Repo: samplecharts.ChartName, Version: chartVersion,
			Credentials: &corev1alpha1.Credentials{Username: "u", PasswordRef: corev1alpha1.SecretKeySelector{Name: "repo-password", Namespace: "team-a", Key: "password"}},
		}},
	}
	require.NoError(t, cp.Client.Create(ctx, def))
	fetched, err := charts.Fetch(ctx, &corev1alpha1.CompositionDefinition{Spec: corev1alpha1.CompositionDefinitionSpec{
		Chart: corev1alpha1.ChartInfo{URL: origin.URL, Repo: samplecharts.ChartName, Version: "1.1.5"}}})
	require.NoError(t, err)
	api := &generatedAPI{ChartName: "fireworks-app", ChartVersion: "1.1.5", Kind: "FireworksApp", Plural: "fireworksapps", Version: "v1-1-5"}
	// The old build served the version: its status says so (no digest: no chart is
	// kept for it here).
	def.Status.Kind, def.Status.Resource, def.Status.APIVersion = api.Kind, api.Plural, "composition.krateo.io/"+api.Version
	require.NoError(t, cp.Client.Status().Update(ctx, def))

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
	// And with its rules: every composition, its status and finalizers, cluster-wide.
	old.CompositionsRole.Rules = append(old.CompositionsRole.Rules, rbacv1.PolicyRule{
		APIGroups: []string{"composition.krateo.io"}, Resources: []string{api.Plural, api.Plural + "/status", api.Plural + "/finalizers"},
		Verbs: []string{"get", "list", "watch", "patch", "update"}})
	for _, obj := range append(old.List(), old.ReleaseBinding("team-b")) {
		switch b := obj.(type) {
		case *rbacv1.RoleBinding:
			b.Subjects = oldSubject
		case *rbacv1.ClusterRoleBinding:
			b.Subjects = oldSubject
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
	return &oldLayout{
		cp: cp, r: r, def: def, fetched: fetched, api: api,
		legacyKey: legacyKey, newKey: client.ObjectKey{Namespace: "compositor-system", Name: newName},
		names:  rbac.NamesFor("team-a", api.Plural, api.Version),
		self:   rbacv1.Subject{Kind: "ServiceAccount", Name: newName, Namespace: "compositor-system"},
		legacy: rbacv1.Subject{Kind: "ServiceAccount", Name: legacyName, Namespace: "team-a"},
	}
}

// subjects are the subjects of the version's bindings, by what they grant, nil for a
// binding that is not there.
func (o *oldLayout) subjects(t *testing.T) map[string][]rbacv1.Subject {
	t.Helper()
	ctx := context.Background()
	out := map[string][]rbacv1.Subject{}
	crb := &rbacv1.ClusterRoleBinding{}
	if err := o.cp.Client.Get(ctx, client.ObjectKey{Name: o.names.CompositionsRole}, crb); !apierrors.IsNotFound(err) {
		require.NoError(t, err)
		out["compositions"] = crb.Subjects
	}
	for what, key := range map[string]client.ObjectKey{
		"credentials":   {Namespace: "team-a", Name: o.names.Credentials},
		"chart archive": {Namespace: "compositor-system", Name: o.names.ChartArchive},
		"release seal":  {Namespace: "compositor-system", Name: o.names.ReleaseSeal},
		"release":       {Namespace: "team-b", Name: o.names.ReleaseBinding},
	} {
		rb := &rbacv1.RoleBinding{}
		if err := o.cp.Client.Get(ctx, key, rb); !apierrors.IsNotFound(err) {
			require.NoError(t, err, what)
			out[what] = rb.Subjects
		}
	}
	return out
}

// moves is Compositor's record of moves.
func (o *oldLayout) moves(t *testing.T) map[string]string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, o.cp.Client.Get(context.Background(), client.ObjectKey{Namespace: "compositor-system", Name: rbac.IdentityMovesConfigMap}, cm))
	return cm.Data
}

// assertLegacyGone: nothing names or is the former identity any more.
func (o *oldLayout) assertLegacyGone(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	err := o.cp.Client.Get(ctx, o.legacyKey, &corev1.ServiceAccount{})
	assert.True(t, apierrors.IsNotFound(err), "the old ServiceAccount, whose tokens a tenant of team-a can mint, is removed: %v", err)
	err = o.cp.Client.Get(ctx, o.legacyKey, &appsv1.Deployment{})
	assert.True(t, apierrors.IsNotFound(err), "the old Deployment is removed: %v", err)
	for what, s := range o.subjects(t) {
		assert.NotContains(t, s, o.legacy, "%s still names the old ServiceAccount", what)
	}
	assert.NotContains(t, o.moves(t), rbac.MoveKey("team-a", o.api.Plural, o.api.Version), "the move is done, for good")
}

// TestIdentitiesMoveToCompositorsNamespace: the definition reconciler makes the
// identity anew in Compositor's namespace and, while the new Deployment is not
// Available yet, keeps the old ServiceAccount in the release bindings only (never the
// seal keys, the chart archive, the credentials or the cluster-wide ones), so that the
// old controller goes on installing; once the new one serves, the old Deployment and
// ServiceAccount are removed and the bindings name the new ServiceAccount only.
func TestIdentitiesMoveToCompositorsNamespace(t *testing.T) {
	o := startOldLayout(t, "1.1.5")
	cp, r, def, fetched, api := o.cp, o.r, o.def, o.fetched, o.api
	ctx := context.Background()
	legacyKey, newKey, self, legacy := o.legacyKey, o.newKey, o.self, o.legacy
	newName := newKey.Name

	// 0. The sweep at the top of every reconciliation: the old identity keeps nothing
	// but its release bindings while it hands over.
	require.NoError(t, r.sweepLegacyIdentities(ctx, def, true))
	assert.Equal(t, map[string]string{rbac.MoveKey("team-a", api.Plural, api.Version): "moving"}, o.moves(t),
		"Compositor's record: the version's old controller ran when it was written")
	got := o.subjects(t)
	assert.Equal(t, []rbacv1.Subject{legacy}, got["release"])
	assert.Equal(t, []rbacv1.Subject{legacy}, got["compositions"], "applied anew by the sync that follows")
	for _, what := range []string{"credentials", "chart archive", "release seal"} {
		assert.Nil(t, got[what], "%s: bound to the old ServiceAccount only, removed", what)
	}

	// 1. The new identity and controller are made; the old ones keep serving.
	_, err := r.applyWorkloads(ctx, def, fetched.Chart, fetched.Digest, api)
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
	for what, s := range o.subjects(t) {
		if what != "release" {
			assert.Equal(t, []rbacv1.Subject{self}, s, "%s: the new ServiceAccount only, even while moving", what)
		}
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
	for what, s := range o.subjects(t) {
		if what != "release" {
			assert.Equal(t, []rbacv1.Subject{self}, s, "%s: the new ServiceAccount only", what)
		}
	}
	o.assertLegacyGone(t)

	// 3. Deleting the version removes what lives in Compositor's namespace, which no
	// owner reference could: found by name and identity labels.
	require.NoError(t, r.deleteWorkloads(ctx, def, api.Plural, api.Version))
	err = cp.Client.Get(ctx, newKey, &appsv1.Deployment{})
	assert.True(t, apierrors.IsNotFound(err), "the controller Deployment goes with the version: %v", err)
	err = cp.Client.Get(ctx, newKey, &corev1.ServiceAccount{})
	assert.True(t, apierrors.IsNotFound(err), "the ServiceAccount goes with the version: %v", err)
}

// A definition that does not sync never reaches applyWorkloads: paused, it goes to
// pause; its chart unreachable with none kept, to fail. Its old identity, whose token
// a tenant of team-a can mint with a token Secret, loses everything all the same, at
// the top of the reconciliation and with no chart: the cluster-wide binding of every
// composition, the seal keys, the chart archive, the release bindings, and the
// ServiceAccount itself.
func TestLegacyIdentityGoesWhateverTheDefinitionsState(t *testing.T) {
	for name, setup := range map[string]struct {
		chartVersion string
		paused       bool
	}{
		"paused":            {chartVersion: "1.1.5", paused: true},
		"chart unreachable": {chartVersion: "9.9.9"},
	} {
		t.Run(name, func(t *testing.T) {
			o := startOldLayout(t, setup.chartVersion)
			ctx := context.Background()
			if setup.paused {
				o.def.Annotations = map[string]string{"compositor.dev/paused": "true"}
				require.NoError(t, o.cp.Client.Update(ctx, o.def))
			}
			_, err := o.r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o.def)})
			if !setup.paused {
				require.Error(t, err, "the chart cannot be had")
			}
			got := &corev1alpha1.CompositionDefinition{}
			require.NoError(t, o.cp.Client.Get(ctx, client.ObjectKeyFromObject(o.def), got))
			assert.Empty(t, got.Status.Digest, "it did not sync")

			o.assertLegacyGone(t)
			assert.Empty(t, o.subjects(t), "every binding served the old ServiceAccount only, and is gone")
			err = o.cp.Client.Get(ctx, client.ObjectKey{Name: o.names.CompositionsRole}, &rbacv1.ClusterRoleBinding{})
			assert.True(t, apierrors.IsNotFound(err), "no cluster-wide binding of the old rules is left: %v", err)
		})
	}
}

// Whether a version moves is Compositor's own record, written once, never a
// Deployment in the definition's namespace: a tenant of team-a may make one with the
// old name and the identity labels (a Helm hook of its release, say). An installation
// whose record names no move (made by this build, or whose moves are done) then binds
// only the new ServiceAccount, whatever it finds there, and at every new chart version
// (the new Deployment not found) too.
func TestTenantsDeploymentStartsNoMove(t *testing.T) {
	o := startOldLayout(t, "1.1.5")
	ctx := context.Background()
	// The record as an installation of this build has it: written before anything served.
	require.NoError(t, o.cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: "compositor-system", Name: rbac.IdentityMovesConfigMap}}))
	for range 2 {
		_, err := o.r.applyWorkloads(ctx, o.def, o.fetched.Chart, o.fetched.Digest, o.api)
		require.NoError(t, err)
		for what, s := range o.subjects(t) {
			if what != "release" { // team-b's, the tenant's own, which Kinds would rebind
				assert.Equal(t, []rbacv1.Subject{o.self}, s, "%s names the new ServiceAccount only", what)
			}
		}
		assert.Empty(t, o.moves(t), "no move starts")
		// A new chart version: the new Deployment is not there yet.
		require.NoError(t, o.cp.Client.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: o.newKey.Namespace, Name: o.newKey.Name}}))
	}
}

// A version whose old controller Deployment no longer runs (or whose controllers run
// in process) has nothing to hand over from: the census records it to be removed, and
// its old identity goes at the first reconciliation of a definition that syncs, before
// the sync; the move ends once the sync has applied every binding anew.
func TestLegacyIdentityWithoutControllerGoesAtOnce(t *testing.T) {
	o := startOldLayout(t, "1.1.5")
	ctx := context.Background()
	require.NoError(t, o.cp.Client.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: o.legacyKey.Namespace, Name: o.legacyKey.Name}}))

	require.NoError(t, o.r.sweepLegacyIdentities(ctx, o.def, true))
	key := rbac.MoveKey("team-a", o.api.Plural, o.api.Version)
	assert.Equal(t, map[string]string{key: "remove"}, o.moves(t))
	err := o.cp.Client.Get(ctx, o.legacyKey, &corev1.ServiceAccount{})
	assert.True(t, apierrors.IsNotFound(err), "the old ServiceAccount goes before the sync: %v", err)
	for what, s := range o.subjects(t) {
		assert.NotContains(t, s, o.legacy, "%s", what)
	}
	err = o.cp.Client.Get(ctx, client.ObjectKey{Name: o.names.CompositionsRole}, &rbacv1.ClusterRoleBinding{})
	assert.True(t, apierrors.IsNotFound(err), "the cluster-wide binding of the old rules goes whole; the sync applies the new: %v", err)
	formerly, err := o.r.formerIdentity(ctx, o.def, o.api.Plural, o.api.Version)
	require.NoError(t, err)
	assert.False(t, formerly, "nothing to hand over from")

	require.NoError(t, o.r.endRemovedMoves(ctx, o.def))
	assert.Empty(t, o.moves(t), "done once the definition has synced")
}
