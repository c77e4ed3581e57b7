package rbac

import (
	"testing"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func sealOptions(t *testing.T) Options {
	opts := fireworksOptions(t, "1.1.5", nil)
	opts.ReleaseSealNamespace = "compositor-system"
	opts.SealKeySecrets = []string{keyY, keyX}
	return opts
}

// The key Secrets of two definitions of one namespace (reconciler/composition
// KeySecretName).
const (
	keyX = "compositor-seal-0123456789abcdef01234567"
	keyY = "compositor-seal-89abcdef0123456789abcdef"
)

// The Role and RoleBinding that let a controller read the keys of its definitions,
// exactly: get on their key Secrets in Compositor's namespace, never the master key
// compositor-release-seal, bound to the version's ServiceAccount alone.
func TestReleaseSealRoleShape(t *testing.T) {
	objs, err := Generate(sealOptions(t))
	require.NoError(t, err)
	name := "compositor:fireworksapp-system:fireworksapps-v1-1-5:release-seal"
	labels := map[string]string{
		vocab.LabelManagedBy: vocab.ManagedBy, vocab.LabelDefinitionNamespace: "fireworksapp-system", vocab.LabelDefinitionName: "fireworksapp-1-1-5",
		vocab.LabelResource: "fireworksapps", vocab.LabelVersion: "v1-1-5",
	}
	assert.Equal(t, &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "compositor-system", Labels: labels},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"},
			ResourceNames: []string{keyX, keyY},
		}, {
			// The Gatekeeper constraints serve enforces, for the install gate.
			APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"},
			ResourceNames: []string{"compositor-constraints"},
		}, {
			// The namespaces where its release role is bound: its informer watches there.
			APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"},
			ResourceNames: []string{ServiceAccountName("fireworksapp-system", "fireworksapps", "v1-1-5") + "-namespaces"},
		}},
	}, objs.ReleaseSealRole)
	assert.Equal(t, &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "compositor-system", Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{
			Kind: "ServiceAccount", Name: ServiceAccountName("fireworksapp-system", "fireworksapps", "v1-1-5"), Namespace: "compositor-system",
		}},
	}, objs.ReleaseSealBinding)
	assert.Equal(t, name, NamesFor("fireworksapp-system", "fireworksapps", "v1-1-5").ReleaseSeal)
	assert.Equal(t, "compositor-release-seal", ReleaseSealSecret, "the name compositor serve keeps the key under")

	// Roles before bindings, each once.
	list := objs.List()
	role := indexOf(list, objs.ReleaseSealRole)
	binding := indexOf(list, objs.ReleaseSealBinding)
	require.GreaterOrEqual(t, role, 0)
	require.GreaterOrEqual(t, binding, 0)
	assert.Less(t, role, indexOf(list, objs.CompositionsBinding), "roles come before bindings")
	assert.Less(t, role, binding)
	seen := map[string]int{}
	for _, obj := range list {
		seen[obj.GetObjectKind().GroupVersionKind().Kind+" "+obj.GetNamespace()+"/"+obj.GetName()]++
	}
	for key, n := range seen {
		assert.Equal(t, 1, n, key)
	}
}

// The seal Role and the chart archive Role are two objects with one Secret each, in
// Compositor's namespace: neither widens the other.
func TestReleaseSealRoleBesideTheChartArchiveRole(t *testing.T) {
	opts := sealOptions(t)
	opts.ChartArchiveNamespace, opts.ChartDigest = "compositor-system", archiveDigest
	objs, err := Generate(opts)
	require.NoError(t, err)
	assert.Equal(t, []string{keyX, keyY}, objs.ReleaseSealRole.Rules[0].ResourceNames)
	assert.Equal(t, []string{"chart-0123456789abcdef0123"}, objs.ChartArchiveRole.Rules[0].ResourceNames)
	assert.NotEqual(t, objs.ReleaseSealRole.Name, objs.ChartArchiveRole.Name)

	// Each Role is checked for its own Secret: the archive Role may not name the seal,
	// nor the seal Role an archive.
	swapped, err := Generate(opts)
	require.NoError(t, err)
	swapped.ChartArchiveRole.Rules[0].ResourceNames = []string{ReleaseSealSecret}
	assert.ErrorIs(t, Check(swapped), ErrUnsafe)
	swapped, err = Generate(opts)
	require.NoError(t, err)
	swapped.ReleaseSealRole.Rules[0].ResourceNames = []string{"chart-0123456789abcdef0123"}
	assert.ErrorIs(t, Check(swapped), ErrUnsafe)
}

// Without its namespace (in-process controllers, which have the seal from Compositor)
// there is no seal Role.
func TestNoReleaseSealRoleWithoutItsNamespace(t *testing.T) {
	objs, err := Generate(fireworksOptions(t, "1.1.5", nil))
	require.NoError(t, err)
	assert.Nil(t, objs.ReleaseSealRole)
	assert.Nil(t, objs.ReleaseSealBinding)
	for _, obj := range objs.List() {
		assert.NotContains(t, obj.GetName(), "release-seal")
		if _, role := obj.(*rbacv1.Role); role {
			assert.NotEqual(t, "compositor-system", obj.GetNamespace())
		}
	}
}

func TestReleaseSealOptionsAreValidated(t *testing.T) {
	for name, namespace := range map[string]string{
		"bad namespace":   "Compositor_System",
		"namespace glob*": "*",
		"two namespaces":  "a,b",
	} {
		t.Run(name, func(t *testing.T) {
			opts := sealOptions(t)
			opts.ReleaseSealNamespace = namespace
			_, err := Generate(opts)
			assert.ErrorIs(t, err, ErrInvalidOptions)
		})
	}
	for name, keys := range map[string][]string{
		"no keys":        nil,
		"the master key": {ReleaseSealSecret},
		"a glob":         {"compositor-seal-*"},
		"short":          {"compositor-seal-0123"},
	} {
		t.Run(name, func(t *testing.T) {
			opts := sealOptions(t)
			opts.SealKeySecrets = keys
			_, err := Generate(opts)
			assert.ErrorIs(t, err, ErrInvalidOptions)
		})
	}
}

// Check refuses a seal Role that grants more than get on its definitions' key Secrets
// (the master key above all), and a
// binding of it to anything but the version's ServiceAccount.
func TestCheckReleaseSealRole(t *testing.T) {
	for name, tweak := range map[string]func(*Objects){
		"any Secret":     func(o *Objects) { o.ReleaseSealRole.Rules[0].ResourceNames = nil },
		"another Secret": func(o *Objects) { o.ReleaseSealRole.Rules[0].ResourceNames = []string{"compositor-webhook-ca"} },
		"a look-alike":   func(o *Objects) { o.ReleaseSealRole.Rules[0].ResourceNames = []string{"compositor-release-seal-2"} },
		"the master key": func(o *Objects) { o.ReleaseSealRole.Rules[0].ResourceNames = []string{ReleaseSealSecret} },
		"the master key too": func(o *Objects) {
			o.ReleaseSealRole.Rules[0].ResourceNames = append(o.ReleaseSealRole.Rules[0].ResourceNames, ReleaseSealSecret)
		},
		"a key glob": func(o *Objects) { o.ReleaseSealRole.Rules[0].ResourceNames = []string{"compositor-seal-*"} },
		"a glob":     func(o *Objects) { o.ReleaseSealRole.Rules[0].ResourceNames = []string{"compositor-release-*"} },
		"two Secrets": func(o *Objects) {
			o.ReleaseSealRole.Rules[0].ResourceNames = append(o.ReleaseSealRole.Rules[0].ResourceNames, "compositor-webhook-ca")
		},
		"list":   func(o *Objects) { o.ReleaseSealRole.Rules[0].Verbs = []string{"get", "list"} },
		"watch":  func(o *Objects) { o.ReleaseSealRole.Rules[0].Verbs = []string{"get", "watch"} },
		"update": func(o *Objects) { o.ReleaseSealRole.Rules[0].Verbs = []string{"get", "update"} },
		"every verb": func(o *Objects) {
			o.ReleaseSealRole.Rules[0].Verbs = []string{"*"}
		},
		"ConfigMaps too": func(o *Objects) {
			o.ReleaseSealRole.Rules[0].Resources = []string{"secrets", "configmaps"}
		},
		"another group": func(o *Objects) { o.ReleaseSealRole.Rules[0].APIGroups = []string{"apps"} },
		"second rule": func(o *Objects) {
			o.ReleaseSealRole.Rules = append(o.ReleaseSealRole.Rules, rbacv1.PolicyRule{
				APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"},
			})
		},
		"no rules":          func(o *Objects) { o.ReleaseSealRole.Rules = nil },
		"no binding":        func(o *Objects) { o.ReleaseSealBinding = nil },
		"no role":           func(o *Objects) { o.ReleaseSealRole = nil },
		"binding elsewhere": func(o *Objects) { o.ReleaseSealBinding.Namespace = "default" },
		"other role":        func(o *Objects) { o.ReleaseSealBinding.RoleRef.Name = "admin" },
		"a ClusterRole":     func(o *Objects) { o.ReleaseSealBinding.RoleRef.Kind = "ClusterRole" },
		"other subject": func(o *Objects) {
			o.ReleaseSealBinding.Subjects = []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: "fireworksapp-system"}}
		},
		"another subject too": func(o *Objects) {
			o.ReleaseSealBinding.Subjects = append(o.ReleaseSealBinding.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: "default"})
		},
		"a group": func(o *Objects) {
			o.ReleaseSealBinding.Subjects = []rbacv1.Subject{{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}}
		},
		"no subject": func(o *Objects) { o.ReleaseSealBinding.Subjects = nil },
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := Generate(sealOptions(t))
			require.NoError(t, err)
			require.NoError(t, Check(objs))
			tweak(objs)
			assert.ErrorIs(t, Check(objs), ErrUnsafe)
		})
	}
}
