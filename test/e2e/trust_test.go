package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	releasecommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	compositionctl "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// The tenant of the trust tests may write compositions, ConfigMaps and Secrets in the
// fireworks namespace, and nothing else: the Role of issue 25.
const (
	trustNamespace = "fireworksapp-system"
	tenant         = "tenant-a"
	fireworks      = "fireworksapps.v1-1-5.composition.krateo.io"
)

// tenantRole lets tenant write compositions, ConfigMaps and Secrets in trustNamespace.
func tenantRole(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	const role = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tenant, namespace: fireworksapp-system}
rules:
- apiGroups: [composition.krateo.io]
  resources: ["*"]
  verbs: ["*"]
- apiGroups: [""]
  resources: [configmaps, secrets]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant, namespace: fireworksapp-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: tenant-a}]
`
	res := cp.Kubectl(context.Background(), role, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
}

// asTenant is a client acting as tenant.
func asTenant(t *testing.T, cp *controlplane.ControlPlane) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: tenant}
	c, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	return c
}

// Issue 25, item 1: a value that turns a rendered Deployment into a document with an
// `items` list makes Helm's kube client create the list's objects, not the Deployment.
// Whatever field carries it and whatever kind it smuggles, nothing of it is created:
// admission or the install gate refuses it, and the user is told why.
func TestInjectedListsCreateNothing(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	readyDefinition(t, cp)
	tenantRole(t, cp)
	ctx := context.Background()

	for _, tc := range []struct {
		name, field, smuggledName, smuggled string
		obj                                 client.Object
	}{
		{"via-repository", "repository", "np-repository", `{apiVersion: v1, kind: Service, metadata: {name: np-repository}, spec: {type: NodePort, ports: [{port: 80}]}}`, &corev1.Service{}},
		{"via-tag", "tag", "np-tag", `{apiVersion: apps/v1, kind: Deployment, metadata: {name: np-tag}, spec: {selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, spec: {hostPID: true, containers: [{name: c, image: docker.io/library/busybox, securityContext: {privileged: true}}]}}}}`, &appsv1.Deployment{}},
		{"token", "repository", "np-token", `{apiVersion: v1, kind: Secret, metadata: {name: np-token, annotations: {kubernetes.io/service-account.name: default}}, type: kubernetes.io/service-account-token}`, &corev1.Secret{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value := fmt.Sprintf("registry.example.com/nginx\"\nitems:\n- %s\nzz: | #", tc.smuggled)
			image := map[string]any{"repository": "nginx", tc.field: value}
			spec, err := json.Marshal(map[string]any{"image": image})
			require.NoError(t, err)
			manifest := fmt.Sprintf("apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", tc.name, trustNamespace, spec)
			res := cp.Kubectl(ctx, manifest, "apply", "--as="+tenant, "-f", "-")
			if res.Err != nil {
				// Refused at admission: the user sees why at kubectl apply.
				t.Logf("refused at admission: %s", res.Stderr)
				assert.Contains(t, res.Stderr, "items", res.Stderr)
			} else {
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					got := readyCondition(c, cp, fireworks, trustNamespace, tc.name)
					assert.True(c, strings.HasPrefix(got, "False "), got)
					assert.Contains(c, got, "items", got)
				}, 2*time.Minute, 250*time.Millisecond)
				t.Logf("refused by the install gate: %s", readyCondition(t, cp, fireworks, trustNamespace, tc.name))
			}
			absent(t, cp, tc.obj, trustNamespace, tc.smuggledName)
			absent(t, cp, &appsv1.Deployment{}, trustNamespace, tc.name+"-fireworks-app")
		})
	}
	// With a rendered policy in force, admission renders the chart through the same
	// parse, and kubectl apply itself says why.
	applyPolicies(t, cp, noNodePorts)
	value := "nginx\"\nitems:\n- {apiVersion: v1, kind: Service, metadata: {name: np-admission}, spec: {type: NodePort, ports: [{port: 80}]}}\nzz: | #"
	manifest := fmt.Sprintf("apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: admission, namespace: %s}\nspec: {image: {repository: %q}}\n", trustNamespace, value)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, manifest, "apply", "--as="+tenant, "-f", "-")
		if assert.Error(c, res.Err) {
			assert.Contains(c, res.Stderr, "is a Deployment with an items list")
		}
	}, time.Minute, 500*time.Millisecond)
	absent(t, cp, &corev1.Service{}, trustNamespace, "np-admission")
}

// noNodePorts is a rendered policy forbidding NodePort Services.
const noNodePorts = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: no-node-ports
spec:
  target: rendered
  match:
    kinds: [{group: composition.krateo.io, kind: FireworksApp}]
  rego: |
    package compositor.nonodeports

    deny contains sprintf("Service %s is a NodePort", [obj.metadata.name]) if {
      some obj in input.rendered
      obj.kind == "Service"
      obj.spec.type == "NodePort"
    }
`

// record is the latest Helm release record of release in trustNamespace, and the
// release it holds.
func record(t *testing.T, cp *controlplane.ControlPlane, name string) (*corev1.Secret, *release.Release) {
	t.Helper()
	list := &corev1.SecretList{}
	require.NoError(t, cp.Client.List(context.Background(), list, client.InNamespace(trustNamespace), client.MatchingLabels{"owner": "helm", "name": name}))
	require.NotEmpty(t, list.Items)
	latest := &list.Items[0]
	for i := range list.Items {
		a, _ := strconv.Atoi(list.Items[i].Labels["version"])
		b, _ := strconv.Atoi(latest.Labels["version"])
		if a > b {
			latest = &list.Items[i]
		}
	}
	raw, err := base64.StdEncoding.DecodeString(string(latest.Data["release"]))
	require.NoError(t, err)
	r, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err)
	rel := &release.Release{}
	require.NoError(t, json.NewDecoder(r).Decode(rel))
	return latest, rel
}

// rewrite stores rel into secret as Helm would, as the tenant.
func rewrite(t *testing.T, tenantClient client.Client, secret *corev1.Secret, rel *release.Release) {
	t.Helper()
	raw, err := json.Marshal(rel)
	require.NoError(t, err)
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, err = w.Write(raw)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	secret.Data["release"] = []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
	require.NoError(t, tenantClient.Update(context.Background(), secret))
}

// installed applies a fireworks composition as the tenant and waits until it is Ready.
func installed(t *testing.T, cp *controlplane.ControlPlane, name string, replicas int) {
	t.Helper()
	res := cp.Kubectl(context.Background(), strings.Replace(fireworksApp(name, replicas), "fireworksapp-system", trustNamespace, 1), "apply", "--as="+tenant, "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release "+name+" is installed", readyCondition(c, cp, fireworks, trustNamespace, name))
	}, 2*time.Minute, 250*time.Millisecond)
}

// hook is a Helm hook creating a NodePort Service named name on event.
func hook(name string, event release.HookEvent) *release.Hook {
	return &release.Hook{
		Name: name, Kind: "Service", Path: "fireworks-app/templates/evil.yaml", Events: []release.HookEvent{event},
		Manifest: "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\n  annotations: {helm.sh/hook: " + string(event) + "}\nspec: {type: NodePort, ports: [{port: 80}]}\n",
	}
}

// tampered waits until the composition says its release record was tampered with.
func tampered(t *testing.T, cp *controlplane.ControlPlane, name string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := readyCondition(c, cp, fireworks, trustNamespace, name)
		assert.Contains(c, got, "False "+compositionctl.ReasonReleaseTampered+" ")
		assert.Contains(c, got, "nothing was installed or deleted")
	}, 2*time.Minute, 250*time.Millisecond)
	assert.Contains(t, warnings(t, cp, trustNamespace, name)[compositionctl.ReasonReleaseTampered], "Helm release record")
}

// Issue 25, item 2: the tenant may write its Helm release records; the controller acts
// on none it did not write. A hook added to a record runs neither on delete nor on the
// next update, a record marked failed does not make the next update run its hooks, and
// an object added to the stored manifest is not deleted with the composition.
func TestTamperedReleaseRecordsAreNotActedOn(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	readyDefinition(t, cp)
	tenantRole(t, cp)
	ctx := context.Background()
	tenantClient := asTenant(t, cp)

	t.Run("a pre-delete hook added", func(t *testing.T) {
		installed(t, cp, "predelete", 1)
		secret, rel := record(t, cp, "predelete")
		rel.Hooks = append(rel.Hooks, hook("evil-predelete", release.HookPreDelete))
		rewrite(t, tenantClient, secret, rel)
		res := cp.Kubectl(ctx, "", "delete", fireworks, "predelete", "-n", trustNamespace, "--as="+tenant, "--wait=false")
		require.NoError(t, res.Err, res.Stderr)
		tampered(t, cp, "predelete")
		absent(t, cp, &corev1.Service{}, trustNamespace, "evil-predelete")
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: trustNamespace, Name: "predelete-fireworks-app"}, &appsv1.Deployment{}), "nothing was uninstalled")
	})
	t.Run("revision marked failed with a pre-upgrade hook", func(t *testing.T) {
		installed(t, cp, "failed", 1)
		secret, rel := record(t, cp, "failed")
		rel.Info.Status = releasecommon.StatusFailed
		rel.Hooks = append(rel.Hooks, hook("evil-preupgrade", release.HookPreUpgrade), hook("evil-preinstall", release.HookPreInstall))
		rewrite(t, tenantClient, secret, rel)
		res := cp.Kubectl(ctx, "", "patch", fireworks, "failed", "-n", trustNamespace, "--as="+tenant, "--type=merge", "-p", `{"spec":{"replicaCount":2}}`)
		require.NoError(t, res.Err, res.Stderr)
		tampered(t, cp, "failed")
		absent(t, cp, &corev1.Service{}, trustNamespace, "evil-preupgrade")
		absent(t, cp, &corev1.Service{}, trustNamespace, "evil-preinstall")
		deployment := &appsv1.Deployment{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: trustNamespace, Name: "failed-fireworks-app"}, deployment))
		assert.Equal(t, int32(1), *deployment.Spec.Replicas, "nothing was upgraded")
	})
	t.Run("a platform object added to the manifest", func(t *testing.T) {
		require.NoError(t, cp.Client.Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: trustNamespace, Name: "platform"},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "platform"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "platform"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "platform"}}},
				},
			},
		}))
		installed(t, cp, "manifest", 1)
		secret, rel := record(t, cp, "manifest")
		rel.Manifest += "\n---\n# Source: fireworks-app/templates/platform.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: platform}\n"
		rewrite(t, tenantClient, secret, rel)
		res := cp.Kubectl(ctx, "", "delete", fireworks, "manifest", "-n", trustNamespace, "--as="+tenant, "--wait=false")
		require.NoError(t, res.Err, res.Stderr)
		tampered(t, cp, "manifest")
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: trustNamespace, Name: "platform"}, &appsv1.Deployment{}), "the platform Deployment is still there")
	})
	t.Run("labels of the record", func(t *testing.T) {
		installed(t, cp, "labels", 1)
		secret, _ := record(t, cp, "labels")
		secret.Labels[vocab.LabelFingerprint] = "0"
		require.NoError(t, tenantClient.Update(ctx, secret))
		res := cp.Kubectl(ctx, "", "annotate", fireworks, "labels", "-n", trustNamespace, "--as="+tenant, "touch=1")
		require.NoError(t, res.Err, res.Stderr)
		tampered(t, cp, "labels")
	})
}

// Issue 25, item 4: status.fingerprint tells users what is installed; it decides
// nothing. Written (here by an administrator, as the tenant may no longer write
// status) with the fingerprint of the values about to be set, the next spec change is
// still installed.
func TestStatusFingerprintDecidesNothing(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	readyDefinition(t, cp)
	tenantRole(t, cp)
	ctx := context.Background()
	installed(t, cp, "fingerprint", 1)

	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("composition.krateo.io/v1-1-5")
	obj.SetKind("FireworksApp")
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: trustNamespace, Name: "fingerprint"}, obj))
	digest, _, _ := unstructured.NestedString(obj.Object, "status", "digest")
	require.NotEmpty(t, digest)
	next, _, _ := unstructured.NestedMap(obj.Object, "spec")
	next["replicaCount"] = int64(3)
	fingerprint, err := compositionctl.Fingerprint(digest, next)
	require.NoError(t, err)
	status := map[string]any{"status": map[string]any{"fingerprint": fingerprint}}
	patch, err := json.Marshal(status)
	require.NoError(t, err)
	require.NoError(t, cp.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)))

	res := cp.Kubectl(ctx, "", "patch", fireworks, "fingerprint", "-n", trustNamespace, "--as="+tenant, "--type=merge", "-p", `{"spec":{"replicaCount":3}}`)
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		deployment := &appsv1.Deployment{}
		if assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: trustNamespace, Name: "fingerprint-fireworks-app"}, deployment)) {
			assert.Equal(c, int32(3), *deployment.Spec.Replicas)
		}
	}, 2*time.Minute, 250*time.Millisecond)
}

// rss is this process's resident memory, in bytes (Compositor runs in it).
func rss(t *testing.T) int64 {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(status), "\n") {
		if value, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// Issue 25, item 3: ten release records of about 1 MB that each inflate to about
// 1 GB, written by the tenant, cost Compositor nothing: a record is inflated only
// once its seal proves it Compositor's. The figure is logged.
func TestGzipBombRecordsCostNothing(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	readyDefinition(t, cp)
	tenantRole(t, cp)
	ctx := context.Background()
	tenantClient := asTenant(t, cp)
	installed(t, cp, "bombed", 1)

	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	require.NoError(t, err)
	zeros := make([]byte, 1<<20)
	for buf.Len() < 750<<10 { // base64 makes it about 1 MB
		_, err := w.Write(zeros)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	bomb := []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
	// The records claim the composition, as Compositor's own would.
	uid := cp.Kubectl(ctx, "", "get", fireworks, "bombed", "-n", trustNamespace, "-o", "jsonpath={.metadata.uid}")
	require.NoError(t, uid.Err, uid.Stderr)
	runtime.GC()
	debug.FreeOSMemory()
	before := rss(t)
	for i := range 10 {
		version := strconv.Itoa(100 + i)
		require.NoError(t, tenantClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: trustNamespace, Name: "sh.helm.release.v1.bombed.v" + version,
				Labels: map[string]string{"owner": "helm", "name": "bombed", "version": version, "status": "deployed", vocab.LabelCompositionUID: uid.Stdout}},
			Type: "helm.sh/release.v1",
			Data: map[string][]byte{"release": bomb},
		}))
	}
	res := cp.Kubectl(ctx, "", "annotate", fireworks, "bombed", "-n", trustNamespace, "--as="+tenant, "touch=1")
	require.NoError(t, res.Err, res.Stderr)
	tampered(t, cp, "bombed")
	after := rss(t)
	t.Logf("RSS with ten 1 MB gzip-bomb release records read: %d MiB before, %d MiB after (%+d MiB)", before>>20, after>>20, (after-before)>>20)
	assert.Less(t, after-before, int64(200<<20), "the records were not inflated (inflated, they would take about 10 GB)")
	for i := range 10 {
		err := cp.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: trustNamespace, Name: "sh.helm.release.v1.bombed.v" + strconv.Itoa(100+i)}})
		assert.True(t, err == nil || apierrors.IsNotFound(err))
	}
}
