package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// seedDir is the folder of the Krateo README's manifests, test/testdata/seed-manifests.
func seedDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(controlplane.RepoRoot(), "test", "testdata", "seed-manifests")
	if _, err := os.Stat(filepath.Join(dir, "namespaces.yaml")); err != nil {
		t.Fatalf("seed manifests not found: %v", err)
	}
	return dir
}

// columns splits a line of kubectl's table output into its cells.
func columns(line string) []string {
	return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
}

func TestSeedManifestsApplyUnchanged(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	dir := seedDir(t)

	res := cp.Kubectl(ctx, "", "apply", "-f", filepath.Join(dir, "namespaces.yaml"))
	require.NoError(t, res.Err, res.Stderr)

	manifests, err := filepath.Glob(filepath.Join(dir, "readme-*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, manifests)

	var names []string
	for _, path := range manifests {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		want := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal(data, &want.Object), path)
		names = append(names, want.GetName())

		res := cp.Kubectl(ctx, "", "apply", "-f", path)
		require.NoError(t, res.Err, "%s: %s", path, res.Stderr)
		assert.Equal(t, "compositiondefinition.core.krateo.io/"+want.GetName()+" created\n", res.Stdout)

		// Nothing the README wrote was pruned or changed on the way in.
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(want.GroupVersionKind())
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(want), got))
		assert.Equal(t, want.Object["spec"], got.Object["spec"], path)
		for key, value := range want.GetAnnotations() {
			assert.Equal(t, value, got.GetAnnotations()[key], "%s: annotation %s", path, key)
		}
	}

	res = cp.Kubectl(ctx, "", "get", "compositiondefinitions", "-A")
	require.NoError(t, res.Err, res.Stderr)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	assert.Equal(t, []string{"NAMESPACE", "NAME", "READY", "SYNCED", "AGE"}, columns(lines[0]))
	assert.Len(t, lines, 1+len(names))
	for _, name := range names {
		assert.Contains(t, res.Stdout, name)
	}

	res = cp.Kubectl(ctx, "", "get", "compositiondefinitions", "-A", "-o", "wide")
	require.NoError(t, res.Err, res.Stderr)
	header := columns(strings.SplitN(res.Stdout, "\n", 2)[0])
	// Krateo's wide columns, then the rollout's (docs/upgrades.md).
	assert.Equal(t, []string{"NAMESPACE", "NAME", "READY", "SYNCED", "AGE", "API VERSION", "KIND", "PACKAGE URL",
		"ROLLOUT", "TO MOVE", "REFUSED", "DELETIONS", "MOVED READY"}, header)
}
