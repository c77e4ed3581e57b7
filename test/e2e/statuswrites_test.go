package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// statusTenantRole lets the tenant write the compositions of team-a, their status
// included, and the ConfigMaps and Secrets there; its binding names the tenant user and
// a ServiceAccount of team-a named like the generated controller of fireworksapps
// v1-1-5, which a tenant who may create ServiceAccounts could make.
const statusTenantRole = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tenant, namespace: team-a}
rules:
- apiGroups: [composition.krateo.io]
  resources: ["*", "*/status"]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [configmaps, secrets]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
- {kind: ServiceAccount, name: fireworksapps-v1-1-5-controller, namespace: team-a}
`

// Issue 25, item 4: the status of a composition is Compositor's alone. A tenant with
// update and patch on fireworksapps/status tries to write status.fingerprint (which
// the controller once trusted to skip an upgrade) and a Ready condition, by merge
// patch, JSON patch and update, as itself and as a ServiceAccount of its namespace
// named like the generated controller: each write is refused by the status webhook
// with a message naming the user, and the status stays the controller's. The
// controller, acting as the generated ServiceAccount, keeps writing the status: the
// composition becomes Ready, and Ready again for the next generation.
func TestOnlyCompositorWritesTheStatusOfCompositions(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	readyDefinition(t, cp)
	ctx := context.Background()

	admin := func(stdin string, args ...string) {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
	}
	admin("", "create", "namespace", "team-a")
	admin("", "create", "serviceaccount", "fireworksapps-v1-1-5-controller", "-n", "team-a")
	admin(statusTenantRole, "apply", "-f", "-")

	const (
		tenant    = "alice"
		lookalike = "system:serviceaccount:team-a:fireworksapps-v1-1-5-controller"
		resource  = "fireworksapps.v1-1-5.composition.krateo.io"
	)
	as := func(user, stdin string, args ...string) controlplane.Result {
		args = append(args, "--as", user)
		if strings.HasPrefix(user, "system:serviceaccount:") {
			args = append(args, "--as-group", "system:serviceaccounts", "--as-group", "system:serviceaccounts:team-a")
		}
		return cp.Kubectl(ctx, stdin, args...)
	}
	get := func(c require.TestingT) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion("composition.krateo.io/v1-1-5")
		obj.SetKind("FireworksApp")
		require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "web"}, obj))
		return obj
	}
	apply := func(replicas string) {
		t.Helper()
		manifest := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: web, namespace: team-a}\nspec: {replicaCount: " + replicas + "}\n"
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			res := as(tenant, manifest, "apply", "-f", "-")
			assert.NoError(c, res.Err, res.Stderr)
		}, time.Minute, 250*time.Millisecond)
	}
	// readyWith waits until the controller reports the composition Ready for its
	// generation and its Deployment has replicas.
	readyWith := func(replicas int32) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			obj := get(c)
			require.True(c, isReady(*obj), "Ready: %v", obj.Object["status"])
			d := &appsv1.Deployment{}
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "web-fireworks-app"}, d))
			assert.Equal(c, replicas, *d.Spec.Replicas)
		}, 2*time.Minute, 250*time.Millisecond)
	}

	apply("1")
	readyWith(1)

	forgedReady := `{"type":"Ready","status":"True","reason":"Available","message":"forged","lastTransitionTime":"2020-01-01T00:00:00Z","observedGeneration":2}`
	replaced := get(t)
	replaced.Object["status"] = map[string]any{"fingerprint": "forged"}
	update, err := json.Marshal(replaced.Object)
	require.NoError(t, err)
	for _, attempt := range []struct {
		name, stdin string
		args        []string
	}{
		{"merge patch of status.fingerprint", "", []string{"patch", resource, "web", "-n", "team-a", "--subresource", "status", "--type", "merge",
			"-p", `{"status":{"fingerprint":"forged"}}`}},
		{"merge patch of a Ready condition", "", []string{"patch", resource, "web", "-n", "team-a", "--subresource", "status", "--type", "merge",
			"-p", `{"status":{"observedGeneration":2,"conditions":[` + forgedReady + `]}}`}},
		{"JSON patch of a condition", "", []string{"patch", resource, "web", "-n", "team-a", "--subresource", "status", "--type", "json",
			"-p", `[{"op":"replace","path":"/status/conditions/0/status","value":"False"},{"op":"replace","path":"/status/conditions/0/message","value":"forged"}]`}},
		{"update of the whole status", string(update), []string{"replace", "--subresource", "status", "-f", "-"}},
	} {
		for _, user := range []string{tenant, lookalike} {
			t.Run(attempt.name+" as "+user, func(t *testing.T) {
				res := as(user, attempt.stdin, attempt.args...)
				require.Error(t, res.Err, "admitted: %s", res.Stdout)
				assert.Contains(t, res.Stderr, `admission webhook "status.compositor.dev" denied the request: user "`+user+
					`" may not write the status of FireworksApp team-a/web: only Compositor writes the status of compositions`)
			})
		}
	}
	// The tenant's rights were real: without the webhook the API server would have
	// taken these writes.
	res := as(tenant, "", "auth", "can-i", "patch", "fireworksapps/status", "-n", "team-a")
	assert.Equal(t, "yes", strings.TrimSpace(res.Stdout), res.Stderr)

	status, err := json.Marshal(get(t).Object["status"])
	require.NoError(t, err)
	assert.NotContains(t, string(status), "forged", "the status is the controller's")
	assert.NotContains(t, string(status), "2020-01-01")
	assert.True(t, isReady(*get(t)))

	// The controller keeps writing the status: the next generation becomes Ready, with
	// the new values installed.
	apply("2")
	readyWith(2)
}
