package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/multicluster"
	compositionctl "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// placedChart is what the placement tests deliver: a ConfigMap with a greeting.
var placedChart = &chart.Chart{
	Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "placed-app", Version: "0.1.0"},
	Values:   map[string]any{"greeting": "hello"},
	Schema:   []byte(`{"type":"object","properties":{"greeting":{"type":"string","maxLength":20}},"additionalProperties":false}`),
	Templates: []*chartcommon.File{{Name: "templates/data.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-data
data:
  greeting: {{ .Values.greeting | quote }}
`)}},
}

const (
	placedNamespace = "shop"
	placedResource  = "placedapps.v0-1-0.composition.krateo.io"
)

var placedGVK = schema.GroupVersionKind{Group: "composition.krateo.io", Version: "v0-1-0", Kind: "PlacedApp"}

func placedApp(name, placement, greeting string) string {
	return fmt.Sprintf(`apiVersion: composition.krateo.io/v0-1-0
kind: PlacedApp
metadata:
  name: %s
  namespace: %s
  annotations: {compositor.dev/placement: %q}
spec: {greeting: %q}
`, name, placedNamespace, placement, greeting)
}

// Issue 18: one hub running Compositor, two target control planes registered by
// kubeconfig Secrets. A composition placed on both is installed on both and Ready, with
// an entry per cluster; an update reaches both and a reconcile with nothing new skips
// Helm on each; moving the selector uninstalls from the cluster left; a target whose
// API server is stopped is reported while the other converges, and converges itself
// once restarted; a rotated kubeconfig Secret leaves the release as it is; deletion
// uninstalls from both. An invalid composition is refused at the hub and reaches no
// target. A target that stops answering holds a deletion until its Secret goes, and
// its release is then left behind with an event.
func TestPlacedCompositionReachesEveryTarget(t *testing.T) {
	hub, targetA, restartable := controlplane.Start(t), controlplane.Start(t), startRestartableControlPlane(t)
	targetB := restartable.cp
	startCompositor(t, hub, func(o *app.ServeOptions) {
		o.Controllers = app.ControllersInProcess
		o.Multicluster = true
	})
	ctx := context.Background()
	targets := map[string]*controlplane.ControlPlane{"target-a": targetA, "target-b": targetB}
	for name, target := range targets {
		require.NoError(t, hub.Client.Create(ctx, kubeconfigSecret(t, name, target, map[string]string{"env": "prod", "name": name})))
	}
	applyDefinition(t, hub, serveCharts(t, placedChart).URL, placedNamespace, "placed-app", "0.1.0")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("DEBUG %s\n%s", hub.Kubectl(ctx, "", "get", placedResource, "-A", "-o", "yaml").Stdout, hub.Kubectl(ctx, "", "get", "events", "-n", placedNamespace).Stdout)
		}
	})

	// Refused at the hub: a placement that is no selector, values the chart's schema
	// refuses. Nothing reaches a target.
	for spec, want := range map[string]string{
		placedApp("broken", "env in (prod", "hi"):                      `metadata.annotations[compositor.dev/placement]: Invalid value: "env in (prod": "env in (prod" is not a valid label selector`,
		placedApp("broken", "", "hi"):                                  `metadata.annotations[compositor.dev/placement]: Invalid value: "": is empty`,
		placedApp("broken", "env=prod", "far far too long a greeting"): "spec.greeting",
	} {
		res := hub.Kubectl(ctx, spec, "apply", "-f", "-")
		require.Error(t, res.Err, "admitted:\n%s", spec)
		assert.Contains(t, res.Stderr, want)
	}
	assertOnTargets(t, targets, "broken", nil)

	// Installed on both, Ready, one entry per cluster.
	start := time.Now()
	res := hub.Kubectl(ctx, placedApp("hello", "env=prod", "one"), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release hello is installed on target-a, target-b", readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, 2*time.Minute, 100*time.Millisecond)
	t.Logf("placed on two targets: Ready %v after kubectl apply", time.Since(start).Round(10*time.Millisecond))
	assertOnTargets(t, targets, "hello", map[string]string{"target-a": "one", "target-b": "one"})
	assert.True(t, apierrors.IsNotFound(hub.Client.Get(ctx, client.ObjectKey{Namespace: placedNamespace, Name: "hello-data"}, &corev1.ConfigMap{})),
		"a placed composition is not installed in the hub")
	statuses := clusterStatuses(t, hub, "hello")
	require.Len(t, statuses, 2)
	for _, name := range []string{"target-a", "target-b"} {
		st := statuses[name]
		assert.True(t, st.Ready, "%s: %+v", name, st)
		assert.Equal(t, "0.1.0", st.ChartVersion)
		assert.Equal(t, int64(1), st.Revision)
		assert.NotEmpty(t, st.Fingerprint)
	}
	assert.Equal(t, statuses["target-a"].Fingerprint, statuses["target-b"].Fingerprint, "the same values and chart on both")

	// An update reaches both; a reconcile with nothing new skips Helm on each.
	updateEverywhere(t, hub, targets, "hello", "two")
	updated := clusterStatuses(t, hub, "hello")
	for _, name := range []string{"target-a", "target-b"} {
		assert.Equal(t, int64(2), updated[name].Revision, name)
		assert.NotEqual(t, statuses[name].Fingerprint, updated[name].Fingerprint, name)
	}
	res = hub.Kubectl(ctx, "", "annotate", placedResource, "hello", "-n", placedNamespace, "touched=once")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		skips := eventsOf(c, hub, "hello", compositionctl.EventHelmSkip)
		assert.Contains(c, skips, "release hello on cluster target-a is already chart 0.1.0 with these values (revision 2)")
		assert.Contains(c, skips, "release hello on cluster target-b is already chart 0.1.0 with these values (revision 2)")
	}, time.Minute, 100*time.Millisecond)
	assert.Equal(t, updated, clusterStatuses(t, hub, "hello"), "a skip changes no cluster's entry")

	// Moving the selector uninstalls from the cluster left, and only there.
	res = hub.Kubectl(ctx, "", "annotate", "--overwrite", placedResource, "hello", "-n", placedNamespace, vocab.AnnotationPlacement+"=env=prod,name=target-a")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release hello is installed on target-a", readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, 2*time.Minute, 100*time.Millisecond)
	assertOnTargets(t, targets, "hello", map[string]string{"target-a": "two"})
	assert.Error(t, targetB.Helm(ctx, "status", "hello", "-n", placedNamespace).Err, "the release is gone from target-b")
	assert.Contains(t, eventsOf(t, hub, "hello", compositionctl.EventHelmUninstalled), "release hello is uninstalled from cluster target-b")
	assert.NotContains(t, clusterStatuses(t, hub, "hello"), "target-b")

	// Back on both; then target-b's API server stops. target-a converges and target-b
	// is reported; once restarted, target-b converges without anyone doing anything.
	res = hub.Kubectl(ctx, placedApp("hello", "env=prod", "three"), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release hello is installed on target-a, target-b", readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, 2*time.Minute, 100*time.Millisecond)
	assertOnTargets(t, targets, "hello", map[string]string{"target-a": "three", "target-b": "three"})

	restartable.stop(syscall.SIGTERM)
	res = hub.Kubectl(ctx, placedApp("hello", "env=prod", "four"), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "four", greeting(c, targetA, "hello"))
		ready := readyCondition(c, hub, placedResource, placedNamespace, "hello")
		assert.Contains(c, ready, "False InstallFailed cluster target-b: ")
		assert.NotContains(c, ready, "target-a")
	}, 2*time.Minute, 100*time.Millisecond)
	down := clusterStatuses(t, hub, "hello")
	assert.True(t, down["target-a"].Ready)
	assert.False(t, down["target-b"].Ready)
	// target-b was installed again when it came back into the selector: revision 1.
	assert.Equal(t, int64(1), down["target-b"].Revision, "target-b's entry keeps what is installed there")
	assert.Equal(t, clusterStatuses(t, hub, "hello")["target-b"].Fingerprint, down["target-b"].Fingerprint)
	t.Logf("target-b stopped, as the composition reports it: %s", down["target-b"].Message)

	require.NoError(t, restartable.start())
	restarted := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release hello is installed on target-a, target-b", readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, 2*time.Minute, 100*time.Millisecond)
	t.Logf("target-b converged %v after its API server was back", time.Since(restarted).Round(10*time.Millisecond))
	assertOnTargets(t, targets, "hello", map[string]string{"target-a": "four", "target-b": "four"})

	// Rotating target-a's kubeconfig Secret engages the cluster again from the new
	// kubeconfig, and the next reconcile acts with it; the release there is left as it
	// is meanwhile. A kubeconfig the cluster does not accept is reported, and nothing is
	// uninstalled; rotated again to a good one, the fingerprint matches and Helm is
	// skipped: no new revision.
	before := clusterStatuses(t, hub, "hello")
	secret := &corev1.Secret{}
	require.NoError(t, hub.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: "target-a"}, secret))
	good := secret.Data[multicluster.SecretKey]
	secret.Data[multicluster.SecretKey] = withToken(t, good, "not-a-token-of-target-a")
	rotated := time.Now()
	require.NoError(t, hub.Client.Update(ctx, secret))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, readyCondition(c, hub, placedResource, placedNamespace, "hello"), "False InstallFailed cluster target-a: ")
	}, time.Minute, 100*time.Millisecond)
	t.Logf("target-a's kubeconfig rotated to one it refuses: reported %v after the update: %s", time.Since(rotated).Round(10*time.Millisecond), clusterStatuses(t, hub, "hello")["target-a"].Message)
	assert.Contains(t, clusterStatuses(t, hub, "hello")["target-a"].Message, "the server has asked for the client to provide credentials") // 401
	assertOnTargets(t, targets, "hello", map[string]string{"target-a": "four", "target-b": "four"})

	require.NoError(t, hub.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: "target-a"}, secret))
	secret.Data[multicluster.SecretKey] = append(append([]byte{}, good...), []byte("\n# rotated\n")...)
	rotated = time.Now()
	require.NoError(t, hub.Client.Update(ctx, secret))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release hello is installed on target-a, target-b", readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, time.Minute, 100*time.Millisecond)
	t.Logf("target-a's kubeconfig rotated back to a good one: Ready %v after the update", time.Since(rotated).Round(10*time.Millisecond))
	after := clusterStatuses(t, hub, "hello")
	assert.Equal(t, before["target-a"].Revision, after["target-a"].Revision, "no new revision")
	assert.Equal(t, before["target-a"].Fingerprint, after["target-a"].Fingerprint)
	res = targetA.Helm(ctx, "history", "hello", "-n", placedNamespace, "--max", "1", "-o", "json")
	require.NoError(t, res.Err, res.Stderr)
	assert.Contains(t, res.Stdout, `"revision":4`)
	assertOnTargets(t, targets, "hello", map[string]string{"target-a": "four", "target-b": "four"})

	// Deletion uninstalls from both before the composition goes.
	res = hub.Kubectl(ctx, "", "delete", placedResource, "hello", "-n", placedNamespace, "--wait", "--timeout", "2m")
	require.NoError(t, res.Err, res.Stderr)
	assertOnTargets(t, targets, "hello", nil)
	for name, target := range targets {
		assert.Error(t, target.Helm(ctx, "status", "hello", "-n", placedNamespace).Err, "release hello is left on %s", name)
	}

	// A target that does not answer holds a deletion; deleting its Secret lets the
	// composition go, and its release is left behind with an event that says so.
	res = hub.Kubectl(ctx, placedApp("stray", "env=prod", "bye"), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release stray is installed on target-a, target-b", readyCondition(c, hub, placedResource, placedNamespace, "stray"))
	}, 2*time.Minute, 100*time.Millisecond)
	restartable.stop(syscall.SIGTERM)
	res = hub.Kubectl(ctx, "", "delete", placedResource, "stray", "-n", placedNamespace, "--wait=false")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, readyCondition(c, hub, placedResource, placedNamespace, "stray"), "False Uninstalling cluster target-b: ")
	}, 2*time.Minute, 100*time.Millisecond)
	assertOnTargets(t, map[string]*controlplane.ControlPlane{"target-a": targetA}, "stray", nil)
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(placedGVK)
	require.NoError(t, hub.Client.Get(ctx, client.ObjectKey{Namespace: placedNamespace, Name: "stray"}, obj), "the deletion is held")
	require.NoError(t, hub.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "compositor-system", Name: "target-b"}}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, apierrors.IsNotFound(hub.Client.Get(ctx, client.ObjectKey{Namespace: placedNamespace, Name: "stray"}, obj)))
	}, 2*time.Minute, 100*time.Millisecond)
	assert.Contains(t, eventsOf(t, hub, "stray", compositionctl.EventReleaseLeftBehind),
		"release shop/stray is left on cluster target-b: the cluster is no longer registered (its kubeconfig Secret is gone), so nothing can uninstall it")
	require.NoError(t, restartable.start())
	assert.Equal(t, "bye", greeting(t, targetB, "stray"), "left behind on target-b")
}

// updateEverywhere applies composition name, placed on env=prod, with greeting, and
// waits until every target has it and the composition is Ready.
func updateEverywhere(t *testing.T, hub *controlplane.ControlPlane, targets map[string]*controlplane.ControlPlane, name, want string) {
	t.Helper()
	res := hub.Kubectl(context.Background(), placedApp(name, "env=prod", want), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for cluster, target := range targets {
			assert.Equal(c, want, greeting(c, target, name), cluster)
		}
		assert.Contains(c, readyCondition(c, hub, placedResource, placedNamespace, name), "True Available")
	}, 2*time.Minute, 100*time.Millisecond)
}

// withToken is kubeconfig with its credentials replaced by token.
func withToken(t *testing.T, kubeconfig []byte, token string) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	require.NoError(t, err)
	for _, auth := range cfg.AuthInfos {
		auth.ClientCertificate, auth.ClientKey, auth.ClientCertificateData, auth.ClientKeyData = "", "", nil, nil
		auth.Token = token
	}
	out, err := clientcmd.Write(*cfg)
	require.NoError(t, err)
	return out
}

// kubeconfigSecret registers target as cluster name, the multicluster-runtime way, open
// to the compositions of placedNamespace.
func kubeconfigSecret(t *testing.T, name string, target *controlplane.ControlPlane, labels map[string]string) *corev1.Secret {
	t.Helper()
	all := map[string]string{multicluster.SecretLabel: "true"}
	for k, v := range labels {
		all[k] = v
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "compositor-system", Name: name, Labels: all,
			Annotations: map[string]string{vocab.AnnotationNamespaceSelector: "kubernetes.io/metadata.name=" + placedNamespace}},
		Data: map[string][]byte{multicluster.SecretKey: kubeconfigOf(t, target)},
	}
}

// assertOnTargets checks the release's ConfigMap on every target: the greeting want
// names for it, absent on the others.
func assertOnTargets(t *testing.T, targets map[string]*controlplane.ControlPlane, release string, want map[string]string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for name, target := range targets {
			cm := &corev1.ConfigMap{}
			err := target.Client.Get(context.Background(), client.ObjectKey{Namespace: placedNamespace, Name: release + "-data"}, cm)
			if greeting, ok := want[name]; ok {
				if assert.NoError(c, err, name) {
					assert.Equal(c, greeting, cm.Data["greeting"], name)
				}
			} else {
				assert.True(c, apierrors.IsNotFound(err), "%s has %s-data (err %v)", name, release, err)
			}
		}
	}, time.Minute, 100*time.Millisecond)
}

func greeting(t assert.TestingT, target *controlplane.ControlPlane, release string) string {
	cm := &corev1.ConfigMap{}
	if !assert.NoError(t, target.Client.Get(context.Background(), client.ObjectKey{Namespace: placedNamespace, Name: release + "-data"}, cm)) {
		return ""
	}
	return cm.Data["greeting"]
}

func clusterStatuses(t *testing.T, hub *controlplane.ControlPlane, name string) map[string]compositionctl.ClusterStatus {
	t.Helper()
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(placedGVK)
	require.NoError(t, hub.Client.Get(context.Background(), client.ObjectKey{Namespace: placedNamespace, Name: name}, obj))
	return compositionctl.Clusters(obj)
}

// eventsOf are the notes of the events of one reason about a composition.
func eventsOf(t assert.TestingT, hub *controlplane.ControlPlane, name, reason string) []string {
	list := &corev1.EventList{}
	if !assert.NoError(t, hub.Client.List(context.Background(), list, client.InNamespace(placedNamespace))) {
		return nil
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// Issue 18, target RBAC: the identity of a target's kubeconfig needs only what the chart
// creates there. Compositor asks the target (SelfSubjectAccessReview) before installing
// and reports what is missing; nothing is installed until it is granted.
func TestPlacementChecksTheTargetsRights(t *testing.T) {
	hub, target := controlplane.Start(t), controlplane.Start(t)
	startCompositor(t, hub, func(o *app.ServeOptions) {
		o.Controllers = app.ControllersInProcess
		o.Multicluster = true
	})
	ctx := context.Background()
	secret := kubeconfigSecret(t, "narrow", target, map[string]string{"env": "prod"})
	secret.Data[multicluster.SecretKey] = target.UserKubeconfig(t, "deliverer")
	delete(secret.Annotations, vocab.AnnotationNamespaceSelector)
	require.NoError(t, hub.Client.Create(ctx, secret))
	applyDefinition(t, hub, serveCharts(t, placedChart).URL, placedNamespace, "placed-app", "0.1.0")
	nothingInstalled := func() {
		t.Helper()
		assertOnTargets(t, map[string]*controlplane.ControlPlane{"narrow": target}, "hello", nil)
		assert.Error(t, target.Helm(ctx, "status", "hello", "-n", placedNamespace).Err, "a release was recorded")
	}

	// A cluster whose Secret does not open it to the namespace takes nothing from it,
	// whatever the composition's placement says.
	res := hub.Kubectl(ctx, placedApp("hello", "env=prod", "one"), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, `False NoClusterSelected placement "env=prod" selects no registered cluster open to namespace shop; `+
			`placement "env=prod" also matches narrow, not open to namespace shop (their kubeconfig Secret's compositor.dev/namespace-selector)`,
			readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, time.Minute, 100*time.Millisecond)
	nothingInstalled()
	res = hub.Kubectl(ctx, "", "annotate", "secret", "narrow", "-n", "compositor-system", vocab.AnnotationNamespaceSelector+"=kubernetes.io/metadata.name in (shop,other)")
	require.NoError(t, res.Err, res.Stderr)

	// Open, with no rights at all: every one the install needs is missing.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "False TargetForbidden cluster narrow: nothing was installed: the identity of the kubeconfig may not "+
			"get secrets in namespace shop, list secrets in namespace shop, create secrets in namespace shop, update secrets in namespace shop, delete secrets in namespace shop, "+
			"get configmaps in namespace shop, create configmaps in namespace shop, patch configmaps in namespace shop, delete configmaps in namespace shop; "+
			"grant it that and the install is tried again within 1m0s",
			readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, time.Minute, 100*time.Millisecond)
	nothingInstalled()

	// May read namespaces: the namespace is not there, and it may not create it.
	res = target.Kubectl(ctx, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: namespace-reader}
rules: [{apiGroups: [""], resources: [namespaces], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: deliverer-reads-namespaces}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: namespace-reader}
subjects: [{kind: User, name: deliverer}]
`, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	res = hub.Kubectl(ctx, "", "annotate", placedResource, "hello", "-n", placedNamespace, "nudge=0")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "False TargetForbidden cluster narrow: nothing was installed: namespace shop does not exist there and the identity of the kubeconfig may not create it: create it, or grant create namespaces",
			readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, time.Minute, 100*time.Millisecond)
	nothingInstalled()

	// The namespace is there, with a Role that lets the identity do all but delete
	// ConfigMaps: what is missing is named, and still nothing is installed.
	res = target.Kubectl(ctx, `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: deliverer, namespace: shop}
rules:
- {apiGroups: [""], resources: [secrets], verbs: [get, list, create, update, delete]}
- {apiGroups: [""], resources: [configmaps], verbs: [get, create, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: deliverer, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: deliverer}
subjects: [{kind: User, name: deliverer}]
`, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	res = hub.Kubectl(ctx, "", "annotate", placedResource, "hello", "-n", placedNamespace, "nudge=1", "--overwrite")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "False TargetForbidden cluster narrow: nothing was installed: the identity of the kubeconfig may not delete configmaps in namespace shop; grant it that and the install is tried again within 1m0s",
			readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, time.Minute, 100*time.Millisecond)
	nothingInstalled()
	assert.Contains(t, warnings(t, hub, placedNamespace, "hello")[compositionctl.ReasonTargetForbidden], "may not delete configmaps in namespace shop")

	// Granted: installed.
	res = target.Kubectl(ctx, "", "patch", "role", "deliverer", "-n", "shop", "--type=json",
		`-p=[{"op":"add","path":"/rules/1/verbs/-","value":"delete"}]`)
	require.NoError(t, res.Err, res.Stderr)
	res = hub.Kubectl(ctx, "", "annotate", placedResource, "hello", "-n", placedNamespace, "nudge=2", "--overwrite")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release hello is installed on narrow", readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, time.Minute, 100*time.Millisecond)
	assertOnTargets(t, map[string]*controlplane.ControlPlane{"narrow": target}, "hello", map[string]string{"narrow": "one"})

	// A typo in the Secret's namespace selector does not close the cluster, which would
	// uninstall every release there: the release stays, the composition says what is
	// wrong, and the fix brings it back.
	res = hub.Kubectl(ctx, "", "annotate", "--overwrite", "secret", "narrow", "-n", "compositor-system", vocab.AnnotationNamespaceSelector+"=kubernetes.io/metadata.name in (shop")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, `False ClusterUnavailable cluster narrow: the cluster cannot be used: Secret compositor-system/narrow: annotation compositor.dev/namespace-selector: `+
			`"kubernetes.io/metadata.name in (shop" is not a valid label selector: unable to parse requirement: found '', expected: ',' or ')'`,
			readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, time.Minute, 100*time.Millisecond)
	assertOnTargets(t, map[string]*controlplane.ControlPlane{"narrow": target}, "hello", map[string]string{"narrow": "one"})
	require.NoError(t, target.Helm(ctx, "status", "hello", "-n", placedNamespace).Err)
	res = hub.Kubectl(ctx, "", "annotate", "--overwrite", "secret", "narrow", "-n", "compositor-system", vocab.AnnotationNamespaceSelector+"=kubernetes.io/metadata.name in (shop)")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release hello is installed on narrow", readyCondition(c, hub, placedResource, placedNamespace, "hello"))
	}, time.Minute, 100*time.Millisecond)

	// And uninstalled with the same rights.
	res = hub.Kubectl(ctx, "", "delete", placedResource, "hello", "-n", placedNamespace, "--wait", "--timeout", "1m")
	require.NoError(t, res.Err, res.Stderr)
	nothingInstalled()
}
