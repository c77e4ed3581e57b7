package rbac

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCheck(t *testing.T) {
	good := func(t *testing.T) *Objects {
		objs, err := Generate(fireworksOptions(t, "2.0.0", append(fireworksTypes(t)["2.0.0"], kubeType(t, "scheduling.k8s.io", "PriorityClass"))))
		require.NoError(t, err)
		return objs
	}
	rule := func(group, resource string, verbs ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs}
	}
	addTo := func(role func(*Objects) *rbacv1.ClusterRole, r rbacv1.PolicyRule) func(*Objects) {
		return func(o *Objects) { role(o).Rules = append(role(o).Rules, r) }
	}
	release := func(o *Objects) *rbacv1.ClusterRole { return o.ReleaseRole }
	compositions := func(o *Objects) *rbacv1.ClusterRole { return o.CompositionsRole }
	cluster := func(o *Objects) *rbacv1.ClusterRole { return o.ClusterRole }

	tests := []struct {
		name   string
		break_ func(*Objects)
		want   string
	}{
		{"wildcard verb", addTo(release, rule("apps", "deployments", "*")), `wildcard "*"`},
		{"wildcard resource", addTo(release, rule("apps", "*", "get")), `wildcard "*"`},
		{"wildcard group", addTo(cluster, rule("*", "priorityclasses", "get")), `wildcard "*"`},
		{"wildcard subresource", addTo(compositions, rule("composition.krateo.io", "*/status", "get")), `wildcard "*/status"`},
		{"wildcard resource name", addTo(release, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"*"}, Verbs: []string{"get"}}), `wildcard "*"`},
		{"escalate", addTo(cluster, rule("scheduling.k8s.io", "priorityclasses", "escalate")), "grants escalate"},
		{"bind", addTo(release, rule("apps", "deployments", "bind")), "grants bind"},
		{"impersonate", addTo(compositions, rule("", "serviceaccounts", "impersonate")), "grants impersonate"},
		{"roles", addTo(release, rule("rbac.authorization.k8s.io", "roles", "create")), "grants rights on rbac.authorization.k8s.io/roles"},
		{"cluster role bindings", addTo(cluster, rule("rbac.authorization.k8s.io", "clusterrolebindings", "update")), "grants rights on rbac.authorization.k8s.io/clusterrolebindings"},
		{"reading RBAC", addTo(compositions, rule("rbac.authorization.k8s.io", "clusterroles", "get")), "grants rights on rbac.authorization.k8s.io/clusterroles"},
		{"webhooks", addTo(cluster, rule("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "create")), "writes admissionregistration.k8s.io/mutatingwebhookconfigurations"},
		{"namespaces", addTo(cluster, rule("", "namespaces", "delete")), "writes namespaces"},
		{"tokens", addTo(compositions, rule("", "serviceaccounts/token", "create")), "writes serviceaccounts/token"},
		{"secrets in the compositions role", addTo(compositions, rule("", "secrets", "get")), "grants Secrets cluster-wide"},
		{"secrets in the cluster role", addTo(cluster, rule("", "secrets", "list")), "grants Secrets cluster-wide"},
		{"a subresource in the release role", addTo(release, rule("", "pods/exec", "create")), "grants the subresource pods/exec"},
		{"non-resource URLs", addTo(release, rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}), "non-resource URLs"},
		{"an empty rule", addTo(release, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}}), "needs groups, resources and verbs"},
		{"aggregation", func(o *Objects) {
			o.ReleaseRole.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{}}}
		}, "aggregates other roles"},
		{"another subject", func(o *Objects) {
			o.CompositionsBinding.Subjects = append(o.CompositionsBinding.Subjects, rbacv1.Subject{Kind: "Group", Name: "system:authenticated"})
		}, "not only ServiceAccount"},
		{"another role", func(o *Objects) { o.ClusterBinding.RoleRef.Name = "cluster-admin" }, "refers to ClusterRole cluster-admin"},
		{"release role bound to another account", func(o *Objects) { o.ServiceAccount.Name = "default" }, "not only ServiceAccount"},
		{"a cluster role without binding", func(o *Objects) { o.ClusterBinding = nil }, "come together"},
		{"no release role", func(o *Objects) { o.ReleaseRole = nil }, "are required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := good(t)
			require.NoError(t, Check(objs))
			tt.break_(objs)
			err := Check(objs)
			assert.True(t, errors.Is(err, ErrUnsafe), "got %v", err)
			assert.ErrorContains(t, err, tt.want)
		})
	}
	assert.True(t, errors.Is(Check(nil), ErrUnsafe))
}

// Check reports every violation at once.
func TestCheckListsEveryViolation(t *testing.T) {
	objs, err := Generate(fireworksOptions(t, "1.1.5", fireworksTypes(t)["1.1.5"]))
	require.NoError(t, err)
	objs.ReleaseRole.Rules = append(objs.ReleaseRole.Rules,
		rbacv1.PolicyRule{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}},
	)
	err = Check(objs)
	assert.ErrorContains(t, err, `wildcard "*"`)
	assert.ErrorContains(t, err, "grants impersonate")
}
