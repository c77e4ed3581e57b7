package rbac

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/test/golden"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// fireworksOptions are the options the reconciler would pass for the seed manifest's
// definition of a sample chart version.
func fireworksOptions(t testing.TB, chartVersion string, types []ResourceType) Options {
	t.Helper()
	plural, err := crd.Plural(samplecharts.ChartName)
	require.NoError(t, err)
	version, err := crd.VersionName(chartVersion)
	require.NoError(t, err)
	return Options{
		Namespace:         "fireworksapp-system",
		IdentityNamespace: "compositor-system",
		WatchCompositions: true,
		DefinitionName:    "fireworksapp-" + strings.TrimPrefix(version, "v"),
		Plural:            plural,
		Version:           version,
		Types:             types,
	}
}

func marshalObjects(t *testing.T, objs []client.Object) []byte {
	t.Helper()
	var docs []string
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		require.NoError(t, err)
		docs = append(docs, string(b))
	}
	return []byte(strings.Join(docs, "---\n"))
}

func TestGoldenFireworksApp(t *testing.T) {
	for _, v := range []string{"1.1.5", "2.0.0"} {
		t.Run(v, func(t *testing.T) {
			ch, err := samplecharts.Load(v)
			require.NoError(t, err)
			types, err := ResourceTypes(ch, staticMapper(kubeTypes...))
			require.NoError(t, err)
			objs, err := Generate(fireworksOptions(t, v, types))
			require.NoError(t, err)
			golden.Check(t, "fireworks-app-"+v+".rbac.yaml", marshalObjects(t, append(objs.List(), objs.ReleaseBinding("team-a"))))
		})
	}
}

var helmVerbs = []string{"create", "delete", "get", "list", "patch", "update", "watch"}

// compositionWrites are the rights on the compositions, bound per namespace.
var compositionWrites = []rbacv1.PolicyRule{
	{APIGroups: []string{"composition.krateo.io"}, Resources: []string{"fireworksapps"}, Verbs: []string{"get", "list", "watch", "patch", "update"}},
	{APIGroups: []string{"composition.krateo.io"}, Resources: []string{"fireworksapps/status"}, Verbs: []string{"get", "patch", "update"}},
	{APIGroups: []string{"composition.krateo.io"}, Resources: []string{"fireworksapps/finalizers"}, Verbs: []string{"update"}},
}

// The rules, listed exactly (the golden files show them too).
func TestGenerateFireworksAppRules(t *testing.T) {
	releaseStorage := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete", "get", "list", "patch", "update"}}
	revisions := rbacv1.PolicyRule{APIGroups: []string{"core.krateo.io"}, Resources: []string{"compositionrevisions"}, Verbs: []string{"create", "delete", "get", "list", "update"}}
	want := map[string][]rbacv1.PolicyRule{
		"1.1.5": {
			compositionWrites[0], compositionWrites[1], compositionWrites[2],
			{APIGroups: []string{""}, Resources: []string{"configmaps", "services"}, Verbs: helmVerbs},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: helmVerbs},
			releaseStorage,
			revisions,
		},
		"2.0.0": {
			compositionWrites[0], compositionWrites[1], compositionWrites[2],
			{APIGroups: []string{""}, Resources: []string{"configmaps", "services"}, Verbs: helmVerbs},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: helmVerbs},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: helmVerbs},
			releaseStorage,
			revisions,
		},
	}
	// Cluster-wide the controller reads no composition: it lists, watches and writes
	// them where the release role is bound.
	compositions := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"core.krateo.io"}, Resources: []string{"compositiondefinitions"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		{APIGroups: []string{"policy.compositor.dev"}, Resources: []string{"compositionpolicies"}, Verbs: []string{"get", "list", "watch"}},
	}
	types := fireworksTypes(t)
	for v, rules := range want {
		t.Run(v, func(t *testing.T) {
			objs, err := Generate(fireworksOptions(t, v, types[v]))
			require.NoError(t, err)
			version := "v" + strings.ReplaceAll(v, ".", "-")
			assert.Equal(t, ServiceAccountName("fireworksapp-system", "fireworksapps", version), objs.ServiceAccount.Name)
			assert.Equal(t, "compositor-system", objs.ServiceAccount.Namespace, "the identity lives in Compositor's namespace")
			assert.Equal(t, "compositor:fireworksapp-system:fireworksapps-"+version+":compositions", objs.CompositionsRole.Name)
			assert.Equal(t, "compositor:fireworksapp-system:fireworksapps-"+version+":release", objs.ReleaseRole.Name)
			assert.Equal(t, rules, objs.ReleaseRole.Rules)
			assert.Equal(t, compositions, objs.CompositionsRole.Rules)
			assert.Nil(t, objs.ClusterRole, "the chart creates no cluster-scoped type")
			assert.Nil(t, objs.ClusterBinding)
			assert.Len(t, objs.List(), 4)

			rb := objs.ReleaseBinding("team-a")
			assert.Equal(t, "team-a", rb.Namespace)
			assert.Equal(t, "compositor:fireworksapp-system:fireworksapps-"+version, rb.Name)
			assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: objs.ReleaseRole.Name}, rb.RoleRef)
			assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: objs.ServiceAccount.Name, Namespace: "compositor-system"}}, rb.Subjects)
		})
	}
}

func TestGenerateClusterScopedTypes(t *testing.T) {
	opts := fireworksOptions(t, "1.1.5", []ResourceType{kubeType(t, "", "ConfigMap"), kubeType(t, "scheduling.k8s.io", "PriorityClass")})
	objs, err := Generate(opts)
	require.NoError(t, err)
	require.NotNil(t, objs.ClusterRole)
	require.NotNil(t, objs.ClusterBinding)
	assert.Equal(t, "compositor:fireworksapp-system:fireworksapps-v1-1-5:cluster", objs.ClusterRole.Name)
	assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{"scheduling.k8s.io"}, Resources: []string{"priorityclasses"}, Verbs: helmVerbs}}, objs.ClusterRole.Rules)
	assert.Equal(t, objs.ClusterRole.Name, objs.ClusterBinding.RoleRef.Name)
	for _, r := range objs.ReleaseRole.Rules {
		assert.NotContains(t, r.Resources, "priorityclasses", "cluster-scoped rights never sit in the per-namespace role")
	}
	assert.Len(t, objs.List(), 6)
}

// A chart that creates Secrets gets the Helm verbs on them, still only per namespace,
// and no second rule for Helm's storage.
func TestGenerateChartSecrets(t *testing.T) {
	objs, err := Generate(fireworksOptions(t, "1.1.5", []ResourceType{kubeType(t, "", "Secret"), kubeType(t, "", "ConfigMap")}))
	require.NoError(t, err)
	assert.Equal(t, append(slices.Clone(compositionWrites), rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: helmVerbs}, RevisionRule()), objs.ReleaseRole.Rules)
	for _, r := range objs.CompositionsRole.Rules {
		assert.NotContains(t, r.Resources, "secrets")
	}
}

// Names are unique per definition namespace and version, so two definitions never
// write each other's objects.
func TestGenerateNamesAreUnique(t *testing.T) {
	types := fireworksTypes(t)["2.0.0"]
	seen := map[string]string{}
	for _, ns := range []string{"team-a", "team-b"} {
		for _, version := range []string{"v1-1-5", "v2-0-0"} {
			objs, err := Generate(Options{Namespace: ns, Plural: "fireworksapps", Version: version, Types: append(types, kubeType(t, "scheduling.k8s.io", "PriorityClass"))})
			require.NoError(t, err)
			for _, o := range append(objs.List(), objs.ReleaseBinding("shared")) {
				key := o.GetObjectKind().GroupVersionKind().Kind + "/" + o.GetNamespace() + "/" + o.GetName()
				owner := ns + " " + version
				if prev, ok := seen[key]; ok {
					t.Errorf("%s is generated for both %s and %s", key, prev, owner)
				}
				seen[key] = owner
				for _, msg := range validation.IsDNS1123Subdomain(strings.ReplaceAll(o.GetName(), ":", "-")) {
					t.Errorf("%s: %s", key, msg)
				}
			}
		}
	}
}

func TestGenerateLabels(t *testing.T) {
	long := strings.Repeat("a-very-long-definition-name", 5)
	objs, err := Generate(Options{
		Namespace: "ns", DefinitionName: long, Plural: "fireworksapps", Version: "v1-1-5",
		Labels: map[string]string{"team": "blue", vocab.LabelVersion: "overridden"},
	})
	require.NoError(t, err)
	for _, o := range append(objs.List(), objs.ReleaseBinding("team-a")) {
		labels := o.GetLabels()
		assert.Equal(t, "blue", labels["team"])
		for k, v := range IdentityLabels("ns", "fireworksapps", "v1-1-5") {
			assert.Equal(t, v, labels[k], "identity labels win")
		}
		assert.Empty(t, validation.IsValidLabelValue(labels[vocab.LabelDefinitionName]))
		assert.True(t, strings.HasPrefix(labels[vocab.LabelDefinitionName], "a-very-long"))
	}
	assert.NotEqual(t, LabelValue(long), LabelValue(long+"x"), "a hash tells long names apart")
	assert.Equal(t, "short", LabelValue("short"))
}

func TestGenerateInvalidOptions(t *testing.T) {
	for name, opts := range map[string]Options{
		"no namespace":   {Plural: "fireworksapps", Version: "v1-1-5"},
		"bad plural":     {Namespace: "ns", Plural: "Fireworks_Apps", Version: "v1-1-5"},
		"no version":     {Namespace: "ns", Plural: "fireworksapps"},
		"bad group":      {Namespace: "ns", Plural: "fireworksapps", Version: "v1", Group: "not a group"},
		"type, resource": {Namespace: "ns", Plural: "fireworksapps", Version: "v1", Types: []ResourceType{{Kind: "ConfigMap", Version: "v1"}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Generate(opts)
			assert.True(t, errors.Is(err, ErrInvalidOptions), "got %v", err)
		})
	}
}

// Types that reach Generate without ResourceTypes' refusals are still caught by Check.
func TestGenerateRefusesUnsafeTypes(t *testing.T) {
	for name, types := range map[string][]ResourceType{
		"roles":              {kubeType(t, "rbac.authorization.k8s.io", "Role")},
		"webhooks":           {kubeType(t, "admissionregistration.k8s.io", "ValidatingWebhookConfiguration")},
		"secrets by cluster": {{Version: "v1", Kind: "Secret", Resource: "secrets"}},
		"a wildcard":         {{Group: "apps", Version: "v1", Kind: "Any", Resource: "*", Namespaced: true}},
		"a subresource":      {{Version: "v1", Kind: "Pod", Resource: "pods/exec", Namespaced: true}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Generate(Options{Namespace: "ns", Plural: "fireworksapps", Version: "v1", Types: types})
			assert.True(t, errors.Is(err, ErrUnsafe), "got %v", err)
		})
	}
}

// A chart with credentials gives the controller get on that one Secret, by name, in
// the definition namespace; Check refuses anything wider.
func TestGenerateCredentialsRole(t *testing.T) {
	opts := fireworksOptions(t, "1.1.5", fireworksTypes(t)["1.1.5"])
	opts.CredentialsSecret = "repo-password"
	objs, err := Generate(opts)
	require.NoError(t, err)
	role, binding := objs.CredentialsRole, objs.CredentialsBinding
	require.NotNil(t, role)
	require.NotNil(t, binding)
	assert.Equal(t, "compositor:fireworksapp-system:fireworksapps-v1-1-5:credentials", role.Name)
	assert.Equal(t, "fireworksapp-system", role.Namespace)
	assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"repo-password"}}}, role.Rules)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, binding.RoleRef)
	assert.Equal(t, "fireworksapp-system", binding.Namespace)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: objs.ServiceAccount.Name, Namespace: "compositor-system"}}, binding.Subjects,
		"the Role in the definition's namespace binds the ServiceAccount in Compositor's")
	assert.Contains(t, objs.List(), client.Object(role))
	assert.Contains(t, objs.List(), client.Object(binding))

	for name, tamper := range map[string]func(o *Objects){
		"list":              func(o *Objects) { o.CredentialsRole.Rules[0].Verbs = []string{"get", "list"} },
		"every Secret":      func(o *Objects) { o.CredentialsRole.Rules[0].ResourceNames = nil },
		"two Secrets":       func(o *Objects) { o.CredentialsRole.Rules[0].ResourceNames = []string{"a", "b"} },
		"another namespace": func(o *Objects) { o.CredentialsRole.Namespace = "team-a" },
		"another subject":   func(o *Objects) { o.CredentialsBinding.Subjects[0].Name = "someone" },
		"binding alone":     func(o *Objects) { o.CredentialsRole = nil },
	} {
		t.Run(name, func(t *testing.T) {
			o, err := Generate(opts)
			require.NoError(t, err)
			tamper(o)
			assert.ErrorIs(t, Check(o), ErrUnsafe)
		})
	}

	opts.CredentialsSecret = "Not A Name"
	_, err = Generate(opts)
	assert.ErrorIs(t, err, ErrInvalidOptions)
}

// A version whose chart lacks a type another version of the kind creates may read and
// delete it, no more: a composition moved here from that version is upgraded to this
// chart, and Helm removes what the old revision had only when it can read it.
func TestGenerateRemovedTypes(t *testing.T) {
	opts := fireworksOptions(t, "1.1.5", fireworksTypes(t)["1.1.5"])
	opts.RemovedTypes = append(fireworksTypes(t)["2.0.0"], // the chart's own types are not repeated
		kubeType(t, "scheduling.k8s.io", "PriorityClass"),       // cluster-scoped: not here
		kubeType(t, "rbac.authorization.k8s.io", "RoleBinding")) // never granted
	objs, err := Generate(opts)
	require.NoError(t, err)
	assert.Equal(t, []rbacv1.PolicyRule{
		compositionWrites[0], compositionWrites[1], compositionWrites[2],
		{APIGroups: []string{""}, Resources: []string{"configmaps", "services"}, Verbs: helmVerbs},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: helmVerbs},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: []string{"delete", "get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete", "get", "list", "patch", "update"}},
		RevisionRule(),
	}, objs.ReleaseRole.Rules)
	assert.Nil(t, objs.ClusterRole)
}
