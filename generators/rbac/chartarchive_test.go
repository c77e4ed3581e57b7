package rbac

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
)

const (
	archiveDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	otherDigest   = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func archiveOptions(t *testing.T) Options {
	opts := fireworksOptions(t, "1.1.5", nil)
	opts.ChartArchiveNamespace, opts.ChartDigest = "compositor-system", archiveDigest
	return opts
}

// The Role and RoleBinding that let a controller read its kept chart archive, exactly.
func TestChartArchiveRoleShape(t *testing.T) {
	objs, err := Generate(archiveOptions(t))
	require.NoError(t, err)
	name := "compositor:fireworksapp-system:fireworksapps-v1-1-5:chart-archive"
	labels := map[string]string{
		vocab.LabelManagedBy: vocab.ManagedBy, vocab.LabelDefinitionNamespace: "fireworksapp-system", vocab.LabelDefinitionName: "fireworksapp-1-1-5",
		vocab.LabelResource: "fireworksapps", vocab.LabelVersion: "v1-1-5",
	}
	assert.Equal(t, &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "compositor-system", Labels: labels},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"},
			ResourceNames: []string{"chart-0123456789abcdef0123"},
		}},
	}, objs.ChartArchiveRole)
	assert.Equal(t, &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "compositor-system", Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{
			Kind: "ServiceAccount", Name: ServiceAccountName("fireworksapp-system", "fireworksapps", "v1-1-5"), Namespace: "compositor-system",
		}},
	}, objs.ChartArchiveBinding)
	assert.Equal(t, chartfetch.KeptArchiveSecretName(archiveDigest), objs.ChartArchiveRole.Rules[0].ResourceNames[0],
		"the name the Store keeps the archive under")
	assert.Equal(t, name, NamesFor("fireworksapp-system", "fireworksapps", "v1-1-5").ChartArchive)

	// Roles before bindings, each once.
	list := objs.List()
	role := indexOf(list, objs.ChartArchiveRole)
	binding := indexOf(list, objs.ChartArchiveBinding)
	require.GreaterOrEqual(t, role, 0)
	require.GreaterOrEqual(t, binding, 0)
	assert.Less(t, role, indexOf(list, objs.CompositionsBinding), "roles come before bindings")
	assert.Less(t, role, binding)

	// A new chart version names its own archive.
	opts := archiveOptions(t)
	opts.ChartDigest = otherDigest
	objs, err = Generate(opts)
	require.NoError(t, err)
	assert.Equal(t, []string{"chart-fedcba9876543210fedc"}, objs.ChartArchiveRole.Rules[0].ResourceNames)
}

func indexOf(list []client.Object, obj client.Object) int {
	for i, o := range list {
		if o == obj {
			return i
		}
	}
	return -1
}

func TestNoChartArchiveRoleWithoutItsNamespace(t *testing.T) {
	opts := archiveOptions(t)
	opts.ChartArchiveNamespace = ""
	objs, err := Generate(opts)
	require.NoError(t, err)
	assert.Nil(t, objs.ChartArchiveRole)
	assert.Nil(t, objs.ChartArchiveBinding)
	for _, obj := range objs.List() {
		assert.NotContains(t, obj.GetName(), "chart-archive")
		if _, role := obj.(*rbacv1.Role); role {
			assert.NotEqual(t, "compositor-system", obj.GetNamespace())
		}
	}
}

func TestChartArchiveOptionsAreValidated(t *testing.T) {
	for name, tweak := range map[string]func(*Options){
		"no digest":       func(o *Options) { o.ChartDigest = "" },
		"short digest":    func(o *Options) { o.ChartDigest = "sha256:0123" },
		"not sha256":      func(o *Options) { o.ChartDigest = strings.Replace(archiveDigest, "sha256", "sha512", 1) },
		"upper case":      func(o *Options) { o.ChartDigest = strings.ToUpper(archiveDigest) },
		"not hex":         func(o *Options) { o.ChartDigest = strings.Replace(archiveDigest, "0", "g", 1) },
		"bad namespace":   func(o *Options) { o.ChartArchiveNamespace = "Compositor_System" },
		"namespace glob*": func(o *Options) { o.ChartArchiveNamespace = "*" },
	} {
		t.Run(name, func(t *testing.T) {
			opts := archiveOptions(t)
			tweak(&opts)
			_, err := Generate(opts)
			assert.ErrorIs(t, err, ErrInvalidOptions)
		})
	}
}

// Check refuses a chart archive Role that grants more than its one archive.
func TestCheckChartArchiveRole(t *testing.T) {
	for name, tweak := range map[string]func(*Objects){
		"any Secret":     func(o *Objects) { o.ChartArchiveRole.Rules[0].ResourceNames = nil },
		"another Secret": func(o *Objects) { o.ChartArchiveRole.Rules[0].ResourceNames = []string{"compositor-webhook-ca"} },
		"two Secrets": func(o *Objects) {
			o.ChartArchiveRole.Rules[0].ResourceNames = append(o.ChartArchiveRole.Rules[0].ResourceNames, "chart-fedcba9876543210fedc")
		},
		"list": func(o *Objects) { o.ChartArchiveRole.Rules[0].Verbs = []string{"get", "list"} },
		"second rule": func(o *Objects) {
			o.ChartArchiveRole.Rules = append(o.ChartArchiveRole.Rules, o.ChartArchiveRole.Rules[0])
		},
		"no binding":        func(o *Objects) { o.ChartArchiveBinding = nil },
		"binding elsewhere": func(o *Objects) { o.ChartArchiveBinding.Namespace = "default" },
		"other role":        func(o *Objects) { o.ChartArchiveBinding.RoleRef.Name = "admin" },
		"other subject": func(o *Objects) {
			o.ChartArchiveBinding.Subjects = append(o.ChartArchiveBinding.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: "default"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := Generate(archiveOptions(t))
			require.NoError(t, err)
			tweak(objs)
			assert.ErrorIs(t, Check(objs), ErrUnsafe)
		})
	}
}
