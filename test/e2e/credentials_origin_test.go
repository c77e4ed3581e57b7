package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// Credentials stay with the source they were approved for (issue 25, item 5): alice,
// who may write definitions in team-s but not get the Secret repo-password, cannot move
// bob's definition, which sends that Secret as Basic auth, to a logging server by
// patching only its URL, its repository or its username. Each patch is refused, saying
// which field changed, which Secret and why; the definition keeps its source; the
// logging server receives nothing. bob, who may get the Secret, may move it to a mirror,
// which then gets the credentials.
func TestCredentialsStayWithTheSourceTheyWereApprovedFor(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	private := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir, Username: "platform", Password: "s3cret"})
	mirror := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir, Username: "platform", Password: "s3cret"})
	logger := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: t.TempDir()}) // anything it is sent, it logs
	for _, step := range [][]string{
		{"create", "namespace", "team-s"},
		{"create", "secret", "generic", "repo-password", "-n", "team-s", "--from-literal=password=s3cret"},
	} {
		res := cp.Kubectl(ctx, "", step...)
		require.NoError(t, res.Err, res.Stderr)
	}
	res := cp.Kubectl(ctx, secretAccessRBAC, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	res = cp.Kubectl(ctx, definition(private.URL, "team-s", "private", "1.1.5")+
		"    credentials: {username: platform, passwordRef: {name: repo-password, namespace: team-s, key: password}}\n",
		"apply", "--as=bob", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "private", "-n", "team-s", "--for", "condition=Ready=True", "--timeout", "120s")
	require.NoError(t, res.Err, res.Stderr)
	packageURL := func() string {
		res := cp.Kubectl(ctx, "", "get", "compositiondefinition", "private", "-n", "team-s", "-o", "jsonpath={.spec.chart.url} {.status.packageUrl}")
		require.NoError(t, res.Err, res.Stderr)
		return res.Stdout
	}
	require.True(t, strings.HasPrefix(packageURL(), private.URL+" "+private.URL+"/"), packageURL())

	for _, patch := range []struct{ name, patch, field string }{
		{"only the url", `{"spec":{"chart":{"url":"` + logger.URL + `"}}}`, "spec.chart.url"},
		{"only the repository", `{"spec":{"chart":{"repo":"other-chart"}}}`, "spec.chart.repo"},
		{"only the username", `{"spec":{"chart":{"credentials":{"username":"someone"}}}}`, "spec.chart.credentials.username"},
		{"the url and the version", `{"spec":{"chart":{"url":"` + logger.URL + `","version":"1.1.6"}}}`, "spec.chart.url"},
	} {
		t.Run("alice patches "+patch.name, func(t *testing.T) {
			res := cp.Kubectl(ctx, "", "patch", "compositiondefinition", "private", "-n", "team-s", "--as=alice", "--type", "merge", "-p", patch.patch)
			require.Error(t, res.Err, "admitted: %s", res.Stdout)
			assert.Contains(t, res.Stderr, patch.field+`: Forbidden: user "alice" may not get Secret team-s/repo-password (`)
			assert.Contains(t, res.Stderr, "changing "+patch.field)
			assert.Contains(t, res.Stderr, "changes where Compositor sends that Secret")
		})
	}
	t.Run("the definition keeps its source, and the logging server heard nothing", func(t *testing.T) {
		// An update alice may make (it moves nothing) has the definition reconciled
		// again: still from the private repository.
		res := cp.Kubectl(ctx, "", "annotate", "compositiondefinition", "private", "-n", "team-s", "--as=alice", "example.com/touched=yes")
		require.NoError(t, res.Err, res.Stderr)
		assert.True(t, strings.HasPrefix(packageURL(), private.URL+" "+private.URL+"/"), packageURL())
		assert.Never(t, func() bool { return len(logger.Requests()) > 0 }, 5*time.Second, 200*time.Millisecond,
			"the logging server was sent a request")
	})
	t.Run("bob, who may get the Secret, moves it to a mirror", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "patch", "compositiondefinition", "private", "-n", "team-s", "--as=bob", "--type", "merge",
			"-p", `{"spec":{"chart":{"url":"`+mirror.URL+`"}}}`)
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.True(c, strings.HasPrefix(packageURL(), mirror.URL+" "+mirror.URL+"/"), packageURL())
		}, 2*time.Minute, 500*time.Millisecond)
		assert.Positive(t, mirror.CountFunc(func(r chartserver.Request) bool { return r.Authorization }), "the mirror got the credentials")
		assert.Empty(t, logger.Requests(), "the logging server never did")
	})
}
