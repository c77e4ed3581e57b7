package rbac

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// A version's identity is named for its definition namespace, plural and version, so
// two teams' definitions of one chart version never share it, and the name is a valid
// DNS label (and label value) whatever the lengths of its parts.
func TestServiceAccountNameIsUniqueAndValid(t *testing.T) {
	long := strings.Repeat("n", 63)
	cases := [][3]string{
		{"team-a", "fireworksapps", "v1-1-5"},
		{"team-b", "fireworksapps", "v1-1-5"},
		{"team-a", "fireworksapps", "v1-1-6"},
		{"a-b", "c", "v1"}, // the readable parts alone would collide with the next
		{"a", "b-c", "v1"},
		{long, "fireworksapps", "v1-1-5"},
		{long, "fireworksapps", "v1-1-6"}, // same first 52 characters
		{long, strings.Repeat("p", 63), strings.Repeat("v", 63)},
	}
	seen := map[string][3]string{}
	for _, c := range cases {
		name := ServiceAccountName(c[0], c[1], c[2])
		assert.Empty(t, validation.IsDNS1123Label(name), name)
		assert.Empty(t, validation.IsValidLabelValue(name), name)
		readable := c[0] + "-" + c[1] + "-" + c[2]
		assert.True(t, strings.HasPrefix(name, readable[:min(len(readable), identityPrefixLen)]+"-"), "readable: %s", name)
		if other, dup := seen[name]; dup {
			t.Errorf("%v and %v share the name %s", c, other, name)
		}
		seen[name] = c
	}
	assert.Equal(t, "fireworksapps-v1-1-5-controller", LegacyServiceAccountName("fireworksapps", "v1-1-5"))
}

// Every binding names the ServiceAccount in Compositor's namespace; while an
// installation moves, also the one it had in the definition's namespace, and Check
// admits no third.
func TestFormerServiceAccountWhileMoving(t *testing.T) {
	opts := fireworksOptions(t, "1.1.5", fireworksTypes(t)["1.1.5"])
	opts.CredentialsSecret = "repo-password"
	opts.ChartArchiveNamespace, opts.ChartDigest = "compositor-system", archiveDigest
	self := rbacv1.Subject{Kind: "ServiceAccount", Name: ServiceAccountName("fireworksapp-system", "fireworksapps", "v1-1-5"), Namespace: "compositor-system"}
	legacy := rbacv1.Subject{Kind: "ServiceAccount", Name: "fireworksapps-v1-1-5-controller", Namespace: "fireworksapp-system"}

	objs, err := Generate(opts)
	require.NoError(t, err)
	for _, s := range bindingSubjects(objs) {
		assert.Equal(t, []rbacv1.Subject{self}, s)
	}
	assert.Equal(t, []rbacv1.Subject{self, legacy}, objs.WithFormer().ReleaseBinding("team-a").Subjects)
	assert.Equal(t, []rbacv1.Subject{self}, objs.ReleaseBinding("team-a").Subjects, "WithFormer copies")

	opts.FormerServiceAccount = true
	moving, err := Generate(opts)
	require.NoError(t, err)
	for _, s := range bindingSubjects(moving) {
		assert.Equal(t, []rbacv1.Subject{self, legacy}, s)
	}

	moving.CredentialsBinding.Subjects = append(moving.CredentialsBinding.Subjects,
		rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: "fireworksapp-system"})
	assert.ErrorIs(t, Check(moving), ErrUnsafe)
}

// In process the controller reads through Compositor's informers: it gets no right to
// list or watch compositions across namespaces. Writing them is the release role's,
// bound per namespace, in either mode.
func TestNoClusterWideCompositionWrites(t *testing.T) {
	for _, watch := range []bool{false, true} {
		opts := fireworksOptions(t, "1.1.5", fireworksTypes(t)["1.1.5"])
		opts.WatchCompositions = watch
		objs, err := Generate(opts)
		require.NoError(t, err)
		for _, r := range objs.CompositionsRole.Rules {
			for _, res := range r.Resources {
				if strings.HasPrefix(res, "fireworksapps") {
					assert.True(t, watch, "compositions listed cluster-wide in process: %v", r)
					assert.Equal(t, []string{"list", "watch"}, r.Verbs)
					assert.Equal(t, "fireworksapps", res)
				}
			}
		}
		assert.Subset(t, objs.ReleaseRole.Rules, compositionWrites)
	}
}

// The credentials Role stays beside its Secret, in the definition's namespace; a Role
// elsewhere fails Check.
func TestCredentialsRoleInTheDefinitionNamespace(t *testing.T) {
	opts := fireworksOptions(t, "1.1.5", nil)
	opts.CredentialsSecret = "repo-password"
	objs, err := Generate(opts)
	require.NoError(t, err)
	objs.CredentialsRole.Namespace, objs.CredentialsBinding.Namespace = "compositor-system", "compositor-system"
	assert.ErrorIs(t, Check(objs), ErrUnsafe)
}

func bindingSubjects(o *Objects) [][]rbacv1.Subject {
	out := [][]rbacv1.Subject{o.CompositionsBinding.Subjects, o.ReleaseBinding("team-a").Subjects}
	for _, b := range []*rbacv1.RoleBinding{o.CredentialsBinding, o.ChartArchiveBinding, o.ReleaseSealBinding} {
		if b != nil {
			out = append(out, b.Subjects)
		}
	}
	return out
}
