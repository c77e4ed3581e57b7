package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/controller"
	"github.com/compositor-dev/compositor/generators/rbac"
	compositionctl "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// compositorSA is the identity the chart gives Compositor, installed as release
// compositor in compositor-system.
const compositorSA = "system:serviceaccount:compositor-system:compositor"

var compositorGroups = []string{"system:serviceaccounts", "system:serviceaccounts:compositor-system", "system:authenticated"}

// TestDeploymentChartFencesCompositorsRights installs the chart and, impersonating
// Compositor's ServiceAccount (with kubectl, and with client-go where kubectl would
// need a list first), tries what its wide RBAC rights would allow but its
// ValidatingAdmissionPolicies refuse: each attempt is refused by the API server with
// the policy's message, and what Compositor generates is accepted.
func TestDeploymentChartFencesCompositorsRights(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	res := cp.Helm(ctx, "install", "compositor", chartDir(), "--namespace", "compositor-system", "--create-namespace")
	require.NoError(t, res.Err, res.Stderr)
	require.NoError(t, cp.Kubectl(ctx, "", "create", "namespace", "team-a").Err)

	asCompositor := func(stdin string, args ...string) controlplane.Result {
		t.Helper()
		return kubectlAsCompositor(cp, stdin, args...)
	}
	config := rest.CopyConfig(cp.Config)
	config.Impersonate = rest.ImpersonationConfig{UserName: compositorSA, Groups: compositorGroups}
	impersonated, err := client.New(config, client.Options{})
	require.NoError(t, err)
	refused := func(t *testing.T, want, manifest string) {
		t.Helper()
		res := asCompositor(manifest, "create", "-f", "-")
		require.Error(t, res.Err, "admitted:\n%s", manifest)
		assert.Contains(t, res.Stderr, "ValidatingAdmissionPolicy 'compositor-generated-rbac'")
		assert.Contains(t, res.Stderr, want)
	}
	waitForFence(t, cp)
	controllerSA := rbac.ServiceAccountName("team-a", "fireworksapps", "v1-1-5")
	const onlyController = "may only bind the controller ServiceAccount team-a-fireworksapps-v1-1-5-<hash> of compositor-system"

	// The labels of one definition version, as generators/rbac sets them.
	const labels = `labels:
    app.kubernetes.io/managed-by: compositor
    compositor.dev/definition-namespace: team-a
    compositor.dev/resource: fireworksapps
    compositor.dev/version: v1-1-5`

	// clusterRole is a ClusterRole labelled and named as generated, for the role of
	// that name suffix, with rules.
	clusterRole := func(suffix, rules string) string {
		return `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5:` + suffix + `
  ` + labels + `
rules: ` + rules + "\n"
	}

	t.Run("a ClusterRoleBinding to cluster-admin", func(t *testing.T) {
		refused(t, "may only bind the role it generated for compositor:team-a:fireworksapps-v1-1-5, not ClusterRole cluster-admin", `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5:cluster
  `+labels+`
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: `+controllerSA+`, namespace: compositor-system}]
`)
		refused(t, "lacks the labels app.kubernetes.io/managed-by=compositor", `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: root}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: compositor, namespace: compositor-system}]
`)
	})

	t.Run("a Compositor-labelled ClusterRole with every verb", func(t *testing.T) {
		refused(t, `a rule has the wildcard "*"`, clusterRole("release", `[{apiGroups: [""], resources: [configmaps], verbs: ["*"]}]`))
		refused(t, "a rule grants escalate, bind or impersonate", clusterRole("release", `[{apiGroups: [""], resources: [serviceaccounts], verbs: [impersonate]}]`))
		refused(t, "a rule grants a subresource", clusterRole("cluster", `[{apiGroups: [""], resources: [nodes/proxy], verbs: [get]}]`))
		refused(t, "is bound cluster-wide and may not grant Secrets", clusterRole("compositions", `[{apiGroups: [""], resources: [secrets], verbs: [get]}]`))
		refused(t, "writes admission configuration", clusterRole("cluster", `[{apiGroups: [admissionregistration.k8s.io], resources: [validatingwebhookconfigurations], verbs: [delete]}]`))
	})

	t.Run("a RoleBinding to an arbitrary ServiceAccount", func(t *testing.T) {
		// The controller's ServiceAccount lives in Compositor's namespace: one of its
		// name in the definition's namespace, where tenants write, is bound only
		// beside it, while an installation moves.
		refused(t, onlyController, `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5
  namespace: team-a
  `+labels+`
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "compositor:team-a:fireworksapps-v1-1-5:release"}
subjects: [{kind: ServiceAccount, name: `+controllerSA+`, namespace: team-a}]
`)
		refused(t, onlyController, `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5
  namespace: team-a
  `+labels+`
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "compositor:team-a:fireworksapps-v1-1-5:release"}
subjects: [{kind: ServiceAccount, name: fireworksapps-v1-1-5-controller, namespace: team-a}]
`)
		refused(t, onlyController, `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5
  namespace: team-a
  `+labels+`
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "compositor:team-a:fireworksapps-v1-1-5:release"}
subjects: [{kind: ServiceAccount, name: default, namespace: kube-system}]
`)
	})

	t.Run("the former ServiceAccount beside the controller, but in a release binding", func(t *testing.T) {
		// A tenant of team-a may mint the token of team-a/fireworksapps-v1-1-5-controller:
		// while an installation moves, only the release bindings name it.
		former := `[{kind: ServiceAccount, name: ` + controllerSA + `, namespace: compositor-system}, {kind: ServiceAccount, name: fireworksapps-v1-1-5-controller, namespace: team-a}]`
		refused(t, onlyController, `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5:compositions
  `+labels+`
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "compositor:team-a:fireworksapps-v1-1-5:compositions"}
subjects: `+former+`
`)
		for _, role := range []string{"release-seal", "chart-archive"} {
			// The Role, as the cluster's administrator makes it: binding it needs it.
			require.NoError(t, cp.Kubectl(ctx, `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5:`+role+`
  namespace: compositor-system
  `+labels+`
rules: [{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [chart-0123]}]
`, "apply", "-f", "-").Err)
			// Gone after: the subtests below create and apply the genuine ones.
			t.Cleanup(func() {
				_ = cp.Kubectl(ctx, "", "delete", "role", "compositor:team-a:fireworksapps-v1-1-5:"+role, "-n", "compositor-system", "--ignore-not-found")
			})
			refused(t, onlyController, `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5:`+role+`
  namespace: compositor-system
  `+labels+`
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "compositor:team-a:fireworksapps-v1-1-5:`+role+`"}
subjects: `+former+`
`)
		}
		// A name of the old length (10 hex digits of the hash) is not the controller's.
		refused(t, onlyController, `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5
  namespace: team-a
  `+labels+`
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "compositor:team-a:fireworksapps-v1-1-5:release"}
subjects: [{kind: ServiceAccount, name: `+controllerSA[:len(controllerSA)-6]+`, namespace: compositor-system}]
`)
	})

	// The Role that lets the version's controller read the release seal, in
	// Compositor's namespace: get on the key Secrets of its definitions, and nothing more.
	sealRole := func(namespace, rules string) string {
		return `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5:release-seal
  namespace: ` + namespace + `
  ` + labels + `
rules: ` + rules + "\n"
	}
	t.Run("a release seal Role that reaches further", func(t *testing.T) {
		// Rights Compositor holds itself (get, list, watch on Secrets anywhere, create in
		// its namespace), so that RBAC's own escalation check lets them through to the
		// policy.
		const onlyOne = "may only get one Secret by name (the chart credentials, a kept chart archive chart-..., or the keys of its definitions compositor-seal-...)"
		for name, rules := range map[string]string{
			"another Secret": `[{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [compositor-webhook-ca]}]`,
			"a look-alike":   `[{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [compositor-seal-0123456789abcdef01234567-2]}]`,
			"the master key": `[{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [compositor-release-seal]}]`,
			"an archive":     `[{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [chart-0123456789abcdef0123]}]`,
			"two Secrets":    `[{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [compositor-seal-0123456789abcdef01234567, compositor-webhook-ca]}]`,
			"every Secret":   `[{apiGroups: [""], resources: [secrets], verbs: [get]}]`,
			"list too":       `[{apiGroups: [""], resources: [secrets], verbs: [get, list], resourceNames: [compositor-seal-0123456789abcdef01234567]}]`,
			"watch too":      `[{apiGroups: [""], resources: [secrets], verbs: [get, watch], resourceNames: [compositor-seal-0123456789abcdef01234567]}]`,
			"create too":     `[{apiGroups: [""], resources: [secrets], verbs: [get, create], resourceNames: [compositor-seal-0123456789abcdef01234567]}]`,
			"a second rule": `[{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [compositor-seal-0123456789abcdef01234567]},
  {apiGroups: [""], resources: [secrets], verbs: [list]}]`,
			// The constraints' ConfigMap, read by name, is the one second rule allowed
			// (Compositor may get any ConfigMap, so the policy is what refuses these).
			"every ConfigMap": `[{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [compositor-seal-0123456789abcdef01234567]},
  {apiGroups: [""], resources: [configmaps], verbs: [get]}]`,
			"another ConfigMap": `[{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [compositor-seal-0123456789abcdef01234567]},
  {apiGroups: [""], resources: [configmaps], verbs: [get], resourceNames: [compositor-plan]}]`,
			"the constraints alone": `[{apiGroups: [""], resources: [configmaps], verbs: [get, list, watch], resourceNames: [compositor-constraints]}]`,
		} {
			t.Run(name, func(t *testing.T) { refused(t, onlyOne, sealRole("compositor-system", rules)) })
		}
		// Rights Compositor does not hold, RBAC refuses before the policy.
		res := asCompositor(sealRole("compositor-system", `[{apiGroups: [""], resources: [secrets], verbs: [get, update], resourceNames: [compositor-seal-0123456789abcdef01234567]}]`), "create", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, "forbidden")
		// Only in Compositor's namespace: elsewhere it is no Role Compositor generates.
		refused(t, "named as it names them for the labelled definition version",
			sealRole("team-a", `[{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [compositor-seal-0123456789abcdef01234567]}]`))

		// Its binding binds it to the version's controller only. The API server checks
		// that the Role a binding names exists before the policy sees the binding.
		genuine := sealRole("compositor-system", `[{apiGroups: [""], resources: [secrets], verbs: [get], resourceNames: [compositor-seal-0123456789abcdef01234567]}]`)
		res = cp.Kubectl(ctx, genuine, "create", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		t.Cleanup(func() { _ = cp.Kubectl(ctx, genuine, "delete", "-f", "-") })
		refused(t, onlyController, `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5:release-seal
  namespace: compositor-system
  `+labels+`
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: "compositor:team-a:fireworksapps-v1-1-5:release-seal"}
subjects: [{kind: ServiceAccount, name: default, namespace: team-a}]
`)
		refused(t, "may only bind the role it generated for compositor:team-a:fireworksapps-v1-1-5, not Role compositor", `
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: compositor:team-a:fireworksapps-v1-1-5:release-seal
  namespace: compositor-system
  `+labels+`
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: compositor}
subjects: [{kind: ServiceAccount, name: `+controllerSA+`, namespace: compositor-system}]
`)
	})

	t.Run("taking over a role it did not generate", func(t *testing.T) {
		patch := `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"compositor","compositor.dev/definition-namespace":"team-a",` +
			`"compositor.dev/resource":"fireworksapps","compositor.dev/version":"v1-1-5"}}}`
		admin := &rbacv1.ClusterRole{}
		admin.Name = "admin"
		err := impersonated.Patch(ctx, admin, client.RawPatch(types.MergePatchType, []byte(patch)))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "may only write clusterroles it generates: admin is stored without the label app.kubernetes.io/managed-by=compositor")
	})

	t.Run("a Deployment that is not a generated controller", func(t *testing.T) {
		res := asCompositor(`
apiVersion: apps/v1
kind: Deployment
metadata:
  name: `+controllerSA+`
  namespace: compositor-system
  `+labels+`
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      serviceAccountName: `+controllerSA+`
      hostPID: true
      containers: [{name: c, image: busybox}]
`, "create", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, "ValidatingAdmissionPolicy 'compositor-generated-controllers'")
		assert.Contains(t, res.Stderr, "must run as ServiceAccount "+controllerSA+", unprivileged, without host namespaces")
		// The controller runs in Compositor's namespace only: a Deployment in the
		// definition's namespace, whose tenants could exec into it or read its token,
		// is refused, by RBAC before the policy.
		res = asCompositor(`
apiVersion: apps/v1
kind: Deployment
metadata:
  name: fireworksapps-v1-1-5-controller
  namespace: team-a
  `+labels+`
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      serviceAccountName: fireworksapps-v1-1-5-controller
      containers: [{name: c, image: busybox}]
`, "create", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, "forbidden")
		res = asCompositor(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: miner, namespace: compositor-system}
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec: {containers: [{name: c, image: busybox}]}
`, "create", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, "may only write the controller Deployments it generates: miner is not one")
	})

	t.Run("a CRD it did not generate", func(t *testing.T) {
		res := asCompositor("", "delete", "crd", "compositiondefinitions.core.krateo.io")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, "ValidatingAdmissionPolicy 'compositor-generated-crds'")
		assert.Contains(t, res.Stderr, "may only write the CRDs it generates")
		require.NoError(t, cp.Kubectl(ctx, "", "get", "crd", "compositiondefinitions.core.krateo.io").Err)
	})

	// The seal migration needs update on Secrets everywhere: the fence keeps it to the
	// seal of compositions' Helm release records.
	t.Run("Secret updates reach only the seal of release records", func(t *testing.T) {
		secret := func(name, typ, uid, data string) *corev1.Secret {
			s := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: map[string]string{}},
				Type:       corev1.SecretType(typ),
				Data:       map[string][]byte{"release": []byte(data)},
			}
			if uid != "" {
				s.Labels[vocab.LabelCompositionUID] = uid
			}
			require.NoError(t, cp.Client.Create(ctx, s))
			return s
		}
		record := secret("sh.helm.release.v1.shop.v1", "helm.sh/release.v1", "uid-shop", "H4sI")
		tenants := secret("tenant-token", "Opaque", "", "hunter2")
		reseal := func(s *corev1.Secret, mutate func(*corev1.Secret)) error {
			got := &corev1.Secret{}
			require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(s), got))
			if got.Annotations == nil {
				got.Annotations = map[string]string{}
			}
			got.Annotations[vocab.AnnotationReleaseSeal] = "v1:00"
			if mutate != nil {
				mutate(got)
			}
			return impersonated.Update(ctx, got)
		}
		// The API server loads the policy a moment after the chart installs it.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			err := reseal(tenants, nil)
			if assert.Error(c, err) {
				assert.Contains(c, err.Error(), "ValidatingAdmissionPolicy 'compositor-secret-updates'")
			}
		}, 30*time.Second, 100*time.Millisecond)
		require.NoError(t, reseal(record, nil), "a record's seal")
		for name, tc := range map[string]struct {
			s      *corev1.Secret
			mutate func(*corev1.Secret)
		}{
			"a tenant's Secret":             {tenants, nil},
			"a record's data":               {record, func(s *corev1.Secret) { s.Data["release"] = []byte("forged") }},
			"a record's composition":        {record, func(s *corev1.Secret) { s.Labels[vocab.LabelCompositionUID] = "uid-other" }},
			"a record made a tenant Secret": {record, func(s *corev1.Secret) { s.Labels = nil }},
		} {
			t.Run(name, func(t *testing.T) {
				err := reseal(tc.s, tc.mutate)
				require.Error(t, err)
				assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy 'compositor-secret-updates'")
				assert.Contains(t, err.Error(), "Compositor may update only the Helm release records of compositions, and only their seal")
			})
		}
	})

	t.Run("what Compositor generates is admitted", func(t *testing.T) {
		objs, err := rbac.Generate(rbac.Options{
			Namespace: "team-a", IdentityNamespace: "compositor-system", WatchCompositions: true,
			// While an installation moves: the bindings name the old ServiceAccount too.
			FormerServiceAccount: true,
			DefinitionName:       "fireworks", Plural: "fireworksapps", Version: "v1-1-5",
			Types: []rbac.ResourceType{
				{Version: "v1", Kind: "ConfigMap", Resource: "configmaps", Namespaced: true},
				{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments", Namespaced: true},
				// A cluster-scoped kind, for the version's ClusterRole and its binding.
				{Group: "cert-manager.io", Version: "v1", Kind: "ClusterIssuer", Resource: "clusterissuers"},
			},
			CredentialsSecret: "chart-password",
			// Deployments mode: the Roles in Compositor's namespace on the kept chart
			// archive and on the release seal.
			ChartArchiveNamespace: "compositor-system",
			ChartDigest:           "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			ReleaseSealNamespace:  "compositor-system",
			SealKeySecrets:        []string{compositionctl.KeySecretName("u")},
		})
		require.NoError(t, err)
		require.NotNil(t, objs.ReleaseSealRole)
		var manifests []string
		def := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "fireworks", UID: "u"}}
		deployment := controller.Deployment(controller.Options{Definition: def, Namespace: "compositor-system", Plural: "fireworksapps", Version: "v1-1-5",
			ReleaseSealNamespace: "compositor-system", ChartArchiveNamespace: "compositor-system"})
		for _, obj := range append(objs.List(), objs.ReleaseBinding("team-a"), objs.ReleaseBinding("default"), deployment) {
			data, err := yaml.Marshal(obj)
			require.NoError(t, err)
			manifests = append(manifests, string(data))
		}
		res := asCompositor(strings.Join(manifests, "---\n"), "apply", "--server-side", "--field-manager", "compositor", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		// And, once they exist, Compositor removes them again as it does, by label.
		selector := client.MatchingLabels(rbac.IdentityLabels("team-a", "fireworksapps", "v1-1-5"))
		for _, obj := range []client.Object{&rbacv1.ClusterRoleBinding{}, &rbacv1.ClusterRole{}} {
			require.NoError(t, impersonated.DeleteAllOf(ctx, obj, selector))
		}
		roles := &rbacv1.ClusterRoleList{}
		require.NoError(t, cp.Client.List(ctx, roles, selector))
		assert.Empty(t, roles.Items)
		require.NoError(t, impersonated.Delete(ctx, deployment))
		require.NoError(t, impersonated.DeleteAllOf(ctx, &corev1.ServiceAccount{}, client.InNamespace("compositor-system"), selector))
		// The Roles in Compositor's namespace, by name, as deleteWorkloads does.
		for _, obj := range []client.Object{objs.ReleaseSealBinding, objs.ReleaseSealRole, objs.ChartArchiveBinding, objs.ChartArchiveRole} {
			require.NoError(t, impersonated.Delete(ctx, obj), "%T %s", obj, obj.GetName())
		}
	})

	t.Run("deletes reach only generated objects, with or without a selector", func(t *testing.T) {
		// deletecollection: the policy cannot see the selector, but it judges every
		// object the collection would delete.
		err := impersonated.DeleteAllOf(ctx, &rbacv1.ClusterRole{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "lacks the labels app.kubernetes.io/managed-by=compositor")
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "cluster-admin"}, &rbacv1.ClusterRole{}))
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "admin"}, &rbacv1.ClusterRole{}))
	})
}

// kubectlAsCompositor runs kubectl as the chart's ServiceAccount.
func kubectlAsCompositor(cp *controlplane.ControlPlane, stdin string, args ...string) controlplane.Result {
	args = append(args, "--as", compositorSA)
	for _, g := range compositorGroups {
		args = append(args, "--as-group", g)
	}
	return cp.Kubectl(context.Background(), stdin, args...)
}

// waitForFence waits until the chart's policies guard Compositor's ServiceAccount: the
// API server loads new policies asynchronously, so a server-side dry run is tried
// until the policy refuses it. (The policies' type-checking status is written by
// kube-controller-manager, which the test control plane does not run.)
func waitForFence(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	probes := map[string][]string{
		"compositor-generated-rbac":        {"create", "serviceaccount", "probe", "-n", "compositor-system"},
		"compositor-generated-controllers": {"create", "deployment", "probe", "-n", "compositor-system", "--image", "probe"},
		"compositor-generated-crds":        {"delete", "crd", "compositiondefinitions.core.krateo.io"},
	}
	for policy, args := range probes {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			res := kubectlAsCompositor(cp, "", append(args, "--dry-run=server")...)
			assert.Contains(c, res.Stderr, "ValidatingAdmissionPolicy '"+policy+"'")
		}, 30*time.Second, 100*time.Millisecond)
	}
}
