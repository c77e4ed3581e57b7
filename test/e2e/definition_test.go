package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/generators/controller"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// sampleRepository serves the sample charts as a Helm repository for the test.
func sampleRepository(t testing.TB) *chartserver.Repository {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	return chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
}

// localSeed is the seed manifest for the local chart repository, pointed at repoURL.
func localSeed(t *testing.T, repoURL string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(seedDir(t), "local-fireworksapp.yaml"))
	require.NoError(t, err)
	return strings.ReplaceAll(string(data), "http://127.0.0.1:8879", repoURL)
}

func condition(t *testing.T, cp *controlplane.ControlPlane, namespace, name, kind string) (string, string) {
	t.Helper()
	def := &corev1alpha1.CompositionDefinition{}
	require.NoError(t, cp.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, def))
	c := meta.FindStatusCondition(def.Status.Conditions, kind)
	if c == nil {
		return "", ""
	}
	return string(c.Status), c.Reason
}

func TestDefinitionServesItsChartAsAnAPI(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	repo := sampleRepository(t)
	ctx := context.Background()

	res := cp.Kubectl(ctx, "", "apply", "-f", filepath.Join(seedDir(t), "namespaces.yaml"))
	require.NoError(t, res.Err, res.Stderr)
	res = cp.Kubectl(ctx, localSeed(t, repo.URL), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)

	res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "--for", "condition=Ready=True", "--timeout", "120s")
	require.NoError(t, res.Err, res.Stderr)

	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "fireworksapps.composition.krateo.io"}, crd))
	assert.Equal(t, []string{"v1-1-5", "hub"}, versionNames(crd))
	assert.Equal(t, apiextensionsv1.WebhookConverter, crd.Spec.Conversion.Strategy)
	assert.NotEmpty(t, crd.Spec.Conversion.Webhook.ClientConfig.CABundle)

	res = cp.Kubectl(ctx, "", "get", "compositiondefinitions", "-n", "fireworksapp-system", "-o", "wide", "--no-headers")
	require.NoError(t, res.Err, res.Stderr)
	cells := columns(res.Stdout)
	require.Len(t, cells, 7, res.Stdout)
	assert.Equal(t, []string{"fireworksapp-1-1-5", "True", "True"}, cells[:3])
	assert.Equal(t, []string{"composition.krateo.io/v1-1-5", "FireworksApp", repo.URL + "/fireworks-app-1.1.5.tgz"}, cells[4:])

	// Becoming Synced is an event; reconciling again without change is none.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "get", "events", "-n", "fireworksapp-system", "--field-selector", "involvedObject.name=fireworksapp-1-1-5", "-o", "jsonpath={.items[*].reason}")
		assert.NoError(c, res.Err, res.Stderr)
		assert.Equal(c, "ReconcileSuccess", res.Stdout)
	}, time.Minute, 200*time.Millisecond)

	// Its controller runs under the narrowest RBAC the chart needs.
	deployment := &appsv1.Deployment{}
	// In Compositor's namespace, which no tenant writes, named for the definition's.
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: controller.Name("fireworksapp-system", "fireworksapps", "v1-1-5")}, deployment))
	assert.Equal(t, []string{"controller", "--group", "composition.krateo.io", "--version", "v1-1-5", "--resource", "fireworksapps"}, deployment.Spec.Template.Spec.Containers[0].Args[:7])
	assert.Equal(t, rbac.ServiceAccountName("fireworksapp-system", "fireworksapps", "v1-1-5"), deployment.Spec.Template.Spec.ServiceAccountName)
	roles := &rbacv1.ClusterRoleList{}
	require.NoError(t, cp.Client.List(ctx, roles, client.MatchingLabels{"compositor.dev/version": "v1-1-5"}))
	require.NotEmpty(t, roles.Items)
	for _, role := range roles.Items {
		for _, rule := range role.Rules {
			assert.NotContains(t, rule.Verbs, "*", role.Name)
			assert.NotContains(t, rule.Resources, "*", role.Name)
			assert.NotContains(t, rule.APIGroups, "rbac.authorization.k8s.io", role.Name)
		}
	}

	// Resolved through the API server's discovery: exactly what the chart can create,
	// with the verbs Helm needs, and Helm's release Secrets.
	// The compositions themselves are read and written only where the role is bound.
	assert.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"composition.krateo.io"}, Resources: []string{"fireworksapps"}, Verbs: []string{"get", "list", "watch", "patch", "update"}},
		{APIGroups: []string{"composition.krateo.io"}, Resources: []string{"fireworksapps/status"}, Verbs: []string{"get", "patch", "update"}},
		{APIGroups: []string{"composition.krateo.io"}, Resources: []string{"fireworksapps/finalizers"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "services"}, Verbs: helmVerbs},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: helmVerbs},
		releaseSecrets,
		rbac.RevisionRule(),
	}, releaseRules(t, cp, "v1-1-5"))

	// The release role is bound where compositions of the version are, as they come
	// and go: well before the definition's next poll.
	t.Run("a namespace is bound with its first composition and unbound after its last", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "create", "namespace", "team-x")
		require.NoError(t, res.Err, res.Stderr)
		releaseBindings := func(c require.TestingT) []rbacv1.RoleBinding {
			list := &rbacv1.RoleBindingList{}
			require.NoError(c, cp.Client.List(ctx, list, client.InNamespace("team-x"), client.MatchingLabels{"compositor.dev/version": "v1-1-5"}))
			return list.Items
		}
		require.Empty(t, releaseBindings(t))

		composition := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: first, namespace: team-x}\nspec: {replicaCount: 2}\n"
		res = cp.Kubectl(ctx, composition, "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			bindings := releaseBindings(c)
			require.Len(c, bindings, 1)
			assert.Equal(c, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: bindings[0].RoleRef.Name}, bindings[0].RoleRef)
			assert.Equal(c, []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "compositor-system", Name: rbac.ServiceAccountName("fireworksapp-system", "fireworksapps", "v1-1-5")}}, bindings[0].Subjects)
		}, 30*time.Second, 100*time.Millisecond)

		res = cp.Kubectl(ctx, composition, "delete", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Empty(c, releaseBindings(c))
		}, 30*time.Second, 100*time.Millisecond)
	})

	t.Run("a new chart version replaces the old served version", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "patch", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "--type", "merge", "-p", `{"spec":{"chart":{"version":"1.1.6"}}}`)
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Name: "fireworksapps.composition.krateo.io"}, crd))
			// The version it left stays served, deprecated, for its clients.
			assert.Equal(c, []string{"v1-1-5", "v1-1-6", "hub"}, versionNames(crd))
			assert.Equal(c, []string{"v1-1-5"}, deprecatedVersions(crd))
			assert.Equal(c, []string{"hub"}, crd.Status.StoredVersions)
			err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: controller.Name("fireworksapp-system", "fireworksapps", "v1-1-5")}, &appsv1.Deployment{})
			assert.True(c, apierrors.IsNotFound(err), "the 1.1.5 controller is gone: %v", err)
			assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: controller.Name("fireworksapp-system", "fireworksapps", "v1-1-6")}, &appsv1.Deployment{}))
			old := &rbacv1.ClusterRoleList{}
			assert.NoError(c, cp.Client.List(ctx, old, client.MatchingLabels{"compositor.dev/version": "v1-1-5"}))
			assert.Empty(c, old.Items, "the 1.1.5 RBAC is gone")
		}, 2*time.Minute, 200*time.Millisecond)
	})

	t.Run("a paused definition is left alone", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "annotate", "--overwrite", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "krateo.io/paused=true")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "--for", "jsonpath={.status.conditions[?(@.type=='Synced')].reason}=Paused", "--timeout", "60s")
		require.NoError(t, res.Err, res.Stderr)

		res = cp.Kubectl(ctx, "", "patch", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "--type", "merge", "-p", `{"spec":{"chart":{"version":"2.0.0"}}}`)
		require.NoError(t, res.Err, res.Stderr)
		// Nothing to wait for can prove a non-event; the unpause below proves the
		// reconciler was running all along.
		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "fireworksapps.composition.krateo.io"}, crd))
		assert.Equal(t, []string{"v1-1-5", "v1-1-6", "hub"}, versionNames(crd))

		res = cp.Kubectl(ctx, "", "annotate", "--overwrite", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "krateo.io/paused=false")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Name: "fireworksapps.composition.krateo.io"}, crd))
			assert.Equal(c, []string{"v1-1-5", "v1-1-6", "v2-0-0", "hub"}, versionNames(crd))
			assert.Equal(c, []string{"v1-1-5", "v1-1-6"}, deprecatedVersions(crd))
		}, 2*time.Minute, 200*time.Millisecond)
		// 2.0.0 renders an Ingress when exposure is public: its role grants Ingresses.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []rbacv1.PolicyRule{
				{APIGroups: []string{"composition.krateo.io"}, Resources: []string{"fireworksapps"}, Verbs: []string{"get", "list", "watch", "patch", "update"}},
				{APIGroups: []string{"composition.krateo.io"}, Resources: []string{"fireworksapps/status"}, Verbs: []string{"get", "patch", "update"}},
				{APIGroups: []string{"composition.krateo.io"}, Resources: []string{"fireworksapps/finalizers"}, Verbs: []string{"update"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps", "services"}, Verbs: helmVerbs},
				{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: helmVerbs},
				{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: helmVerbs},
				releaseSecrets,
				rbac.RevisionRule(),
			}, releaseRules(c, cp, "v2-0-0"))
		}, time.Minute, 200*time.Millisecond)
	})

	t.Run("deleting the last definition removes everything it generated", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "delete", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			// The API server removes a deleted CRD once its objects are cleaned up.
			err := cp.Client.Get(ctx, client.ObjectKey{Name: "fireworksapps.composition.krateo.io"}, &apiextensionsv1.CustomResourceDefinition{})
			assert.True(c, apierrors.IsNotFound(err), "the CRD is gone: %v", err)
		}, time.Minute, 200*time.Millisecond)
		deployments := &appsv1.DeploymentList{}
		require.NoError(t, cp.Client.List(ctx, deployments, client.InNamespace("fireworksapp-system")))
		assert.Empty(t, deployments.Items)
		roles := &rbacv1.ClusterRoleList{}
		require.NoError(t, cp.Client.List(ctx, roles, client.MatchingLabels{"compositor.dev/resource": "fireworksapps"}))
		assert.Empty(t, roles.Items)
	})

	t.Run("unreachable charts report ChartFetchFailed", func(t *testing.T) {
		for _, name := range []string{"readme-fireworksapp.yaml", "readme-postgresql.yaml"} {
			data, err := os.ReadFile(filepath.Join(seedDir(t), name))
			require.NoError(t, err)
			manifest := string(data)
			if name == "readme-fireworksapp.yaml" {
				// It shares its name with the local seed applied above.
				manifest = strings.Replace(manifest, "name: fireworksapp-1-1-5", "name: fireworksapp-remote", 1)
			}
			res := cp.Kubectl(ctx, manifest, "apply", "-f", "-")
			require.NoError(t, res.Err, res.Stderr)
		}
		for _, key := range [][2]string{{"fireworksapp-system", "fireworksapp-remote"}, {"krateo-system", "postgresql"}} {
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				status, reason := condition(t, cp, key[0], key[1], "Ready")
				assert.Equal(c, "False", status)
				assert.Equal(c, "ChartFetchFailed", reason)
			}, 2*time.Minute, 200*time.Millisecond, "%s/%s", key[0], key[1])
		}
	})
}

// helmVerbs are the verbs Helm uses on what a chart creates.
var helmVerbs = []string{"create", "delete", "get", "list", "patch", "update", "watch"}

// releaseSecrets is the rule for Helm's release storage.
var releaseSecrets = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete", "get", "list", "patch", "update"}}

// releaseRules are the rules of the release role of fireworksapps version in the
// fireworksapp-system definition namespace.
func releaseRules(t require.TestingT, cp *controlplane.ControlPlane, version string) []rbacv1.PolicyRule {
	role := &rbacv1.ClusterRole{}
	require.NoError(t, cp.Client.Get(context.Background(), client.ObjectKey{Name: "compositor:fireworksapp-system:fireworksapps-" + version + ":release"}, role))
	return role.Rules
}

func versionNames(crd *apiextensionsv1.CustomResourceDefinition) []string {
	var names []string
	for _, v := range crd.Spec.Versions {
		names = append(names, v.Name)
	}
	return names
}

// A chart behind basic auth: the definition reads the password from a Secret of its
// namespace, and the version's controller may read that Secret and no other, for as
// long as the chart needs it.
func TestPrivateChartCredentials(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	ctx := context.Background()
	charts := applyPrivateDefinition(t, cp, "team-p")

	const roleName = "compositor:team-p:fireworksapps-v1-1-5:credentials"
	role := &rbacv1.Role{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-p", Name: roleName}, role))
	assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"repo-password"}}}, role.Rules)
	binding := &rbacv1.RoleBinding{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-p", Name: roleName}, binding))
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: rbac.ServiceAccountName("team-p", "fireworksapps", "v1-1-5"), Namespace: "compositor-system"}}, binding.Subjects,
		"the Role beside the Secret binds the identity in Compositor's namespace")

	// The same chart from a public repository needs no credentials: the Role goes. The
	// same archives: packaged again, an archive has other bytes (the time is in it),
	// which the definition refuses as changed content (ChartChanged) until accepted.
	public := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: charts})
	res := cp.Kubectl(ctx, "", "patch", "compositiondefinition", "fireworks", "-n", "team-p", "--type", "json", "-p",
		`[{"op":"remove","path":"/spec/chart/credentials"},{"op":"replace","path":"/spec/chart/url","value":"`+public.URL+`"}]`)
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-p", Name: roleName}, &rbacv1.Role{})
		assert.True(c, apierrors.IsNotFound(err), "the credentials Role is gone: %v", err)
		err = cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-p", Name: roleName}, &rbacv1.RoleBinding{})
		assert.True(c, apierrors.IsNotFound(err), "its RoleBinding is gone: %v", err)
	}, time.Minute, 200*time.Millisecond)
}

// applyPrivateDefinition serves the sample charts behind basic auth and applies, in a new
// namespace, the definition "fireworks" of 1.1.5 that reads the password from the Secret
// repo-password there, and waits until it is Ready. It returns the directory of the
// chart archives served.
func applyPrivateDefinition(t *testing.T, cp *controlplane.ControlPlane, namespace string) (charts string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	private := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir, Username: "platform", Password: "s3cret"})
	for _, step := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"create", "namespace", namespace}},
		{"", []string{"create", "secret", "generic", "repo-password", "-n", namespace, "--from-literal=password=s3cret"}},
		{definition(private.URL, namespace, "fireworks", "1.1.5") +
			"    credentials: {username: platform, passwordRef: {name: repo-password, namespace: " + namespace + ", key: password}}\n",
			[]string{"apply", "-f", "-"}},
		{"", []string{"wait", "compositiondefinition", "fireworks", "-n", namespace, "--for", "condition=Ready=True", "--timeout", "120s"}},
	} {
		res := cp.Kubectl(ctx, step.stdin, step.args...)
		require.NoError(t, res.Err, "kubectl %v: %s", step.args, res.Stderr)
	}
	return dir
}
