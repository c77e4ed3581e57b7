package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/multicluster"
	compositionhelm "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// TestMulticluster registers two target control planes on a hub with kubeconfig
// Secrets, the multicluster-runtime way, and sees them engaged with their labels,
// selected by label, a release installed into the selected one only, and one
// disengaged when its Secret is deleted.
func TestMulticluster(t *testing.T) {
	hub, targetA, targetB := controlplane.Start(t), controlplane.Start(t), controlplane.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const ns = "compositor-system"
	require.NoError(t, hub.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	// A Secret without the label is not a cluster.
	require.NoError(t, hub.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "not-a-cluster", Namespace: ns, Labels: map[string]string{"env": "b"}},
		Data:       map[string][]byte{multicluster.SecretKey: kubeconfigOf(t, targetB)},
	}))

	var notified = make(chan string, 16)
	clusters, err := multicluster.New(hub.Config, multicluster.Options{
		Namespace: ns,
		Log:       testr.New(t),
		Notify:    func(name string) { notified <- name },
	})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	goroutinesBefore := runtime.NumGoroutine()
	go func() { stopped <- clusters.Start(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-stopped:
			assert.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("Clusters did not stop within 30s")
		}
	})

	for name, target := range map[string]*controlplane.ControlPlane{"target-a": targetA, "target-b": targetB} {
		require.NoError(t, hub.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{vocab.AnnotationNamespaceSelector: "kubernetes.io/metadata.name=team"}, Labels: map[string]string{
				multicluster.SecretLabel: "true",
				"env":                    name[len(name)-1:],
			}},
			Data: map[string][]byte{multicluster.SecretKey: kubeconfigOf(t, target)},
		}))
	}

	// A kubeconfig that would have Compositor run a program is never used: the
	// cluster is registered, not engaged, and the program never runs.
	ran := filepath.Join(t.TempDir(), "ran")
	plugin := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, "touch %s"], interactiveMode: Never}}}]
`, targetA.Config.Host, ran)
	require.NoError(t, hub.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "plugin", Namespace: ns, Labels: map[string]string{multicluster.SecretLabel: "true", "env": "a"},
			Annotations: map[string]string{vocab.AnnotationNamespaceSelector: "kubernetes.io/metadata.name=team"}},
		Data: map[string][]byte{multicluster.SecretKey: []byte(plugin)},
	}))

	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := clusters.List(ctx)
		if assert.Len(c, got, 2) {
			assert.Equal(c, "target-a", got[0].Name)
			assert.Equal(c, "a", got[0].Labels["env"])
			assert.Equal(c, "target-b", got[1].Name)
			assert.Equal(c, "b", got[1].Labels["env"])
		}
	}, time.Minute, 100*time.Millisecond)
	t.Logf("both clusters engaged %v after their Secrets were created; goroutines %d before Start, %d with both engaged",
		time.Since(start).Round(time.Millisecond), goroutinesBefore, runtime.NumGoroutine())
	for range 2 {
		select {
		case <-notified:
		case <-time.After(10 * time.Second):
			t.Fatal("Notify was not called for each engagement within 10s")
		}
	}

	team := map[string]string{"kubernetes.io/metadata.name": "team"}
	selection := clusters.Select(ctx, labels.SelectorFromSet(labels.Set{"env": "b"}), team)
	assert.Equal(t, "Secret compositor-system/plugin: the kubeconfig is refused: user u runs an exec credential plugin; Compositor never runs a program or reads a file a kubeconfig names: "+
		"put the credentials in the kubeconfig itself (token, client-certificate-data and client-key-data, certificate-authority-data)", clusters.Unusable(ctx, "plugin"))
	assert.Empty(t, clusters.Unusable(ctx, "target-a"))
	_, err = os.Stat(ran)
	assert.True(t, os.IsNotExist(err), "the exec plugin ran")
	require.Empty(t, selection.Waiting)
	require.Empty(t, selection.Closed)
	selected := selection.Engaged
	require.Len(t, selected, 1)
	b := selected[0]
	require.Equal(t, "target-b", b.Name)
	placement, err := multicluster.ParsePlacement(map[string]string{vocab.AnnotationPlacement: "env in (a,b),env!=a"})
	require.NoError(t, err)
	assert.Equal(t, []string{"target-b"}, names(clusters.Select(ctx, placement.Selector, team).Engaged))
	assert.Equal(t, []string{"target-a", "target-b"}, names(clusters.Select(ctx, labels.Everything(), team).Engaged))
	// Both Secrets open their clusters to namespace team only.
	other := clusters.Select(ctx, labels.Everything(), map[string]string{"kubernetes.io/metadata.name": "other"})
	assert.Empty(t, other.Engaged)
	assert.Equal(t, []string{"plugin", "target-a", "target-b"}, other.Closed)
	assert.Equal(t, []string{"plugin"}, clusters.Select(ctx, labels.SelectorFromSet(labels.Set{"env": "a"}), team).Waiting)

	// The cluster's client acts on target-b, not the hub.
	require.NoError(t, b.Client().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}))
	require.NoError(t, targetB.Client.Get(ctx, client.ObjectKey{Name: "team"}, &corev1.Namespace{}))
	assert.True(t, apierrors.IsNotFound(hub.Client.Get(ctx, client.ObjectKey{Name: "team"}, &corev1.Namespace{})))

	seal, err := compositionhelm.NewReleaseSeal(compositionhelm.NewSealKey())
	require.NoError(t, err)
	h, err := compositionhelm.NewHelm(b.Config(), seal, testr.New(t))
	require.NoError(t, err)
	outcome, rel, err := h.UpgradeInstall(ctx, "team", "hello", placedChart, map[string]interface{}{"greeting": "from the hub"}, compositionhelm.InstallOptions{})
	require.NoError(t, err)
	assert.Equal(t, compositionhelm.Installed, outcome)
	assert.Equal(t, 1, rel.Version)

	cm := &corev1.ConfigMap{}
	require.NoError(t, targetB.Client.Get(ctx, client.ObjectKey{Namespace: "team", Name: "hello-data"}, cm))
	assert.Equal(t, "from the hub", cm.Data["greeting"])
	assert.True(t, apierrors.IsNotFound(targetA.Client.Get(ctx, client.ObjectKey{Namespace: "team", Name: "hello-data"}, &corev1.ConfigMap{})))
	assert.True(t, apierrors.IsNotFound(hub.Client.Get(ctx, client.ObjectKey{Namespace: "team", Name: "hello-data"}, &corev1.ConfigMap{})))

	// Helm's own action configuration for the same cluster sees the release there.
	actions, err := h.Actions("team")
	require.NoError(t, err)
	last, err := actions.Releases.Last("hello")
	require.NoError(t, err)
	require.IsType(t, &release.Release{}, last)
	assert.Equal(t, "placed-app", last.(*release.Release).Chart.Metadata.Name)

	// Deleting target-a's Secret disengages it; target-b stays.
	a, ok := clusters.Get(ctx, "target-a")
	require.True(t, ok)
	require.NoError(t, hub.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "target-a", Namespace: ns}}))
	select {
	case <-a.Done():
	case <-time.After(time.Minute):
		t.Fatal("target-a was not disengaged within a minute of its Secret's deletion")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"target-b"}, names(clusters.List(ctx)))
		_, ok := clusters.Get(ctx, "target-a")
		assert.False(c, ok)
	}, 30*time.Second, 100*time.Millisecond)
	assert.Empty(t, clusters.Select(ctx, labels.SelectorFromSet(labels.Set{"env": "a"}), team).Engaged)
	select {
	case <-b.Done():
		t.Fatal("target-b was disengaged too")
	default:
	}
	assertNotified(t, notified, "target-a")

	// Relabelling target-b's Secret changes its labels, not its engagement; taking the
	// label sigs.k8s.io/multicluster-runtime-kubeconfig away disengages it.
	secretB := &corev1.Secret{}
	require.NoError(t, hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "target-b"}, secretB))
	secretB.Labels["env"] = "c"
	require.NoError(t, hub.Client.Update(ctx, secretB))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"target-b"}, names(clusters.Select(ctx, labels.SelectorFromSet(labels.Set{"env": "c"}), team).Engaged))
	}, 30*time.Second, 100*time.Millisecond)
	if again, ok := clusters.Get(ctx, "target-b"); assert.True(t, ok) {
		assert.Equal(t, b.Done(), again.Done(), "a change of labels engaged target-b again")
	}
	delete(secretB.Labels, multicluster.SecretLabel)
	require.NoError(t, hub.Client.Update(ctx, secretB))
	select {
	case <-b.Done():
	case <-time.After(time.Minute):
		t.Fatal("target-b was not disengaged within a minute of its Secret losing the label")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, clusters.List(ctx))
	}, 30*time.Second, 100*time.Millisecond)
	assertNotified(t, notified, "target-b")
}

// assertNotified waits for Notify to name cluster.
func assertNotified(t *testing.T, notified <-chan string, cluster string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case name := <-notified:
			if name == cluster {
				return
			}
		case <-deadline:
			t.Fatalf("Notify did not name %s within 10s", cluster)
		}
	}
}

// kubeconfigOf is the admin kubeconfig of cp (a loopback address and a client
// certificate), as a kubeconfig Secret holds it.
func kubeconfigOf(t *testing.T, cp *controlplane.ControlPlane) []byte {
	t.Helper()
	data, err := os.ReadFile(cp.Kubeconfig)
	require.NoError(t, err)
	return data
}

func names(clusters []multicluster.Cluster) []string {
	out := make([]string, 0, len(clusters))
	for _, c := range clusters {
		out = append(out, c.Name)
	}
	return out
}
