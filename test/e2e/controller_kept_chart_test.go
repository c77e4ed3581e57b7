package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/generators/rbac"
	compositionctl "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/reconciler/constraints"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
)

const (
	keptNamespace  = "kept"
	keptDefinition = "kept-app"
	// keptIdentities is Compositor's namespace (startCompositor's), where the
	// generated ServiceAccount and controller Deployment live.
	keptIdentities = "compositor-system"
)

var (
	keptServiceAccount = rbac.ServiceAccountName(keptNamespace, "keptapps", "v0-1-0")
	keptUser           = "system:serviceaccount:" + keptIdentities + ":" + keptServiceAccount
)

var keptChart = &chart.Chart{
	Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: keptDefinition, Version: "0.1.0"},
	Values:   map[string]any{"value": "one"},
	Schema:   []byte(`{"type":"object","properties":{"value":{"type":"string"}},"additionalProperties":false}`),
	Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\ndata: {value: '{{ .Values.value }}'}\n")}},
}

// judgedPolicy refuses, on create, the ConfigMap of a KeptApp labelled judge=yes.
const judgedPolicy = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: no-judged-configmaps
spec:
  target: rendered
  match:
    kinds: [{group: composition.krateo.io, kind: KeptApp}]
    operations: [CREATE]
    labelSelector: {matchLabels: {judge: "yes"}}
  rego: |
    package compositor.nojudged

    deny contains sprintf("ConfigMap %s may not be installed", [obj.metadata.name]) if {
      some obj in input.rendered
      obj.kind == "ConfigMap"
    }
`

// keptCreatesTemplate refuses the creation of the objects its constraints select.
const keptCreatesTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: e2ekeptcreates
spec:
  crd:
    spec:
      names:
        kind: E2EKeptCreates
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package e2ekeptcreates

        violation[{"msg": msg}] {
          input.review.operation == "CREATE"
          msg := sprintf("%v may not be created", [input.review.name])
        }
`

const keptCreatesConstraint = `apiVersion: constraints.gatekeeper.sh/v1beta1
kind: E2EKeptCreates
metadata:
  name: no-gk-judged
spec:
  match:
    kinds: [{apiGroups: [""], kinds: [ConfigMap]}]
    name: gk-judged
`

// readyReason is the reason of obj's Ready condition.
func readyReason(obj unstructured.Unstructured) string {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		if c, ok := c.(map[string]any); ok && c["type"] == "Ready" {
			reason, _ := c["reason"].(string)
			return reason
		}
	}
	return ""
}

func keptApp(name string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("composition.krateo.io/v0-1-0")
	obj.SetKind("KeptApp")
	obj.SetNamespace(keptNamespace)
	obj.SetName(name)
	obj.Object["spec"] = map[string]any{"value": "two"}
	return obj
}

// publish packages ch into dir and indexes dir as a Helm repository.
func publish(t *testing.T, dir string, ch *chart.Chart) {
	t.Helper()
	_, err := chartutil.Save(ch, dir)
	require.NoError(t, err)
	index, err := repo.IndexDirectory(dir, "")
	require.NoError(t, err)
	require.NoError(t, index.WriteFile(filepath.Join(dir, "index.yaml"), 0o644))
}

// impersonatingKubeconfig writes a kubeconfig that acts, on cp, as user in groups.
func impersonatingKubeconfig(t *testing.T, cp *controlplane.ControlPlane, user string, groups ...string) string {
	t.Helper()
	config, err := clientcmd.LoadFromFile(cp.Kubeconfig)
	require.NoError(t, err)
	for _, auth := range config.AuthInfos {
		auth.Impersonate, auth.ImpersonateGroups = user, groups
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*config, path))
	return path
}

// Issue 16, deployments mode: the generated controller of a version, restarted with an
// empty chart cache while its chart source is down, installs a new composition from
// the archive its definition kept in Compositor's namespace. It runs as the binary
// would in its pod: the generated Deployment's arguments, acting as the generated
// ServiceAccount, so that the generated RBAC is what lets it read that archive, and
// nothing else there.
func TestGeneratedControllerInstallsFromTheKeptChart(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	startCompositor(t, cp, func(o *app.ServeOptions) { o.ChartCacheDir = t.TempDir() })
	const archives = "compositor-system" // startCompositor's namespace
	dir := t.TempDir()
	publish(t, dir, keptChart)
	source := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
	applyDefinition(t, cp, source.URL, keptNamespace, keptDefinition, "0.1.0")

	def := &corev1alpha1.CompositionDefinition{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: keptNamespace, Name: keptDefinition}, def))
	require.NotEmpty(t, def.Status.Digest)
	archive := chartstore.SecretName(def.Status.Digest)
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: archive}, &corev1.Secret{}), "the archive is kept")

	// The generated RBAC: get on that one Secret, in Compositor's namespace.
	roleName := rbac.NamesFor(keptNamespace, "keptapps", "v0-1-0").ChartArchive
	archiveRule := func(archive string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{archive}}}
	}
	role := &rbacv1.Role{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: roleName}, role))
	assert.Equal(t, archiveRule(archive), role.Rules)

	// New content for the version, accepted by a person: the Role moves to its archive.
	changed := *keptChart
	changed.Values = map[string]any{"value": "changed"}
	publish(t, dir, &changed)
	served, err := os.ReadFile(filepath.Join(dir, keptDefinition+"-0.1.0.tgz"))
	require.NoError(t, err)
	sum := sha256.Sum256(served)
	accepted := "sha256:" + hex.EncodeToString(sum[:])
	require.NotEqual(t, def.Status.Digest, accepted)
	res := cp.Kubectl(ctx, "", "annotate", "compositiondefinition", keptDefinition, "-n", keptNamespace, vocab.AnnotationAcceptChartDigest+"="+accepted)
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: keptNamespace, Name: keptDefinition}, def))
		assert.Equal(c, accepted, def.Status.Digest)
		require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: roleName}, role))
		assert.Equal(c, archiveRule(chartstore.SecretName(accepted)), role.Rules, "only the new archive")
	}, time.Minute, 250*time.Millisecond)
	archive = chartstore.SecretName(accepted)
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: archive}, &corev1.Secret{}), "the new archive is kept")
	binding := &rbacv1.RoleBinding{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: roleName}, binding))
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: keptServiceAccount, Namespace: keptIdentities}}, binding.Subjects)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: roleName}, binding.RoleRef)

	// And get on its definition's key, which seals Helm's release records, and which
	// compositor serve keeps in the same namespace: the controller acts on no release
	// without it. Never the master key.
	sealRoleName := rbac.NamesFor(keptNamespace, "keptapps", "v0-1-0").ReleaseSeal
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: sealRoleName}, role))
	keyName := compositionctl.KeySecretName(def.UID)
	boundList := rbac.NamesFor(keptNamespace, "keptapps", "v0-1-0").BoundNamespaces
	assert.Equal(t, append(archiveRule(keyName), rbacv1.PolicyRule{
		APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"},
		ResourceNames: []string{rbac.ConstraintsConfigMap},
	}, rbacv1.PolicyRule{
		APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"},
		ResourceNames: []string{boundList},
	}), role.Rules, "the seal, the Gatekeeper constraints serve enforces, and the namespaces where it is bound")
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: sealRoleName}, binding))
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: keptServiceAccount, Namespace: keptIdentities}}, binding.Subjects)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sealRoleName}, binding.RoleRef)

	deployment := &appsv1.Deployment{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: keptIdentities, Name: keptServiceAccount}, deployment))
	args := deployment.Spec.Template.Spec.Containers[0].Args
	i := slices.Index(args, "--chart-archive-namespace")
	require.GreaterOrEqual(t, i, 0, "the generated controller reads the kept archives: %v", args)
	require.Equal(t, archives, args[i+1])
	i = slices.Index(args, "--release-seal-namespace")
	require.GreaterOrEqual(t, i, 0, "the generated controller reads the release seal: %v", args)
	require.Equal(t, archives, args[i+1])
	assert.Len(t, deployment.Spec.Template.Spec.Volumes, 1, "no Secret mounted: the controller reads the seal with its client")

	// The chart source goes down; the controller starts with nothing of the chart on
	// its disk or in memory, as the generated pod would, under the generated identity.
	source.Close()
	kubeconfig := impersonatingKubeconfig(t, cp, keptUser,
		"system:serviceaccounts", "system:serviceaccounts:"+keptIdentities, "system:authenticated")
	logPath := filepath.Join(t.TempDir(), "controller.log")
	var log *os.File
	log, err = os.Create(logPath)
	require.NoError(t, err)
	cmdArgs := append(slices.Clone(args),
		// In the pod: the namespace of its ServiceAccount, probes and metrics on their ports.
		"--namespace", keptNamespace, "--health-probe-bind-address", "0", "--metrics-bind-address", "0",
		"--chart-cache-dir", t.TempDir())
	cmd := exec.Command(buildCompositor(t), cmdArgs...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			lines := strings.Split(string(data), "\n")
			t.Logf("last lines of compositor controller:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})

	require.NoError(t, cp.Client.Create(ctx, keptApp("after-outage")))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		select {
		case <-exited:
			c.Errorf("compositor controller stopped")
			return
		default:
		}
		obj := keptApp("after-outage")
		require.NoError(c, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		assert.True(c, isReady(*obj), "Ready: %v", obj.Object["status"])
		cm := &corev1.ConfigMap{}
		if assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: keptNamespace, Name: "after-outage"}, cm)) {
			assert.Equal(c, "two", cm.Data["value"])
		}
	}, 2*time.Minute, 250*time.Millisecond, "installed from the kept chart, the chart source down")

	t.Run("it watches its compositions only where it is bound, and where it is bound later", func(t *testing.T) {
		// Issue 46: no read of compositions across namespaces. Its informer lists and
		// watches the namespaces Compositor lists as bound, and starts again when one
		// more is bound.
		canI := func(verb, namespace string) bool {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: keptUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + keptIdentities, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: "composition.krateo.io", Resource: "keptapps", Namespace: namespace},
			}}
			require.NoError(t, cp.Client.Create(ctx, review))
			return review.Status.Allowed
		}
		const later = "kept-later"
		for _, verb := range []string{"list", "watch", "get"} {
			assert.False(t, canI(verb, ""), "%s keptapps in every namespace", verb)
			assert.False(t, canI(verb, later), "%s keptapps in %s, where it has no composition", verb, later)
			assert.True(t, canI(verb, keptNamespace), "%s keptapps in %s, where it is bound", verb, keptNamespace)
		}
		list := &corev1.ConfigMap{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: boundList}, list))
		assert.Equal(t, map[string]string{keptNamespace: "bound"}, list.Data)

		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: later}}))
		elsewhere := keptApp("bound-later")
		elsewhere.SetNamespace(later)
		require.NoError(t, cp.Client.Create(ctx, elsewhere))
		created := time.Now()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			obj := keptApp("bound-later")
			obj.SetNamespace(later)
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
			assert.True(c, isReady(*obj), "Ready: %v", obj.Object["status"])
			assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: later, Name: "bound-later"}, &corev1.ConfigMap{}))
		}, 2*time.Minute, 250*time.Millisecond, "installed in a namespace bound after the controller started")
		t.Logf("a composition in a newly bound namespace was Ready %s after it was created (bound, listed, the controller's manager made again, installed)", time.Since(created).Round(10*time.Millisecond))
		assert.True(t, canI("watch", later))
		assert.False(t, canI("watch", ""))

		require.NoError(t, cp.Client.Delete(ctx, elsewhere))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: boundList}, list))
			assert.Equal(c, map[string]string{keptNamespace: "bound"}, list.Data)
			assert.False(c, canI("watch", later), "unbound once its last composition is gone")
		}, 2*time.Minute, 250*time.Millisecond)
	})

	t.Run("what the generated controller installs is judged with the rendered policies", func(t *testing.T) {
		// The policy judges creates of compositions labelled judge=yes: a composition
		// written without the label, then given it by an update, passes admission
		// unjudged, and only the controller's install gate can refuse it.
		res := cp.Kubectl(ctx, judgedPolicy, "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		probe := keptApp("judged-probe")
		probe.SetLabels(map[string]string{"judge": "yes"})
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			err := cp.Client.Create(ctx, probe.DeepCopy())
			if assert.Error(c, err) {
				assert.Contains(c, err.Error(), "[policy no-judged-configmaps]")
			}
		}, time.Minute, 250*time.Millisecond, "the policy is in force in admission")

		judged := keptApp("judged")
		judged.SetAnnotations(map[string]string{vocab.AnnotationPaused: "true"})
		require.NoError(t, cp.Client.Create(ctx, judged))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			obj := keptApp("judged")
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
			assert.Equal(c, "Paused", readyReason(*obj), "the generated controller saw it")
		}, time.Minute, 250*time.Millisecond)
		res = cp.Kubectl(ctx, "", "label", "keptapps.v0-1-0.composition.krateo.io", "judged", "-n", keptNamespace, "judge=yes")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "annotate", "--overwrite", "keptapps.v0-1-0.composition.krateo.io", "judged", "-n", keptNamespace, vocab.AnnotationPaused+"=false")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			obj := keptApp("judged")
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
			assert.Equal(c, "PolicyDenied", readyReason(*obj), "%v", obj.Object["status"])
		}, time.Minute, 250*time.Millisecond)
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: keptNamespace, Name: "judged"}, &corev1.ConfigMap{})
		assert.True(t, apierrors.IsNotFound(err), "nothing installed: %v", err)
		require.NoError(t, cp.Client.Delete(ctx, keptApp("judged")))
	})

	t.Run("what the generated controller installs is judged with the Gatekeeper constraints", func(t *testing.T) {
		// A composition created paused, before the constraint; the constraint refuses
		// the creation of its ConfigMap, and admission judges the unpause, an UPDATE,
		// so only the controller's install gate, which creates the release, can refuse.
		judged := keptApp("gk-judged")
		judged.SetAnnotations(map[string]string{vocab.AnnotationPaused: "true"})
		require.NoError(t, cp.Client.Create(ctx, judged))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			obj := keptApp("gk-judged")
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
			assert.Equal(c, "Paused", readyReason(*obj), "the generated controller saw it")
		}, time.Minute, 250*time.Millisecond)

		res := cp.Kubectl(ctx, keptCreatesTemplate, "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			res := cp.Kubectl(ctx, keptCreatesConstraint, "apply", "-f", "-")
			assert.NoError(c, res.Err, res.Stderr)
		}, time.Minute, 250*time.Millisecond)
		// serve writes what it enforces for the generated controllers.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			cm := &corev1.ConfigMap{}
			if !assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: rbac.ConstraintsConfigMap}, cm)) {
				return
			}
			lib, err := constraints.DecodeMirror(cm)
			if assert.NoError(c, err) {
				assert.Len(c, lib.Constraints(), 1)
			}
		}, time.Minute, 250*time.Millisecond)

		res = cp.Kubectl(ctx, "", "annotate", "--overwrite", "keptapps.v0-1-0.composition.krateo.io", "gk-judged", "-n", keptNamespace, vocab.AnnotationPaused+"=false")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			obj := keptApp("gk-judged")
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
			assert.Equal(c, "PolicyDenied", readyReason(*obj), "%v", obj.Object["status"])
			assert.Contains(c, fmt.Sprint(obj.Object["status"]), "ConfigMap/gk-judged: gk-judged may not be created [constraint E2EKeptCreates/no-gk-judged]")
		}, time.Minute, 250*time.Millisecond)
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: keptNamespace, Name: "gk-judged"}, &corev1.ConfigMap{})
		assert.True(t, apierrors.IsNotFound(err), "nothing installed: %v", err)
		require.NoError(t, cp.Client.Delete(ctx, keptApp("gk-judged")))
	})

	t.Run("the identity reads its archive and the release seal, and no other Secret of Compositor's namespace", func(t *testing.T) {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: archives, Name: "someone-elses"},
			StringData: map[string]string{"token": "secret"},
		}))
		impersonated := rest.CopyConfig(cp.Config)
		impersonated.Impersonate = rest.ImpersonationConfig{UserName: keptUser,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + keptIdentities, "system:authenticated"}}
		as, err := client.New(impersonated, client.Options{})
		require.NoError(t, err)
		require.NoError(t, as.Get(ctx, client.ObjectKey{Namespace: archives, Name: archive}, &corev1.Secret{}))
		require.NoError(t, as.Get(ctx, client.ObjectKey{Namespace: archives, Name: keyName}, &corev1.Secret{}))
		err = as.Get(ctx, client.ObjectKey{Namespace: archives, Name: rbac.ReleaseSealSecret}, &corev1.Secret{})
		assert.True(t, apierrors.IsForbidden(err), "get the master key: %v", err)
		err = as.Get(ctx, client.ObjectKey{Namespace: archives, Name: "someone-elses"}, &corev1.Secret{})
		assert.True(t, apierrors.IsForbidden(err), "get another Secret: %v", err)
		err = as.List(ctx, &corev1.SecretList{}, client.InNamespace(archives))
		assert.True(t, apierrors.IsForbidden(err), "list Secrets: %v", err)

		for _, attrs := range []authorizationv1.ResourceAttributes{
			{Verb: "get", Resource: "secrets", Namespace: archives, Name: "someone-elses"},
			{Verb: "get", Resource: "secrets", Namespace: archives, Name: "chart-ffffffffffffffffffff"},
			{Verb: "get", Resource: "secrets", Namespace: archives},
			{Verb: "list", Resource: "secrets", Namespace: archives},
			{Verb: "watch", Resource: "secrets", Namespace: archives},
			{Verb: "update", Resource: "secrets", Namespace: archives, Name: archive},
			{Verb: "delete", Resource: "secrets", Namespace: archives, Name: archive},
			{Verb: "create", Resource: "secrets", Namespace: archives},
			{Verb: "get", Resource: "secrets", Namespace: archives, Name: rbac.ReleaseSealSecret},
			{Verb: "update", Resource: "secrets", Namespace: archives, Name: keyName},
			{Verb: "update", Resource: "secrets", Namespace: archives, Name: rbac.ReleaseSealSecret},
			{Verb: "patch", Resource: "secrets", Namespace: archives, Name: rbac.ReleaseSealSecret},
			{Verb: "delete", Resource: "secrets", Namespace: archives, Name: rbac.ReleaseSealSecret},
			{Verb: "watch", Resource: "secrets", Namespace: archives, Name: rbac.ReleaseSealSecret},
		} {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: keptUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + keptIdentities, "system:authenticated"},
				ResourceAttributes: &attrs,
			}}
			require.NoError(t, cp.Client.Create(ctx, review))
			assert.False(t, review.Status.Allowed, "%s secrets %s/%s", attrs.Verb, attrs.Namespace, attrs.Name)
		}
	})

	t.Run("the Roles and RoleBindings go with the definition", func(t *testing.T) {
		require.NoError(t, cp.Client.Delete(ctx, keptApp("after-outage")))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			err := cp.Client.Get(ctx, client.ObjectKeyFromObject(keptApp("after-outage")), keptApp(""))
			assert.True(c, apierrors.IsNotFound(err), "composition deleted: %v", err)
		}, 2*time.Minute, 250*time.Millisecond)
		require.NoError(t, cp.Client.Delete(ctx, def))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, name := range []string{roleName, sealRoleName} {
				for _, obj := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}} {
					err := cp.Client.Get(ctx, client.ObjectKey{Namespace: archives, Name: name}, obj)
					assert.True(c, apierrors.IsNotFound(err), "%T %s: %v", obj, name, err)
				}
			}
		}, 2*time.Minute, 250*time.Millisecond)
	})
}
