package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/generators/rbac"
	compositionctl "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// chartDir is Compositor's own deployment chart.
func chartDir() string { return filepath.Join(controlplane.RepoRoot(), "charts", "compositor") }

// helmTemplate renders the deployment chart as release compositor in
// compositor-system, with --set values, and returns its objects by "Kind/name".
func helmTemplate(t *testing.T, set ...string) (map[string]*unstructured.Unstructured, error) {
	t.Helper()
	args := []string{"template", "compositor", chartDir(), "--namespace", "compositor-system"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(controlplane.BinDir(), "helm"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, errors.New(stderr.String())
	}
	objects := map[string]*unstructured.Unstructured{}
	decoder := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	for {
		obj := &unstructured.Unstructured{}
		err := decoder.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return objects, nil
		}
		require.NoError(t, err)
		if len(obj.Object) > 0 {
			objects[obj.GetKind()+"/"+obj.GetName()] = obj
		}
	}
}

func as[T any](t *testing.T, obj *unstructured.Unstructured) *T {
	t.Helper()
	require.NotNil(t, obj)
	out := new(T)
	data, err := obj.MarshalJSON()
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, out))
	return out
}

func TestDeploymentChartRenders(t *testing.T) {
	controlplane.Require(t, "helm")
	res, err := exec.Command(filepath.Join(controlplane.BinDir(), "helm"), "lint", "--strict", chartDir()).CombinedOutput()
	require.NoError(t, err, string(res))

	t.Run("defaults: replicas spread, leader election, builtin certificates", func(t *testing.T) {
		objects, err := helmTemplate(t)
		require.NoError(t, err)
		deployment := as[appsv1.Deployment](t, objects["Deployment/compositor"])
		assert.Equal(t, int32(2), *deployment.Spec.Replicas)
		pod := deployment.Spec.Template.Spec
		assert.Equal(t, "compositor", pod.ServiceAccountName)
		assert.True(t, *pod.SecurityContext.RunAsNonRoot)
		require.NotNil(t, pod.Affinity.PodAntiAffinity)
		container := pod.Containers[0]
		assert.True(t, *container.SecurityContext.ReadOnlyRootFilesystem)
		assert.False(t, *container.SecurityContext.AllowPrivilegeEscalation)
		assert.Equal(t, "/healthz", container.LivenessProbe.HTTPGet.Path)
		assert.Equal(t, "/readyz", container.ReadinessProbe.HTTPGet.Path)
		for _, arg := range []string{"serve", "--leader-election", "--certs=builtin", "--webhook-service=compositor-webhook"} {
			assert.Contains(t, container.Args, arg)
		}
		// The binary accepts every argument the chart gives it.
		out, err := exec.Command(buildCompositor(t), append(container.Args, "--help")...).CombinedOutput()
		require.NoError(t, err, string(out))

		assert.Contains(t, objects, "PodDisruptionBudget/compositor")
		assert.Contains(t, objects, "Service/compositor-webhook")
		for key := range objects {
			assert.NotContains(t, []string{"Certificate", "Issuer", "ServiceMonitor"}, strings.Split(key, "/")[0], key)
		}
		role := as[rbacv1.ClusterRole](t, objects["ClusterRole/compositor"])
		for _, rule := range role.Rules {
			assert.NotContains(t, rule.Verbs, "*")
			assert.NotContains(t, rule.Verbs, "impersonate")
			if slices.Contains(rule.Resources, "*") {
				// The generated kinds; and, to read only, Gatekeeper's constraints, whose
				// kinds come and go with their templates.
				if slices.Equal(rule.APIGroups, []string{"constraints.gatekeeper.sh"}) {
					assert.Equal(t, []string{"get", "list", "watch"}, rule.Verbs, "constraints are only read")
					continue
				}
				assert.Equal(t, []string{"composition.krateo.io"}, rule.APIGroups, "a wildcard only on the generated kinds")
			}
		}
	})

	t.Run("cert-manager mode", func(t *testing.T) {
		objects, err := helmTemplate(t, "certs.mode=cert-manager", "serviceMonitor.enabled=true")
		require.NoError(t, err)
		assert.Contains(t, objects, "Issuer/compositor-selfsigned")
		certificate := objects["Certificate/compositor-webhook"]
		require.NotNil(t, certificate)
		dnsNames, _, _ := unstructured.NestedStringSlice(certificate.Object, "spec", "dnsNames")
		assert.Contains(t, dnsNames, "compositor-webhook.compositor-system.svc")
		container := as[appsv1.Deployment](t, objects["Deployment/compositor"]).Spec.Template.Spec.Containers[0]
		assert.Contains(t, container.Args, "--certs=cert-manager")
		assert.Contains(t, container.Args, "--cert-manager-certificate=compositor-webhook")
		assert.Contains(t, objects, "ServiceMonitor/compositor")
	})

	t.Run("the policy fencing Compositor holds generators/rbac's invariants", func(t *testing.T) {
		objects, err := helmTemplate(t)
		require.NoError(t, err)
		for _, name := range []string{"compositor-generated-rbac", "compositor-generated-controllers", "compositor-generated-crds"} {
			require.Contains(t, objects, "ValidatingAdmissionPolicy/"+name)
			require.Contains(t, objects, "ValidatingAdmissionPolicyBinding/"+name)
			user, _, _ := unstructured.NestedSlice(objects["ValidatingAdmissionPolicy/"+name].Object, "spec", "matchConditions")
			assert.Contains(t, fmt.Sprint(user), `request.userInfo.username == "system:serviceaccount:compositor-system:compositor"`)
		}
		spec, err := json.Marshal(objects["ValidatingAdmissionPolicy/compositor-generated-rbac"].Object["spec"])
		require.NoError(t, err)
		// The Secrets the release seal Role may get: its definitions' keys, by name.
		quoted := slices.Concat(rbac.DangerousVerbs(), rbac.RefusedGroups(), []string{rbac.SealKeySecretPrefix})
		for _, gr := range rbac.RefusedTypes() {
			quoted = append(quoted, gr.Group+"/"+gr.Resource)
		}
		for _, s := range quoted {
			assert.Contains(t, string(spec), "'"+s+"'", "the policy does not name %s", s)
		}
		assert.NotContains(t, objects, "NetworkPolicy/compositor", "off by default")
	})

	t.Run("network policy", func(t *testing.T) {
		objects, err := helmTemplate(t, "networkPolicy.enabled=true", "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24")
		require.NoError(t, err)
		policy := as[networkingv1.NetworkPolicy](t, objects["NetworkPolicy/compositor"])
		require.Len(t, policy.Spec.Ingress, 1, "no metrics port without metricsFrom")
		assert.Equal(t, "webhook", policy.Spec.Ingress[0].Ports[0].Port.String())
		assert.Equal(t, "10.0.0.0/24", policy.Spec.Ingress[0].From[0].IPBlock.CIDR)
	})

	t.Run("bad values are refused by the chart's schema", func(t *testing.T) {
		for set, want := range map[string]string{
			"certs.mode=vault":          "at '/certs/mode': value must be one of 'builtin', 'cert-manager'",
			"replicaCount=0":            "at '/replicaCount'",
			"webhook.timeoutSeconds=60": "at '/webhook/timeoutSeconds': maximum: got 60, want 30",
			"reconciler.poll=soon":      "at '/reconciler/poll'",
			"replicas=3":                "replicas",
			"networkPolicy.webhookFrom[0].cidr=10.0.0.0/8": "at '/networkPolicy/webhookFrom/0': additional properties 'cidr' not allowed",
		} {
			_, err := helmTemplate(t, set)
			require.Error(t, err, set)
			assert.Contains(t, err.Error(), want, set)
		}
	})
}

// TestDeploymentChartRBACIsEnough installs the chart on the real API server and runs
// Compositor as the chart's ServiceAccount through a definition's whole life: what the
// chart grants is enough, and what it does not grant stays refused.
func TestDeploymentChartRBACIsEnough(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	res := cp.Helm(ctx, "install", "compositor", chartDir(), "--namespace", "compositor-system", "--create-namespace")
	require.NoError(t, res.Err, res.Stderr)
	// Compositor runs under the chart's policies too: what it generates passes them.
	waitForFence(t, cp)

	const serviceAccount = "system:serviceaccount:compositor-system:compositor"
	asChart := *cp
	asChart.Config = rest.CopyConfig(cp.Config)
	asChart.Config.Impersonate = rest.ImpersonationConfig{
		UserName: serviceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:compositor-system", "system:authenticated"},
	}
	startCompositor(t, &asChart, func(o *app.ServeOptions) {
		o.LeaderElection = true
		o.ServiceAccount = "compositor" // as the chart's POD_SERVICE_ACCOUNT says
	})
	readyDefinition(t, cp)
	// The chart's archive is kept in Compositor's namespace, written as the chart's
	// ServiceAccount: restarts never need the chart source for it. That ServiceAccount
	// owns it, so that it goes with the installation.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		archives := &corev1.SecretList{}
		if assert.NoError(c, cp.Client.List(ctx, archives, client.InNamespace("compositor-system"),
			client.MatchingLabels{vocab.LabelChartArchive: "true"})) && assert.NotEmpty(c, archives.Items, "a kept chart archive") {
			owners := archives.Items[0].OwnerReferences
			if assert.Len(c, owners, 1) {
				assert.Equal(c, "ServiceAccount", owners[0].Kind)
				assert.Equal(c, "compositor", owners[0].Name)
			}
		}
	}, 30*time.Second, 100*time.Millisecond)
	// The chart's policies admit the Role that lets the version's controller read that
	// archive, and only it.
	archiveRole := types.NamespacedName{Namespace: "compositor-system", Name: rbac.NamesFor("fireworksapp-system", "fireworksapps", "v1-1-5").ChartArchive}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		role := &rbacv1.Role{}
		if assert.NoError(c, cp.Client.Get(ctx, archiveRole, role)) && assert.Len(c, role.Rules, 1) {
			assert.Equal(c, []string{"get"}, role.Rules[0].Verbs)
			assert.Len(c, role.Rules[0].ResourceNames, 1)
			if assert.Len(c, role.OwnerReferences, 1, "owned by Compositor's ServiceAccount, like the archive") {
				assert.Equal(c, "compositor", role.OwnerReferences[0].Name)
			}
		}
	}, 30*time.Second, 100*time.Millisecond)
	// And the Role that lets it read its definition's key, the Secret compositor serve
	// writes (as the chart's ServiceAccount) from the master key it made on start: that
	// one Secret, owned alike; with the ConfigMap of the Gatekeeper constraints serve
	// enforces, by name.
	sealRole := types.NamespacedName{Namespace: "compositor-system", Name: rbac.NamesFor("fireworksapp-system", "fireworksapps", "v1-1-5").ReleaseSeal}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: rbac.ReleaseSealSecret}, &corev1.Secret{}))
	seedDef := &corev1alpha1.CompositionDefinition{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "fireworksapp-system", Name: "fireworksapp-1-1-5"}, seedDef))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		role := &rbacv1.Role{}
		if assert.NoError(c, cp.Client.Get(ctx, sealRole, role)) {
			assert.Equal(c, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"},
				ResourceNames: []string{compositionctl.KeySecretName(seedDef.UID)}}, {APIGroups: []string{""}, Resources: []string{"configmaps"},
				Verbs: []string{"get", "list", "watch"}, ResourceNames: []string{rbac.ConstraintsConfigMap}}, {APIGroups: []string{""}, Resources: []string{"configmaps"},
				Verbs: []string{"get", "list", "watch"}, ResourceNames: []string{rbac.NamesFor("fireworksapp-system", "fireworksapps", "v1-1-5").BoundNamespaces}}}, role.Rules)
			if assert.Len(c, role.OwnerReferences, 1, "owned by Compositor's ServiceAccount") {
				assert.Equal(c, "compositor", role.OwnerReferences[0].Name)
			}
		}
		binding := &rbacv1.RoleBinding{}
		if assert.NoError(c, cp.Client.Get(ctx, sealRole, binding)) {
			assert.Equal(c, []rbacv1.Subject{{Kind: "ServiceAccount", Name: rbac.ServiceAccountName("fireworksapp-system", "fireworksapps", "v1-1-5"), Namespace: "compositor-system"}}, binding.Subjects)
		}
	}, 30*time.Second, 100*time.Millisecond)

	kubectl := func(stdin string, args ...string) {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
	}
	kubectl(noDockerHub, "apply", "-f", "-")
	kubectl("", "wait", "compositionpolicy", "no-docker-hub", "--for", "jsonpath={.status.compiled}=true", "--timeout", "60s")
	kubectl("", "create", "namespace", "team-chart")
	composition := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: app, namespace: team-chart}\nspec: {replicaCount: 2}\n"
	kubectl(composition, "apply", "-f", "-")
	bindings := func(c require.TestingT) []rbacv1.RoleBinding {
		list := &rbacv1.RoleBindingList{}
		require.NoError(c, cp.Client.List(ctx, list, client.InNamespace("team-chart")))
		return list.Items
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := bindings(c)
		require.Len(c, got, 1)
		assert.Equal(c, "compositor:fireworksapp-system:fireworksapps-v1-1-5:release", got[0].RoleRef.Name)
	}, 30*time.Second, 100*time.Millisecond)
	kubectl(composition, "delete", "-f", "-")
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, bindings(c)) }, 30*time.Second, 100*time.Millisecond)

	// A private chart: the controller's Role on the credentials Secret.
	applyPrivateDefinition(t, cp, "team-p")
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-p", Name: "compositor:team-p:fireworksapps-v1-1-5:credentials"}, &rbacv1.Role{}))

	for _, def := range [][2]string{{"team-p", "fireworks"}, {"fireworksapp-system", "fireworksapp-1-1-5"}} {
		kubectl("", "delete", "compositiondefinition", def[1], "-n", def[0], "--timeout", "60s")
	}
	roles := &rbacv1.RoleList{}
	require.NoError(t, cp.Client.List(ctx, roles, client.InNamespace("team-p")))
	assert.Empty(t, roles.Items, "the credentials Role goes with its definition")
	assert.True(t, apierrors.IsNotFound(cp.Client.Get(ctx, archiveRole, &rbacv1.Role{})), "the chart archive's Role goes with its definition")
	for _, obj := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		assert.True(t, apierrors.IsNotFound(cp.Client.Get(ctx, sealRole, obj)), "the release seal's %T goes with its definition", obj)
	}

	// What the chart does not grant stays refused.
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Verb: "create", Resource: "pods", Namespace: "default"},
		{Verb: "delete", Resource: "secrets", Namespace: "default"},
		{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "default"},
		{Verb: "create", Resource: "namespaces"},
		{Verb: "delete", Resource: "compositiondefinitions", Group: "core.krateo.io", Namespace: "default"},
		{Verb: "patch", Resource: "validatingwebhookconfigurations", Group: "admissionregistration.k8s.io", Name: "someone-elses"},
	} {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: serviceAccount, Groups: asChart.Config.Impersonate.Groups, ResourceAttributes: &attrs,
		}}
		require.NoError(t, cp.Client.Create(ctx, review))
		assert.False(t, review.Status.Allowed, "%+v is allowed", attrs)
	}
	// The definitions webhook asks whether an author may read the Secret a definition names.
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: serviceAccount, Groups: asChart.Config.Impersonate.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "subjectaccessreviews", Group: "authorization.k8s.io"},
	}}
	require.NoError(t, cp.Client.Create(ctx, review))
	assert.True(t, review.Status.Allowed, "creating SubjectAccessReviews is refused: %s", review.Status.Reason)
}
