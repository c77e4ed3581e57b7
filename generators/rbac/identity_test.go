package rbac

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
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
		{long, "fireworksapps", "v1-1-6"}, // same first 46 characters
		{long, strings.Repeat("p", 63), strings.Repeat("v", 63)},
	}
	seen := map[string][3]string{}
	for _, c := range cases {
		name := ServiceAccountName(c[0], c[1], c[2])
		assert.Empty(t, validation.IsDNS1123Label(name), name)
		assert.Empty(t, validation.IsValidLabelValue(name), name)
		readable := c[0] + "-" + c[1] + "-" + c[2]
		readable = readable[:min(len(readable), 46)]
		assert.True(t, strings.HasPrefix(name, readable+"-"), "readable: %s", name)
		// 64 bits of hash, not 40: a collision is not there for the finding.
		assert.Regexp(t, `^-[0-9a-f]{16}$`, strings.TrimPrefix(name, readable), name)
		assert.LessOrEqual(t, len(name), 63, name)
		if other, dup := seen[name]; dup {
			t.Errorf("%v and %v share the name %s", c, other, name)
		}
		seen[name] = c
	}
	assert.Equal(t, "fireworksapps-v1-1-5-controller", LegacyServiceAccountName("fireworksapps", "v1-1-5"))
}

// Every binding names the ServiceAccount in Compositor's namespace. While an
// installation moves, the release bindings (per namespace where the definition owns
// compositions) also name the one it had in the definition's namespace, so that the
// old controller goes on installing; no other binding ever does: not the seal keys,
// the chart archive, the credentials nor anything cluster-wide, whose token a tenant
// of the definition's namespace could mint. Check admits no third subject, and the
// former one nowhere but in a release binding.
func TestFormerServiceAccountWhileMoving(t *testing.T) {
	opts := fireworksOptions(t, "1.1.5", fireworksTypes(t)["1.1.5"])
	opts.CredentialsSecret = "repo-password"
	opts.ChartArchiveNamespace, opts.ChartDigest = "compositor-system", archiveDigest
	opts.ReleaseSealNamespace, opts.SealKeySecrets = "compositor-system", []string{SealKeySecretPrefix + "0123456789abcdef01234567"}
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
	assert.Equal(t, []rbacv1.Subject{self, legacy}, moving.ReleaseBinding("team-a").Subjects)
	require.NotNil(t, moving.ReleaseSealBinding)
	require.NotNil(t, moving.ChartArchiveBinding)
	for name, s := range map[string][]rbacv1.Subject{
		"release seal": moving.ReleaseSealBinding.Subjects, "chart archive": moving.ChartArchiveBinding.Subjects,
		"credentials": moving.CredentialsBinding.Subjects, "compositions": moving.CompositionsBinding.Subjects,
	} {
		assert.Equal(t, []rbacv1.Subject{self}, s, "%s: only the release bindings name the former ServiceAccount", name)
	}

	for name, b := range map[string]*[]rbacv1.Subject{
		"release seal":  &moving.ReleaseSealBinding.Subjects,
		"chart archive": &moving.ChartArchiveBinding.Subjects,
		"credentials":   &moving.CredentialsBinding.Subjects,
		"compositions":  &moving.CompositionsBinding.Subjects,
	} {
		was := *b
		*b = []rbacv1.Subject{self, legacy}
		assert.ErrorIs(t, Check(moving), ErrUnsafe, "%s may not name the former ServiceAccount", name)
		*b = was
	}
	require.NoError(t, Check(moving))

	moving.CredentialsBinding.Subjects = append(moving.CredentialsBinding.Subjects,
		rbacv1.Subject{Kind: "ServiceAccount", Name: "default", Namespace: "fireworksapp-system"})
	assert.ErrorIs(t, Check(moving), ErrUnsafe)
}

// Compositor's record of moves is keyed by the version's definition namespace, plural
// and version, each a DNS label, so the key is a valid ConfigMap key and no two
// versions share one.
func TestMoveKey(t *testing.T) {
	assert.Equal(t, "team-a.fireworksapps.v1-1-5", MoveKey("team-a", "fireworksapps", "v1-1-5"))
	assert.NotEqual(t, MoveKey("a-b", "c", "v1"), MoveKey("a", "b-c", "v1"))
	assert.Empty(t, validation.IsConfigMapKey(MoveKey("team-a", "fireworksapps", "v1-1-5")))
}

// Neither in process nor as a Deployment does a controller get a right on its
// compositions across namespaces: reading and writing them is the release role's,
// bound per namespace. A Deployment may read the ConfigMap that lists those namespaces.
func TestNoClusterWideCompositionReads(t *testing.T) {
	for _, watch := range []bool{false, true} {
		opts := fireworksOptions(t, "1.1.5", fireworksTypes(t)["1.1.5"])
		opts.WatchCompositions = watch
		opts.ReleaseSealNamespace = "compositor-system"
		opts.SealKeySecrets = []string{keyX}
		objs, err := Generate(opts)
		require.NoError(t, err)
		for _, r := range objs.CompositionsRole.Rules {
			for _, res := range r.Resources {
				assert.False(t, strings.HasPrefix(res, "fireworksapps"), "compositions read cluster-wide (watch %v): %v", watch, r)
			}
		}
		bound := NamesFor("fireworksapp-system", "fireworksapps", "v1-1-5").BoundNamespaces
		reads := slices.ContainsFunc(objs.ReleaseSealRole.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.ResourceNames, bound) })
		assert.Equal(t, watch, reads, "the release seal role reads ConfigMap %s", bound)
		if watch {
			assert.Equal(t, types.NamespacedName{Namespace: "compositor-system", Name: bound}, objs.BoundNamespaces)
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
