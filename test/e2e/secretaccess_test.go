package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// secretAccessRBAC lets alice, bob and the group chart-readers write definitions in
// team-s; bob and chart-readers may also get the Secret repo-password, alice may not.
const secretAccessRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: definition-writer, namespace: team-s}
rules:
- apiGroups: [core.krateo.io]
  resources: [compositiondefinitions]
  verbs: [get, list, create, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: definition-writers, namespace: team-s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: definition-writer}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: chart-readers}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: repo-password-reader, namespace: team-s}
rules:
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [repo-password]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: repo-password-readers, namespace: team-s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: repo-password-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: chart-readers}
`

// A definition names a Secret that Compositor reads with its own rights and sends as
// Basic auth: its author must be allowed to get that Secret. The webhook asks the API
// server with the author's identity (user and groups, here through kubectl --as).
func TestDefinitionAuthorMustBeAbleToReadTheSecret(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	private := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir, Username: "platform", Password: "s3cret"})
	for _, step := range [][]string{
		{"create", "namespace", "team-s"},
		{"create", "secret", "generic", "repo-password", "-n", "team-s", "--from-literal=password=s3cret"},
		{"create", "secret", "generic", "other-password", "-n", "team-s", "--from-literal=password=other"},
	} {
		res := cp.Kubectl(ctx, "", step...)
		require.NoError(t, res.Err, res.Stderr)
	}
	res := cp.Kubectl(ctx, secretAccessRBAC, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	withSecret := func(name, secret string) string {
		return definition(private.URL, "team-s", name, "1.1.5") +
			"    credentials: {username: platform, passwordRef: {name: " + secret + ", namespace: team-s, key: password}}\n"
	}

	t.Run("an author who may not get the Secret is refused", func(t *testing.T) {
		res := cp.Kubectl(ctx, withSecret("by-alice", "repo-password"), "apply", "--as=alice", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, `spec.chart.credentials.passwordRef: Forbidden: user "alice" may not get Secret team-s/repo-password (`)
		assert.Contains(t, res.Stderr, "a definition may only name credentials its author can read")
		res = cp.Kubectl(ctx, "", "get", "compositiondefinition", "by-alice", "-n", "team-s")
		assert.Error(t, res.Err, "nothing was created")
	})
	t.Run("an author who may get it is admitted", func(t *testing.T) {
		res := cp.Kubectl(ctx, withSecret("by-bob", "repo-password"), "apply", "--as=bob", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "by-bob", "-n", "team-s", "--for", "condition=Ready=True", "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
	})
	t.Run("through a group", func(t *testing.T) {
		res := cp.Kubectl(ctx, withSecret("by-carol", "repo-password"), "apply", "--as=carol", "--as-group=chart-readers", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
	})
	t.Run("an update that keeps the reference is not asked about", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "annotate", "compositiondefinition", "by-bob", "-n", "team-s", "--as=alice", "example.com/touched=yes")
		require.NoError(t, res.Err, res.Stderr)
	})
	t.Run("an update that changes the reference is", func(t *testing.T) {
		for _, user := range []string{"alice", "bob"} {
			res := cp.Kubectl(ctx, "", "patch", "compositiondefinition", "by-bob", "-n", "team-s", "--as="+user, "--type", "merge",
				"-p", `{"spec":{"chart":{"credentials":{"passwordRef":{"name":"other-password"}}}}}`)
			require.Error(t, res.Err, user)
			assert.Contains(t, res.Stderr, `spec.chart.credentials.passwordRef: Forbidden: user "`+user+`" may not get Secret team-s/other-password (`)
		}
	})
}
