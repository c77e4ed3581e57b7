package composition

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	releasecommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// isTampered reports whether err says a release record failed its seal.
func isTampered(err error) bool {
	var t *TamperedError
	return errors.As(err, &t)
}

// testSeal is a release seal with a fresh key.
func testSeal(t testing.TB) *ReleaseSeal {
	t.Helper()
	seal, err := NewReleaseSeal(NewSealKey())
	require.NoError(t, err)
	return seal
}

func TestReleaseSealRefusesShortKeys(t *testing.T) {
	_, err := NewReleaseSeal(make([]byte, 16))
	assert.ErrorContains(t, err, "16 bytes")
}

// sealedRecord is a sealed Secret as the driver writes it, for a release with a hook.
func sealedRecord(t *testing.T, d *sealedSecrets) *corev1.Secret {
	t.Helper()
	rel := &release.Release{
		Name: "demo", Namespace: "team", Version: 2,
		Info:     &release.Info{Status: releasecommon.StatusDeployed},
		Chart:    &chart.Chart{Metadata: &chart.Metadata{Name: "app", Version: "1.0.0"}},
		Config:   map[string]any{"replicas": float64(1)},
		Manifest: "---\n# Source: app/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo}\n",
		Hooks:    []*release.Hook{{Name: "pre", Kind: "ConfigMap", Events: []release.HookEvent{release.HookPreDelete}, Manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pre}\n"}},
		Labels:   map[string]string{vocab.LabelCompositionUID: "uid-1", vocab.LabelFingerprint: "abc"},
	}
	secret, err := d.record("sh.helm.release.v1.demo.v2", rel, "createdAt")
	require.NoError(t, err)
	return secret
}

// Issue 25: a record Compositor wrote opens; any change to anything Helm reads from it
// — the release's JSON (manifest, hooks, status, config), its labels (Helm's, and
// Compositor's marks of owner and fingerprint), its type, its name — or a record
// without a seal is refused as tampered, and never decoded.
func TestSealedRecordsRefuseEveryChange(t *testing.T) {
	d := &sealedSecrets{namespace: "team", seal: testSeal(t)}
	rel, err := d.open(sealedRecord(t, d))
	require.NoError(t, err)
	assert.Equal(t, "uid-1", rel.Labels[vocab.LabelCompositionUID])
	assert.Len(t, rel.Hooks, 1)
	assert.NotContains(t, rel.Labels, "owner", "Helm's own labels are not the release's")

	reencode := func(mutate func(*release.Release)) func(*corev1.Secret) {
		return func(s *corev1.Secret) {
			r, err := decodeRelease(s.Data["release"])
			require.NoError(t, err)
			mutate(r)
			data, err := encodeRelease(r)
			require.NoError(t, err)
			s.Data["release"] = []byte(data)
		}
	}
	cases := map[string]func(*corev1.Secret){
		"manifest": reencode(func(r *release.Release) {
			r.Manifest += "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: platform}\n"
		}),
		"hooks": reencode(func(r *release.Release) {
			r.Hooks = append(r.Hooks, &release.Hook{Name: "evil", Events: []release.HookEvent{release.HookPreDelete}, Manifest: "kind: Service"})
		}),
		"info.status":         reencode(func(r *release.Release) { r.Info.Status = releasecommon.StatusFailed }),
		"config":              reencode(func(r *release.Release) { r.Config["replicas"] = float64(9) }),
		"version":             reencode(func(r *release.Release) { r.Version = 1 }),
		"label uid":           func(s *corev1.Secret) { s.Labels[vocab.LabelCompositionUID] = "uid-2" },
		"label fingerprint":   func(s *corev1.Secret) { s.Labels[vocab.LabelFingerprint] = "def" },
		"label status":        func(s *corev1.Secret) { s.Labels["status"] = "failed" },
		"label added":         func(s *corev1.Secret) { s.Labels["extra"] = "x" },
		"label removed":       func(s *corev1.Secret) { delete(s.Labels, vocab.LabelFingerprint) },
		"type":                func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque },
		"name":                func(s *corev1.Secret) { s.Name = "sh.helm.release.v1.demo.v3" },
		"data key added":      func(s *corev1.Secret) { s.Data["more"] = []byte("x") },
		"seal removed":        func(s *corev1.Secret) { delete(s.Annotations, vocab.AnnotationReleaseSeal) },
		"seal of another key": func(s *corev1.Secret) { s.Annotations[vocab.AnnotationReleaseSeal] = testSeal(t).sum("team", s) },
		"seal garbled":        func(s *corev1.Secret) { s.Annotations[vocab.AnnotationReleaseSeal] = "v1:00" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			secret := sealedRecord(t, d)
			mutate(secret)
			_, err := d.open(secret)
			require.Error(t, err)
			assert.True(t, isTampered(err), "%v", err)
			assert.Contains(t, err.Error(), "nothing was installed or deleted")
		})
	}
	t.Run("another namespace", func(t *testing.T) {
		other := &sealedSecrets{namespace: "team-b", seal: d.seal}
		_, err := other.open(sealedRecord(t, d))
		assert.True(t, isTampered(err), "a record copied into another namespace does not open there: %v", err)
	})
}

// gzipBomb is base64 of a gzip stream inflating to n zero bytes.
func gzipBomb(t testing.TB, n int) []byte {
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	require.NoError(t, err)
	zeros := make([]byte, 1<<20)
	for written := 0; written < n; written += len(zeros) {
		_, err := w.Write(zeros)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	return []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
}

// Issue 25, item 3: a record is inflated only once its seal holds, and even then no
// further than maxReleaseJSON.
func TestRecordsInflateBoundedAndOnlyWhenSealed(t *testing.T) {
	d := &sealedSecrets{namespace: "team", seal: testSeal(t)}
	bomb := sealedRecord(t, d)
	bomb.Data["release"] = gzipBomb(t, 200<<20)
	allocs := testing.AllocsPerRun(1, func() {
		_, err := d.open(bomb)
		require.True(t, isTampered(err))
	})
	assert.Less(t, allocs, 1000.0, "an unsealed bomb is not inflated")

	_, err := decodeRelease(gzipBomb(t, maxReleaseJSON+(1<<20)))
	assert.ErrorContains(t, err, "inflates past 32 MiB")
}

// Issue 25, item 2, against a real API server: Helm's actions through the sealed
// driver install and read back their records, and refuse to act — no upgrade, no
// uninstall, nothing deleted — once a tenant edits one.
func TestHelmActsOnlyOnSealedRecords(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sealed"}}))
	ch := &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "sealed", Version: "0.1.0"},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-cm'}\ndata: {a: '{{ .Values.a }}'}\n")}},
	}
	helm, err := NewHelm(cp.Config, testSeal(t), logr.Discard())
	require.NoError(t, err)
	_, rel, err := helm.UpgradeInstall(ctx, "sealed", "r", ch, map[string]any{"a": "one"}, InstallOptions{})
	require.NoError(t, err)
	last, err := helm.lastRelease("sealed", "r")
	require.NoError(t, err)
	assert.Equal(t, rel.Version, last.Version)

	// The record keeps Helm's layout: helm list finds it by Helm's labels.
	record := &corev1.Secret{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "sealed", Name: "sh.helm.release.v1.r.v1"}, record))
	assert.Equal(t, "helm", record.Labels["owner"])
	assert.Equal(t, "deployed", record.Labels["status"])
	assert.Equal(t, corev1.SecretType(releaseSecretType), record.Type)

	// A platform ConfigMap the tenant may not delete, added to the stored manifest.
	require.NoError(t, cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "sealed", Name: "platform"}}))
	r, err := decodeRelease(record.Data["release"])
	require.NoError(t, err)
	r.Manifest += "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: platform}\n"
	data, err := encodeRelease(r)
	require.NoError(t, err)
	record.Data["release"] = []byte(data)
	clients, err := kubernetes.NewForConfig(cp.Config)
	require.NoError(t, err)
	_, err = clients.CoreV1().Secrets("sealed").Update(ctx, record, metav1.UpdateOptions{})
	require.NoError(t, err)

	_, err = helm.lastRelease("sealed", "r")
	assert.True(t, isTampered(err), "%v", err)
	_, _, err = helm.UpgradeInstall(ctx, "sealed", "r", ch, map[string]any{"a": "two"}, InstallOptions{Last: rel})
	assert.True(t, isTampered(err), "no upgrade over a tampered record: %v", err)
	_, err = helm.Uninstall("sealed", "r", nil)
	assert.True(t, isTampered(err), "no uninstall of a tampered record: %v", err)
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "sealed", Name: "platform"}, &corev1.ConfigMap{}), "the platform ConfigMap is still there")
	cm := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "sealed", Name: "r-cm"}, cm))
	assert.Equal(t, "one", cm.Data["a"], "nothing was upgraded")

	// Unsealed records made by plain Helm are not Compositor's either.
	_, err = (&sealedSecrets{secrets: clients.CoreV1().Secrets("sealed"), namespace: "sealed", seal: testSeal(t)}).Query(map[string]string{"name": "r", "owner": "helm"})
	assert.True(t, isTampered(err), "a record sealed with another key is refused: %v", err)
	_, err = (&sealedSecrets{secrets: clients.CoreV1().Secrets("sealed"), namespace: "sealed", seal: testSeal(t)}).Query(map[string]string{"name": "none"})
	assert.ErrorIs(t, err, driver.ErrReleaseNotFound)
	assert.False(t, strings.Contains(err.Error(), "tampered"))
}

// A release too big to be read back is not recorded: recorded, it would leave its
// composition stuck, every reconcile and its deletion failing to read it.
func TestAReleaseTooBigToReadBackIsNotRecorded(t *testing.T) {
	rel := &release.Release{Name: "big", Namespace: "team", Manifest: strings.Repeat("x", maxReleaseJSON)}
	_, err := encodeRelease(rel)
	assert.ErrorContains(t, err, "more than the 32 MiB a record may hold: it is not recorded")
	rel.Manifest = strings.Repeat("x", 1<<20)
	encoded, err := encodeRelease(rel)
	require.NoError(t, err)
	back, err := decodeRelease([]byte(encoded))
	require.NoError(t, err)
	assert.Equal(t, rel.Manifest, back.Manifest)
}
