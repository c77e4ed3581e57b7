package rbac

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/compositor-dev/compositor/api"
	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// One control plane for both tests: discovery of the real API server as the mapper,
// and the generated identity enforced by its real RBAC authorizer.
func TestControlPlane(t *testing.T) {
	cp := controlplane.Start(t)
	httpClient, err := rest.HTTPClientFor(cp.Config)
	require.NoError(t, err)
	mapper, err := apiutil.NewDynamicRESTMapper(cp.Config, httpClient)
	require.NoError(t, err)

	t.Run("discovery", func(t *testing.T) { testDiscovery(t, mapper) })
	t.Run("impersonation", func(t *testing.T) { testImpersonation(t, cp, mapper) })
}

func testDiscovery(t *testing.T, mapper meta.RESTMapper) {
	want := fireworksTypes(t)
	for _, v := range []string{"1.1.5", "2.0.0"} {
		ch, err := samplecharts.Load(v)
		require.NoError(t, err)
		got, err := ResourceTypes(ch, mapper)
		require.NoError(t, err, v)
		assert.Equal(t, want[v], got, v)
		objs, err := Generate(fireworksOptions(t, v, got))
		require.NoError(t, err, v)
		assert.Nil(t, objs.ClusterRole, v)
	}

	widget := testChart("widget", map[string]string{"w.yaml": "apiVersion: example.com/v1\nkind: Widget\n"}, nil)
	_, err := ResourceTypes(widget, mapper)
	assert.True(t, errors.Is(err, ErrUnknownKind), "got %v", err)

	roles := testChart("roles", map[string]string{"r.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n"}, nil)
	_, err = ResourceTypes(roles, mapper)
	assert.True(t, errors.Is(err, ErrForbiddenKind), "got %v", err)

	pc := testChart("pc", map[string]string{"pc.yaml": "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\n"}, nil)
	got, err := ResourceTypes(pc, mapper)
	require.NoError(t, err)
	assert.Equal(t, []ResourceType{kubeType(t, "scheduling.k8s.io", "PriorityClass")}, got, "cluster scope from discovery")
}

func testImpersonation(t *testing.T, cp *controlplane.ControlPlane, mapper meta.RESTMapper) {
	ctx := t.Context()
	admin := cp.Client
	ch, err := samplecharts.Load("2.0.0")
	require.NoError(t, err)
	types, err := ResourceTypes(ch, mapper)
	require.NoError(t, err)
	opts := fireworksOptions(t, "2.0.0", types)
	opts.CredentialsSecret = "repo-password"
	objs, err := Generate(opts)
	require.NoError(t, err)

	for _, ns := range []string{"compositor-system", "fireworksapp-system", "team-a", "team-b", "team-c"} {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	for _, o := range append(objs.List(), objs.ReleaseBinding("team-a")) {
		require.NoError(t, admin.Create(ctx, o), "%T %s", o, o.GetName())
	}
	for _, secret := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: "team-b"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "repo-password", Namespace: "fireworksapp-system"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other-password", Namespace: "fireworksapp-system"}},
	} {
		secret.StringData = map[string]string{"password": "hunter2"}
		require.NoError(t, admin.Create(ctx, secret))
	}

	sa := objs.ServiceAccount
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + sa.Namespace, "system:authenticated"},
	}
	scheme, err := api.NewScheme()
	require.NoError(t, err)
	as, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)

	t.Run("can install what the chart renders in team-a", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config", Namespace: "team-a"}, Data: map[string]string{"A": "1"}}
		require.NoError(t, as.Create(ctx, cm))
		require.NoError(t, as.Create(ctx, deployment("team-a")))
		require.NoError(t, as.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}},
		}))
		require.NoError(t, as.Create(ctx, ingress("team-a")))

		cm.Data["A"] = "2"
		require.NoError(t, as.Update(ctx, cm))
		var deployments appsv1.DeploymentList
		require.NoError(t, as.List(ctx, &deployments, client.InNamespace("team-a")))
		assert.Len(t, deployments.Items, 1)
		require.NoError(t, as.Delete(ctx, cm))
	})

	t.Run("can keep Helm release Secrets in team-a", func(t *testing.T) {
		release := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.web.v1", Namespace: "team-a", Labels: map[string]string{"owner": "helm", "name": "web"}},
			Type:       "helm.sh/release.v1",
			Data:       map[string][]byte{"release": []byte("H4sI")},
		}
		require.NoError(t, as.Create(ctx, release))
		var got corev1.Secret
		require.NoError(t, as.Get(ctx, client.ObjectKeyFromObject(release), &got))
		var list corev1.SecretList
		require.NoError(t, as.List(ctx, &list, client.InNamespace("team-a"), client.MatchingLabels{"owner": "helm"}))
		assert.Len(t, list.Items, 1)
		got.Labels["status"] = "deployed"
		require.NoError(t, as.Update(ctx, &got))
		require.NoError(t, as.Delete(ctx, &got))
	})

	forbidden := func(t *testing.T, err error) {
		t.Helper()
		assert.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
	}
	t.Run("can read its chart's credentials Secret, and only that one", func(t *testing.T) {
		var secret corev1.Secret
		require.NoError(t, as.Get(ctx, client.ObjectKey{Namespace: "fireworksapp-system", Name: "repo-password"}, &secret))
		assert.Equal(t, "hunter2", string(secret.Data["password"]))
		forbidden(t, as.Get(ctx, client.ObjectKey{Namespace: "fireworksapp-system", Name: "other-password"}, &secret))
		forbidden(t, as.List(ctx, &corev1.SecretList{}, client.InNamespace("fireworksapp-system")))
		secret.Data["password"] = []byte("changed")
		forbidden(t, as.Update(ctx, &secret))
	})

	t.Run("is forbidden everything else", func(t *testing.T) {
		var secret corev1.Secret
		forbidden(t, as.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "db-password"}, &secret))
		forbidden(t, as.List(ctx, &corev1.SecretList{}))
		forbidden(t, as.List(ctx, &corev1.SecretList{}, client.InNamespace("team-c")))
		forbidden(t, as.Create(ctx, deployment("team-c")))
		forbidden(t, as.Create(ctx, deployment("fireworksapp-system")))
		forbidden(t, as.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "shell", Namespace: "team-a"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "sh", Image: "busybox"}}},
		}))
		forbidden(t, as.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}))
		forbidden(t, as.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "team-a"}}))
		forbidden(t, as.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "team-a"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: sa.Namespace}},
		}))
		forbidden(t, as.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}))
		forbidden(t, as.Delete(ctx, &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Name: "any", Namespace: "team-a"}}))
	})

	t.Run("the API server's authorizer agrees", func(t *testing.T) {
		for _, tt := range []struct {
			attrs   authorizationv1.ResourceAttributes
			allowed bool
		}{
			// A Deployment's informer lists and watches, and it writes compositions
			// and their status, only where the release role is bound (team-a).
			{authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "watch", Group: "composition.krateo.io", Resource: "fireworksapps"}, true},
			{authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "list", Group: "composition.krateo.io", Resource: "fireworksapps"}, true},
			{authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "watch", Group: "composition.krateo.io", Resource: "fireworksapps"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "list", Group: "composition.krateo.io", Resource: "fireworksapps"}, false},
			{authorizationv1.ResourceAttributes{Verb: "list", Group: "composition.krateo.io", Resource: "fireworksapps"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "update", Group: "composition.krateo.io", Resource: "fireworksapps", Subresource: "status"}, true},
			{authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "update", Group: "composition.krateo.io", Resource: "fireworksapps", Subresource: "finalizers"}, true},
			{authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "patch", Group: "composition.krateo.io", Resource: "fireworksapps"}, true},
			{authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "update", Group: "composition.krateo.io", Resource: "fireworksapps", Subresource: "status"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "update", Group: "composition.krateo.io", Resource: "fireworksapps", Subresource: "finalizers"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "patch", Group: "composition.krateo.io", Resource: "fireworksapps"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "get", Group: "composition.krateo.io", Resource: "fireworksapps"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "create", Resource: "events"}, true},
			{authorizationv1.ResourceAttributes{Verb: "list", Group: "core.krateo.io", Resource: "compositiondefinitions"}, true},
			{authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "create", Group: "composition.krateo.io", Resource: "fireworksapps"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "delete", Group: "composition.krateo.io", Resource: "fireworksapps"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-b", Verb: "create", Group: "networking.k8s.io", Resource: "ingresses"}, false},
			{authorizationv1.ResourceAttributes{Verb: "update", Group: "core.krateo.io", Resource: "compositiondefinitions"}, false},
			{authorizationv1.ResourceAttributes{Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, false},
			{authorizationv1.ResourceAttributes{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, false},
			{authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "impersonate", Resource: "serviceaccounts"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Resource: "serviceaccounts", Subresource: "token"}, false},
			{authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Resource: "pods", Subresource: "exec"}, false},
		} {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: cfg.Impersonate.UserName, Groups: cfg.Impersonate.Groups, ResourceAttributes: &tt.attrs,
			}}
			require.NoError(t, admin.Create(ctx, review))
			assert.Equal(t, tt.allowed, review.Status.Allowed, "%+v: %s", tt.attrs, review.Status.Reason)
		}
	})
}

func deployment(namespace string) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}
}

func ingress(namespace string) *networkingv1.Ingress {
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{
			Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}},
		}},
	}
}
