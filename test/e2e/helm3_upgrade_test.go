package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// The upgrade from the last Compositor on Helm 3 (issue #28). That Compositor is built
// from git history by `make compositor-helm3` (bin/helm3/compositor; `make test` builds
// it); the new one is this checkout, built as the other binary-tier tests build it.
//
// Environment:
//   - COMPOSITOR_HELM3_BINARY: the old binary (default: bin/helm3/compositor). Missing,
//     the test is skipped, or fails under CI=true.
//   - COMPOSITOR_BINARY: the new binary (default: this checkout, built by
//     buildCompositor), e.g. bin/compositor from `make build`.
//
// Both files must be named compositor: Helm manages fields as the binary's base name,
// and the new one takes over the fields the old one manages only under the same name.

// upgradeManager is the field manager both Compositors write chart objects as.
const upgradeManager = "compositor"

// upgradeResource is the API the fireworks-app 1.1.5 definition serves.
const upgradeResource = "fireworksapps.v1-1-5.composition.krateo.io"

// helm3CompositorBinary is the last Compositor on Helm 3.
func helm3CompositorBinary(t *testing.T) string {
	t.Helper()
	return olderCompositorBinary(t, "the Helm 3 Compositor", "COMPOSITOR_HELM3_BINARY", "helm3", "compositor-helm3")
}

// olderCompositorBinary is an earlier build of Compositor that `make target` builds
// into bin/<dir>/compositor, or the one $env names. Missing, the test is skipped, or
// fails under CI=true.
func olderCompositorBinary(t *testing.T, what, env, dir, target string) string {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		bin = filepath.Join(controlplane.RepoRoot(), "bin", dir, "compositor")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s %s is missing under CI: `make test` builds it with `make %s`", what, bin, target)
		}
		t.Skipf("%s %s is missing: run `make %s` to run this test", what, bin, target)
	}
	require.Equal(t, upgradeManager, filepath.Base(bin), "Helm manages fields as the binary's name, which must be %q", upgradeManager)
	return bin
}

// currentCompositorBinary is the Compositor under test.
func currentCompositorBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("COMPOSITOR_BINARY")
	if bin == "" {
		bin = buildCompositor(t)
	}
	require.FileExists(t, bin)
	require.Equal(t, upgradeManager, filepath.Base(bin), "the binary's name is the field manager of its Helm, which must be %q", upgradeManager)
	return bin
}

// servedCompositor runs `compositor serve` as a child process, one binary after
// another, with the same arguments and the same cluster state: the namespace (its CA
// and release seal Secrets) and the webhooks' address. Each run has a chart cache of
// its own, as a new pod would.
type servedCompositor struct {
	t           *testing.T
	cp          *controlplane.ControlPlane
	webhookAddr string
	dir         string
	logs        []string
	cmd         *exec.Cmd
	exited      chan struct{}
}

func newServedCompositor(t *testing.T, cp *controlplane.ControlPlane) *servedCompositor {
	t.Helper()
	res := cp.Kubectl(context.Background(), "", "create", "namespace", "compositor-system")
	require.NoError(t, res.Err, res.Stderr)
	s := &servedCompositor{t: t, cp: cp, webhookAddr: freePort(t), dir: t.TempDir()}
	t.Cleanup(func() {
		s.stop()
		if !t.Failed() {
			return
		}
		for _, path := range s.logs {
			data, _ := os.ReadFile(path)
			lines := strings.Split(string(data), "\n")
			t.Logf("last lines of %s:\n%s", filepath.Base(path), strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	return s
}

// start runs binary as `compositor serve`; label names its log and chart cache.
func (s *servedCompositor) start(binary, label string) {
	s.t.Helper()
	require.Nil(s.t, s.cmd, "a compositor serve runs already")
	path := filepath.Join(s.dir, label+".log")
	log, err := os.Create(path)
	require.NoError(s.t, err)
	s.logs = append(s.logs, path)
	cmd := exec.Command(binary, "serve", "--controllers", "in-process", "--leader-election=false",
		"--webhook-bind-address", s.webhookAddr, "--webhook-url", "https://"+s.webhookAddr,
		"--health-probe-bind-address", "0", "--metrics-bind-address", "0",
		"--allow-chart-network", "127.0.0.0/8", "--chart-cache-dir", filepath.Join(s.dir, label+"-charts"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.cp.Kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(s.t, cmd.Start())
	s.cmd, s.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) { _ = cmd.Wait(); _ = log.Close(); close(exited) }(s.exited)
}

// stop ends the running compositor serve as Kubernetes ends a pod: SIGTERM, then
// SIGKILL after a grace period. It reports whether it ended within the grace period.
func (s *servedCompositor) stop() bool {
	if s.cmd == nil {
		return true
	}
	defer func() { s.cmd = nil }()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		return true
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return false
	}
}

// upgradeApp is a FireworksApp composition.
func upgradeApp(namespace, name, spec string) string {
	return fmt.Sprintf("apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", name, namespace, spec)
}

// historyRow is one row of `helm history -o json`.
type historyRow struct {
	Revision    int    `json:"revision"`
	Status      string `json:"status"`
	Chart       string `json:"chart"`
	AppVersion  string `json:"app_version"`
	Description string `json:"description"`
}

// releaseHistory is `helm history` of release name in namespace, oldest first.
func releaseHistory(t assert.TestingT, cp *controlplane.ControlPlane, namespace, name string) []historyRow {
	res := cp.Helm(context.Background(), "history", name, "-n", namespace, "-o", "json")
	if !assert.NoError(t, res.Err, res.Stderr) {
		return nil
	}
	var rows []historyRow
	assert.NoError(t, json.Unmarshal([]byte(res.Stdout), &rows), res.Stdout)
	return rows
}

// statuses are the statuses of a history, by revision from 1.
func statuses(rows []historyRow) []string {
	var out []string
	for i, r := range rows {
		if r.Revision != i+1 {
			return append(out, fmt.Sprintf("revision %d at row %d", r.Revision, i+1))
		}
		out = append(out, r.Status)
	}
	return out
}

// chartObject names one object a release renders.
type chartObject struct {
	gvk             schema.GroupVersionKind
	namespace, name string
}

func (o chartObject) String() string { return o.gvk.Kind + " " + o.namespace + "/" + o.name }

var (
	configMapKind  = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	serviceKind    = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	deploymentKind = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
)

// getChartObject reads o; nil when it does not exist.
func getChartObject(t assert.TestingT, cp *controlplane.ControlPlane, o chartObject) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(o.gvk)
	err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: o.namespace, Name: o.name}, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	assert.NoError(t, err, o.String())
	return obj
}

// fieldManagers are the managers of obj's managedFields with their operations, e.g.
// "compositor/Update".
func fieldManagers(obj *unstructured.Unstructured) []string {
	var out []string
	for _, e := range obj.GetManagedFields() {
		out = append(out, e.Manager+"/"+string(e.Operation))
	}
	return out
}

// managedBy reports whether one of obj's managedFields entries is manager's.
func managedBy(obj *unstructured.Unstructured, manager string) bool {
	return slices.ContainsFunc(obj.GetManagedFields(), func(e metav1.ManagedFieldsEntry) bool { return e.Manager == manager })
}

// assertTakenOverByHelm4 asserts that the new Compositor's Helm owns the fields of
// objects, which the Helm 3 Compositor created and the new one has upgraded since (or
// created): Helm 4 applies them server-side as "compositor", the name Helm 3 updated
// them as, so the fields of the client-side updates moved to the apply and no update
// of Compositor's is left owning any (a field two managers own would be a conflict).
func assertTakenOverByHelm4(t *testing.T, cp *controlplane.ControlPlane, objects ...chartObject) {
	t.Helper()
	for _, o := range objects {
		obj := getChartObject(t, cp, o)
		if !assert.NotNil(t, obj, "%s exists", o) {
			continue
		}
		managers := fieldManagers(obj)
		assert.Contains(t, managers, upgradeManager+"/Apply", "%s is applied server-side", o)
		assert.NotContains(t, managers, upgradeManager+"/Update", "%s: the client-side fields moved to the apply", o)
	}
}

// Issue 28: the Compositor of the last Helm 3 commit installs two compositions (one
// with its subchart on), is replaced by the current build, which finds its releases as
// they are (no new revision), upgrades them when their values change and uninstalls
// them when they are deleted, leaving no object nor release record behind.
func TestUpgradeFromHelm3Compositor(t *testing.T) {
	oldBinary := helm3CompositorBinary(t)
	newBinary := currentCompositorBinary(t)
	cp := controlplane.Start(t)
	controlplane.Require(t, "helm")
	ctx := context.Background()
	serve := newServedCompositor(t, cp)

	// Both compositions' namespaces and what each release renders, by composition.
	const defNamespace, teamNamespace = "fireworksapp-system", "team-upgrade"
	type composition struct {
		namespace, name string
		install, change string // spec before and after the upgrade
	}
	alpha := composition{namespace: defNamespace, name: "alpha",
		install: `{replicaCount: 2, storage: {size: 1Gi}, cache: {enabled: true, maxMemory: 256Mi}}`,
		change:  `{replicaCount: 3, cache: {enabled: false}}`}
	beta := composition{namespace: teamNamespace, name: "beta",
		install: `{replicaCount: 1}`,
		change:  `{replicaCount: 2, storage: {size: 5Gi}, cache: {enabled: true}}`}
	compositions := []composition{alpha, beta}
	object := func(c composition, gvk schema.GroupVersionKind, suffix string) chartObject {
		return chartObject{gvk: gvk, namespace: c.namespace, name: c.name + suffix}
	}
	// kept are the objects every release renders.
	kept := func(c composition) []chartObject {
		return []chartObject{object(c, configMapKind, "-config"), object(c, deploymentKind, "-fireworks-app"), object(c, serviceKind, "-fireworks-app")}
	}
	// expect asserts the objects of c's release: the ConfigMap's data, the cache
	// subchart's ConfigMap (nil: none) and the Deployment's replicas.
	expect := func(c *assert.CollectT, comp composition, config, cache map[string]string, replicas int64) {
		for _, o := range kept(comp) {
			obj := getChartObject(c, cp, o)
			if !assert.NotNil(c, obj, "%s exists", o) {
				continue
			}
			assert.Equal(c, comp.name, obj.GetAnnotations()["meta.helm.sh/release-name"], o.String())
			assert.Equal(c, comp.namespace, obj.GetAnnotations()["meta.helm.sh/release-namespace"], o.String())
			assert.Equal(c, "Helm", obj.GetLabels()["app.kubernetes.io/managed-by"], o.String())
			switch o.gvk {
			case configMapKind:
				data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
				assert.Equal(c, config, data, o.String())
			case deploymentKind:
				got, _, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
				assert.Equal(c, replicas, got, o.String())
			}
		}
		o := object(comp, configMapKind, "-cache")
		obj := getChartObject(c, cp, o)
		if cache == nil {
			assert.Nil(c, obj, "%s is not rendered", o)
		} else if assert.NotNil(c, obj, "%s exists", o) {
			data, _, _ := unstructured.NestedStringMap(obj.Object, "data")
			assert.Equal(c, cache, data, o.String())
			assert.Equal(c, comp.name, obj.GetAnnotations()["meta.helm.sh/release-name"], o.String())
		}
	}
	// readyAtGeneration waits until c is Ready for its latest generation.
	readyAtGeneration := func(c composition) {
		t.Helper()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.Equal(ct, "True Available release "+c.name+" is installed", readyCondition(ct, cp, upgradeResource, c.namespace, c.name))
			res := cp.Kubectl(ctx, "", "get", upgradeResource, c.name, "-n", c.namespace, "-o",
				`jsonpath={.metadata.generation} {.status.conditions[?(@.type=="Ready")].observedGeneration}`)
			assert.NoError(ct, res.Err, res.Stderr)
			generations := strings.Fields(res.Stdout)
			if assert.Len(ct, generations, 2) {
				assert.Equal(ct, generations[0], generations[1], "Ready is about the latest generation")
			}
		}, 3*time.Minute, 250*time.Millisecond)
	}
	// records asserts c's release records: sealed Secrets of type helm.sh/release.v1,
	// one per revision, with these statuses.
	records := func(ct assert.TestingT, c composition, want ...string) {
		var got []string
		for _, s := range helmReleaseSecrets(ct, cp, c.namespace, c.name) {
			assert.Equal(ct, corev1.SecretType("helm.sh/release.v1"), s.Type, s.Name)
			assert.Regexp(ct, `^v1:[0-9a-f]{64}$`, s.Annotations["compositor.dev/release-seal"], "%s is sealed", s.Name)
			got = append(got, s.Labels["version"]+" "+s.Labels["status"])
		}
		slices.Sort(got)
		var expected []string
		for i, status := range want {
			expected = append(expected, fmt.Sprintf("%d %s", i+1, status))
		}
		assert.Equal(ct, expected, got, "release records of %s/%s", c.namespace, c.name)
	}
	// newEvents are the notes of c's events with reason that the process started at
	// since recorded (each process records its own Event objects).
	newEvents := func(ct assert.TestingT, c composition, reason string, since time.Time) []string {
		list := &corev1.EventList{}
		if !assert.NoError(ct, cp.Client.List(ctx, list, client.InNamespace(c.namespace))) {
			return nil
		}
		var notes []string
		for _, e := range list.Items {
			last := e.EventTime.Time
			if e.Series != nil && e.Series.LastObservedTime.After(last) {
				last = e.Series.LastObservedTime.Time
			}
			if e.LastTimestamp.After(last) {
				last = e.LastTimestamp.Time
			}
			if e.InvolvedObject.Name == c.name && e.Reason == reason && !last.Before(since) {
				notes = append(notes, e.Message)
			}
		}
		return notes
	}

	// The Helm 3 Compositor installs both compositions.
	start := time.Now()
	serve.start(oldBinary, "helm3")
	repo := sampleRepository(t)
	applyDefinition(t, cp, repo.URL, defNamespace, "fireworks-app", "1.1.5")
	res := cp.Kubectl(ctx, "", "create", "namespace", teamNamespace)
	require.NoError(t, res.Err, res.Stderr)
	for _, c := range compositions {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			res := cp.Kubectl(ctx, upgradeApp(c.namespace, c.name, c.install), "apply", "-f", "-")
			assert.NoError(ct, res.Err, res.Stderr)
		}, time.Minute, 250*time.Millisecond, "the API %s is served", upgradeResource)
	}
	for _, c := range compositions {
		readyAtGeneration(c)
	}
	t.Logf("the Helm 3 Compositor installed both releases %s after it started", time.Since(start).Round(time.Millisecond))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		expect(ct, alpha, map[string]string{"REPLICAS": "2", "STORAGE_SIZE": "1Gi", "CACHE_ENABLED": "true"}, map[string]string{"MAX_MEMORY": "256Mi"}, 2)
		expect(ct, beta, map[string]string{"REPLICAS": "1", "CACHE_ENABLED": "false"}, nil, 1)
	}, 30*time.Second, 250*time.Millisecond)
	uids := map[chartObject]types.UID{}
	for _, c := range compositions {
		assert.Equal(t, []string{"deployed"}, statuses(releaseHistory(t, cp, c.namespace, c.name)), "%s/%s", c.namespace, c.name)
		for _, row := range releaseHistory(t, cp, c.namespace, c.name) {
			assert.Equal(t, "fireworks-app-1.1.5", row.Chart)
			assert.Equal(t, "1.27.0", row.AppVersion)
		}
		records(t, c, "deployed")
		for _, o := range kept(c) {
			obj := getChartObject(t, cp, o)
			require.NotNil(t, obj, "%s exists", o)
			uids[o] = obj.GetUID()
			assert.True(t, managedBy(obj, upgradeManager), "Helm 3 manages %s as %q: %v", o, upgradeManager, fieldManagers(obj))
		}
	}
	seal := &corev1.Secret{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: "compositor-release-seal"}, seal))

	// The new Compositor replaces it, as a new pod would: same namespace and state.
	assert.True(t, serve.stop(), "the Helm 3 Compositor ends on SIGTERM within 30 s")
	restarted := time.Now()
	serve.start(newBinary, "current")
	for _, c := range compositions {
		// It opens the records the old one sealed, and finds every release as it is.
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.Contains(ct, newEvents(ct, c, "HelmSkip", restarted),
				"release "+c.name+" is already chart 1.1.5 with these values (revision 1)",
				"Ready: %s", readyCondition(ct, cp, upgradeResource, c.namespace, c.name))
		}, 3*time.Minute, 250*time.Millisecond, "the new Compositor looks at %s/%s and leaves its release alone", c.namespace, c.name)
		assert.Equal(t, []string{"deployed"}, statuses(releaseHistory(t, cp, c.namespace, c.name)), "no new revision for %s/%s", c.namespace, c.name)
		records(t, c, "deployed")
	}
	t.Logf("the new Compositor found both releases %s after it started", time.Since(restarted).Round(time.Millisecond))
	again := &corev1.Secret{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(seal), again))
	assert.Equal(t, seal.UID, again.UID, "the release seal Secret was kept")
	assert.Equal(t, seal.Data, again.Data, "the release seal key was kept")

	// It upgrades both releases when their values change.
	upgraded := time.Now()
	for _, c := range compositions {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			res := cp.Kubectl(ctx, upgradeApp(c.namespace, c.name, c.change), "apply", "-f", "-")
			assert.NoError(ct, res.Err, res.Stderr)
		}, 2*time.Minute, 250*time.Millisecond, "the new Compositor admits the change to %s/%s", c.namespace, c.name)
	}
	for _, c := range compositions {
		readyAtGeneration(c)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.Equal(ct, []string{"superseded", "deployed"}, statuses(releaseHistory(ct, cp, c.namespace, c.name)), "%s/%s", c.namespace, c.name)
		}, 2*time.Minute, 250*time.Millisecond)
		assert.Contains(t, newEvents(t, c, "HelmUpgraded", restarted), "release "+c.name+" is chart fireworks-app 1.1.5, revision 2")
		records(t, c, "superseded", "deployed")
		assert.NotContains(t, warnings(t, cp, c.namespace, c.name), "ReleaseTampered")
	}
	t.Logf("the new Compositor upgraded both releases %s after the change", time.Since(upgraded).Round(time.Millisecond))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		expect(ct, alpha, map[string]string{"REPLICAS": "3", "CACHE_ENABLED": "false"}, nil, 3)
		expect(ct, beta, map[string]string{"REPLICAS": "2", "STORAGE_SIZE": "5Gi", "CACHE_ENABLED": "true"}, map[string]string{"MAX_MEMORY": "128Mi"}, 2)
	}, 30*time.Second, 250*time.Millisecond)
	for o, uid := range uids {
		obj := getChartObject(t, cp, o)
		if assert.NotNil(t, obj, "%s exists", o) {
			assert.Equal(t, uid, obj.GetUID(), "%s was updated in place, not created again", o)
		}
	}
	for _, c := range compositions {
		assertTakenOverByHelm4(t, cp, kept(c)...)
	}
	assertTakenOverByHelm4(t, cp, object(beta, configMapKind, "-cache"))

	// It uninstalls both releases when their compositions are deleted.
	for _, c := range compositions {
		res := cp.Kubectl(ctx, "", "delete", upgradeResource, c.name, "-n", c.namespace, "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
		assert.NotEmpty(t, newEvents(t, c, "HelmUninstalled", restarted), "the new Compositor uninstalled %s/%s", c.namespace, c.name)
	}
	// Every status (helm 4 has no --all).
	res = cp.Helm(ctx, "list", "-A", "-o", "json", "--deployed", "--failed", "--pending", "--superseded", "--uninstalled", "--uninstalling")
	require.NoError(t, res.Err, res.Stderr)
	assert.JSONEq(t, "[]", res.Stdout, "no release is left")
	names := []string{alpha.name, beta.name}
	for _, ns := range []string{defNamespace, teamNamespace} {
		secrets := &corev1.SecretList{}
		require.NoError(t, cp.Client.List(ctx, secrets, client.InNamespace(ns)))
		for _, s := range secrets.Items {
			assert.NotEqual(t, corev1.SecretType("helm.sh/release.v1"), s.Type, "release record %s/%s is left", ns, s.Name)
		}
		for _, gvk := range []schema.GroupVersionKind{configMapKind, serviceKind, deploymentKind, {Version: "v1", Kind: "Secret"}} {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			require.NoError(t, cp.Client.List(ctx, list, client.InNamespace(ns)))
			for _, obj := range list.Items {
				assert.NotContains(t, names, obj.GetAnnotations()["meta.helm.sh/release-name"], "%s %s/%s is left", gvk.Kind, ns, obj.GetName())
				assert.NotContains(t, names, obj.GetLabels()["app.kubernetes.io/instance"], "%s %s/%s is left", gvk.Kind, ns, obj.GetName())
			}
		}
		res := cp.Kubectl(ctx, "", "get", upgradeResource, "-n", ns, "-o", "name")
		require.NoError(t, res.Err, res.Stderr)
		assert.Empty(t, strings.TrimSpace(res.Stdout), "no composition is left in %s", ns)
	}
}
