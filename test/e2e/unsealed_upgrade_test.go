package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// The upgrade in place from the last Compositor before release records were sealed
// (issue #46, commit ffea0ea). That Compositor is built from git history by `make
// compositor-unsealed` (bin/unsealed/compositor; `make test` builds it).
//
// Environment:
//   - COMPOSITOR_UNSEALED_BINARY: the old binary (default: bin/unsealed/compositor).
//     Missing, the test is skipped, or fails under CI=true.
//   - COMPOSITOR_BINARY: the new binary (default: this checkout, built).

// unsealedCompositorBinary is the last Compositor before sealed records.
func unsealedCompositorBinary(t *testing.T) string {
	t.Helper()
	return olderCompositorBinary(t, "the unsealed Compositor", "COMPOSITOR_UNSEALED_BINARY", "unsealed", "compositor-unsealed")
}

// The Compositor of ffea0ea installs compositions and writes unsealed records; the new
// Compositor takes over the same cluster state, its seal migration seals those records
// under their definition's key, once and recorded, and an update of each composition
// installs with no ReleaseTampered. A record forged after the migration is still
// refused.
func TestUpgradeFromUnsealedCompositor(t *testing.T) {
	oldBinary := unsealedCompositorBinary(t)
	newBinary := currentCompositorBinary(t)
	cp := controlplane.Start(t)
	ctx := context.Background()
	serve := newServedCompositor(t, cp)
	const defNamespace, teamNamespace = "fireworksapp-system", "team-unsealed"
	type composition struct{ namespace, name, install, change string }
	compositions := []composition{
		{defNamespace, "alpha", `{replicaCount: 2}`, `{replicaCount: 3}`},
		{teamNamespace, "beta", `{replicaCount: 1}`, `{replicaCount: 2}`},
	}
	ready := func(c composition, revision string) {
		t.Helper()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.Equal(ct, "True Available release "+c.name+" is installed", readyCondition(ct, cp, upgradeResource, c.namespace, c.name))
			var versions []string
			for _, s := range helmReleaseSecrets(ct, cp, c.namespace, c.name) {
				versions = append(versions, s.Labels["version"])
			}
			assert.Contains(ct, versions, revision)
		}, 3*time.Minute, 250*time.Millisecond, "%s/%s is installed at revision %s", c.namespace, c.name, revision)
	}

	serve.start(oldBinary, "unsealed")
	applyDefinition(t, cp, sampleRepository(t).URL, defNamespace, "fireworks-app", "1.1.5")
	res := cp.Kubectl(ctx, "", "create", "namespace", teamNamespace)
	require.NoError(t, res.Err, res.Stderr)
	for _, c := range compositions {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			res := cp.Kubectl(ctx, upgradeApp(c.namespace, c.name, c.install), "apply", "-f", "-")
			assert.NoError(ct, res.Err, res.Stderr)
		}, time.Minute, 250*time.Millisecond, "the API %s is served", upgradeResource)
	}
	for _, c := range compositions {
		ready(c, "1")
		for _, s := range helmReleaseSecrets(t, cp, c.namespace, c.name) {
			assert.Empty(t, s.Annotations["compositor.dev/release-seal"], "ffea0ea writes %s unsealed", s.Name)
		}
	}
	err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: "compositor-release-seal"}, &corev1.Secret{})
	require.Error(t, err, "ffea0ea keeps no release seal")

	// The new Compositor takes over the same state, as a new pod would.
	require.True(t, serve.stop(), "the old Compositor ends on SIGTERM within 30 s")
	serve.start(newBinary, "current")
	record := &corev1.ConfigMap{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: "compositor-seal-migration"}, record))
		assert.NotEmpty(ct, record.Data["done"], "the seal migration is recorded done")
	}, 3*time.Minute, 250*time.Millisecond)
	assert.Equal(t, "true", record.Data["adoptUnsealed"], "no seal existed: the records of a build before seals are adopted")
	assert.Equal(t, "2", record.Data["adopted"], "one record per composition")
	for _, c := range compositions {
		for _, s := range helmReleaseSecrets(t, cp, c.namespace, c.name) {
			assert.Regexp(t, `^v1:[0-9a-f]{64}$`, s.Annotations["compositor.dev/release-seal"], "%s is sealed now", s.Name)
		}
	}

	// An update of each installs, with no ReleaseTampered.
	for _, c := range compositions {
		res := cp.Kubectl(ctx, upgradeApp(c.namespace, c.name, c.change), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
	}
	for _, c := range compositions {
		ready(c, "2")
		assert.NotContains(t, readyCondition(t, cp, upgradeResource, c.namespace, c.name), "ReleaseTampered")
	}

	// A record forged after the migration, unsealed and claiming alpha's next
	// revision, is refused: nothing is installed over it.
	alpha := compositions[0]
	var last corev1.Secret
	for _, s := range helmReleaseSecrets(t, cp, alpha.namespace, alpha.name) {
		if s.Labels["version"] == "2" {
			last = s
		}
	}
	require.NotEmpty(t, last.Name)
	forged := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: alpha.namespace, Name: strings.TrimSuffix(last.Name, ".v2") + ".v3", Labels: last.Labels},
		Type:       last.Type, Data: last.Data,
	}
	forged.Labels["version"] = "3"
	require.NoError(t, cp.Client.Create(ctx, forged))
	res = cp.Kubectl(ctx, upgradeApp(alpha.namespace, alpha.name, `{replicaCount: 4}`), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Contains(ct, readyCondition(ct, cp, upgradeResource, alpha.namespace, alpha.name), "False ReleaseTampered")
	}, 3*time.Minute, 250*time.Millisecond, "the forged record is refused")
}
