package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// identityTenantRole is what a team's tenant holds in its namespace, team-a, where its
// team's CompositionDefinition lives too: compositions, ConfigMaps, Secrets, Events.
const identityTenantRole = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tenant, namespace: team-a}
rules:
- apiGroups: [composition.krateo.io]
  resources: ["*", "*/status"]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [configmaps, secrets, events]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
`

// Issue 46: in the team-namespace layout (a definition in each team's namespace), a
// tenant of team-a tries to become one of Compositor's identities: a token Secret for
// each managed account, a composition whose Pod, Deployment, StatefulSet, Job and
// CronJob run as one, a composition in Compositor's namespace, a RoleBinding, a
// TokenRequest. Each is refused or useless, because the identities live in
// Compositor's namespace, where nothing of a tenant's runs; and the controller of
// team-a's definition may neither read nor write team-b's compositions or status.
func TestTenantsCannotBecomeCompositor(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	ctx := context.Background()

	probe, err := loader.Load(filepath.Join(controlplane.RepoRoot(), "test", "testdata", "charts", "identity-probe"))
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = chartutil.Save(probe, dir)
	require.NoError(t, err)
	repo := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})

	admin := func(stdin string, args ...string) {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
	}
	alice := func(stdin string, args ...string) controlplane.Result {
		return cp.Kubectl(ctx, stdin, append(args, "--as", "alice")...)
	}
	const resource = "identityprobes.v0-1-0.composition.krateo.io"
	for _, team := range []string{"team-a", "team-b"} {
		admin("", "create", "namespace", team)
		admin("apiVersion: core.krateo.io/v1alpha1\nkind: CompositionDefinition\nmetadata: {name: identity-probe, namespace: "+team+
			"}\nspec: {chart: {repo: identity-probe, url: "+repo.URL+", version: 0.1.0}}\n", "apply", "-f", "-")
		admin("", "wait", "compositiondefinition", "identity-probe", "-n", team, "--for", "condition=Ready=True", "--timeout", "120s")
	}
	admin(identityTenantRole, "apply", "-f", "-")

	// The identities Compositor manages for the two definitions, and the names they
	// had before they moved to Compositor's namespace.
	managed := []string{
		rbac.ServiceAccountName("team-a", "identityprobes", "v0-1-0"),
		rbac.ServiceAccountName("team-b", "identityprobes", "v0-1-0"),
		rbac.LegacyServiceAccountName("identityprobes", "v0-1-0"),
		"compositor",
	}
	for _, name := range managed[:2] {
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: name}, &corev1.ServiceAccount{}),
			"the generated identity %s lives in Compositor's namespace", name)
	}
	for _, name := range managed {
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: name}, &corev1.ServiceAccount{})
		assert.True(t, apierrors.IsNotFound(err), "no managed identity %s in the tenant's namespace: %v", name, err)
	}

	t.Run("an installation of this build records that nothing moves", func(t *testing.T) {
		// Written before any definition served, with no key: no Deployment a tenant makes
		// in its namespace under the name a controller had before identities moved (a
		// Helm hook, say) ever starts a move, which would bind that account.
		moves := &corev1.ConfigMap{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: rbac.IdentityMovesConfigMap}, moves))
		assert.Empty(t, moves.Data)
	})

	t.Run("a token Secret for every managed account is useless", func(t *testing.T) {
		for _, name := range managed {
			secret := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: steal-" + name + "\n  namespace: team-a\n" +
				"  annotations: {kubernetes.io/service-account.name: " + name + "}\ntype: kubernetes.io/service-account-token\n"
			res := alice(secret, "create", "-f", "-")
			if res.Err != nil {
				continue // refused outright
			}
			// The token controller fills such a Secret only for a ServiceAccount of the
			// Secret's own namespace, and deletes it otherwise. There is none of that
			// name in team-a (above), so no token is ever minted into it.
			got := &corev1.Secret{}
			require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "steal-" + name}, got))
			assert.Empty(t, got.Data["token"], name)
		}
	})

	t.Run("a TokenRequest for a managed account", func(t *testing.T) {
		for _, name := range managed {
			for _, ns := range []string{"team-a", "compositor-system"} {
				res := alice("", "create", "token", name, "-n", ns)
				require.Error(t, res.Err, "alice minted a token of %s/%s", ns, name)
				assert.Contains(t, res.Stderr, "forbidden")
			}
			// Even one who may request tokens in team-a finds no such account there.
			res := cp.Kubectl(ctx, "", "create", "token", name, "-n", "team-a")
			require.Error(t, res.Err)
			assert.Contains(t, res.Stderr, "not found")
		}
	})

	t.Run("a RoleBinding to a managed account", func(t *testing.T) {
		res := alice(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: mine, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{kind: ServiceAccount, name: `+managed[0]+`, namespace: compositor-system}]
`, "create", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, "forbidden")
	})

	t.Run("workloads that run as a managed account", func(t *testing.T) {
		for i, name := range managed {
			composition := "apiVersion: composition.krateo.io/v0-1-0\nkind: IdentityProbe\nmetadata: {name: run-" + string(rune('a'+i)) +
				", namespace: team-a}\nspec: {serviceAccountName: " + name + "}\n"
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				res := alice(composition, "apply", "-f", "-")
				assert.NoError(c, res.Err, res.Stderr)
			}, time.Minute, 250*time.Millisecond)
		}
		for i, name := range managed {
			release := "run-" + string(rune('a'+i))
			// Whether the release installs depends on the API server: with its
			// ServiceAccount admission plugin (on by default, off in this test control
			// plane) it refuses a Pod whose ServiceAccount is not in the Pod's namespace.
			// Either way, what runs in team-a cannot be the managed account: there is
			// none of that name there, so no token of it is mounted (the kubelet
			// requests one for the Pod's namespace, and there is none to give).
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				obj := &unstructured.Unstructured{}
				obj.SetAPIVersion("composition.krateo.io/v0-1-0")
				obj.SetKind("IdentityProbe")
				require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: release}, obj))
				require.NotNil(c, statusCondition(obj, "Ready"), "no Ready condition yet")
			}, 2*time.Minute, 250*time.Millisecond)
			pod := &corev1.Pod{}
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: release + "-pod"}, pod); err == nil {
				assert.Equal(t, name, pod.Spec.ServiceAccountName)
				assert.Equal(t, "team-a", pod.Namespace, "the Pod stays in the composition's namespace")
			}
			err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: name}, &corev1.ServiceAccount{})
			assert.True(t, apierrors.IsNotFound(err), "%s in team-a: %v", name, err)
			res := cp.Kubectl(ctx, "", "create", "token", name, "-n", "team-a")
			require.Error(t, res.Err, "a token of %s in team-a", name)
			assert.Contains(t, res.Stderr, "not found")
		}
	})

	t.Run("a composition in Compositor's namespace", func(t *testing.T) {
		// As the cluster's administrator even: one rule over the namespace, whatever
		// the composition would render.
		res := cp.Kubectl(ctx, "apiVersion: composition.krateo.io/v0-1-0\nkind: IdentityProbe\nmetadata: {name: inside, namespace: compositor-system}\n"+
			"spec: {serviceAccountName: "+managed[0]+"}\n", "apply", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, "namespace compositor-system is Compositor's own")
	})

	t.Run("team-a's controller reaches only team-a's compositions", func(t *testing.T) {
		admin("apiVersion: composition.krateo.io/v0-1-0\nkind: IdentityProbe\nmetadata: {name: victim, namespace: team-b}\nspec: {serviceAccountName: default}\n", "apply", "-f", "-")
		user := "system:serviceaccount:compositor-system:" + managed[0]
		groups := []string{"system:serviceaccounts", "system:serviceaccounts:compositor-system", "system:authenticated"}
		for _, tc := range []struct {
			namespace, verb, subresource string
			allowed                      bool
		}{
			{"team-a", "update", "status", true},
			{"team-a", "patch", "", true},
			{"team-b", "get", "", false},
			{"team-b", "update", "", false},
			{"team-b", "patch", "status", false},
			{"team-b", "update", "status", false},
			{"", "list", "", false}, // in process, Compositor's informers read for it
		} {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: groups, ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: tc.namespace, Verb: tc.verb, Group: "composition.krateo.io", Resource: "identityprobes", Subresource: tc.subresource,
				},
			}}
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				got := review.DeepCopy()
				require.NoError(c, cp.Client.Create(ctx, got))
				assert.Equal(c, tc.allowed, got.Status.Allowed, "%+v: %s", tc, got.Status.Reason)
			}, time.Minute, 250*time.Millisecond)
		}
		// And what the tenant itself may do there: nothing.
		for _, args := range [][]string{
			{"get", resource, "victim", "-n", "team-b"},
			{"patch", resource, "victim", "-n", "team-b", "--subresource", "status", "--type", "merge", "-p", `{"status":{"conditions":[]}}`},
		} {
			res := alice("", args...)
			require.Error(t, res.Err, "%v", args)
			assert.Contains(t, res.Stderr, "forbidden")
		}
	})
}

// statusCondition is the condition of type typ in obj's status, or nil.
func statusCondition(obj *unstructured.Unstructured, typ string) map[string]any {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}
