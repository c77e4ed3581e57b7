package composition

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/client-go/rest"

	"github.com/compositor-dev/compositor/generators"
)

func TestFingerprint(t *testing.T) {
	a, err := Fingerprint("sha256:chart", map[string]interface{}{"replicaCount": int64(1), "service": map[string]interface{}{"type": "ClusterIP", "port": int64(80)}})
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		digest string
		values map[string]interface{}
		same   bool
	}{
		"same values in another order": {"sha256:chart", map[string]interface{}{"service": map[string]interface{}{"port": int64(80), "type": "ClusterIP"}, "replicaCount": int64(1)}, true},
		"another value":                {"sha256:chart", map[string]interface{}{"replicaCount": int64(2), "service": map[string]interface{}{"type": "ClusterIP", "port": int64(80)}}, false},
		"another chart":                {"sha256:other", map[string]interface{}{"replicaCount": int64(1), "service": map[string]interface{}{"type": "ClusterIP", "port": int64(80)}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := Fingerprint(tc.digest, tc.values)
			require.NoError(t, err)
			assert.Equal(t, tc.same, a == b)
		})
	}
	empty, err := Fingerprint("sha256:chart", nil)
	require.NoError(t, err)
	alsoEmpty, err := Fingerprint("sha256:chart", map[string]interface{}{})
	require.NoError(t, err)
	assert.Equal(t, empty, alsoEmpty, "no spec and an empty spec are the same values")
}

// Helm writes into the chart it installs; the copy keeps the cached chart intact.
func TestCopyChartLeavesTheOriginalAlone(t *testing.T) {
	sub := &chart.Chart{Metadata: &chart.Metadata{Name: "sub", Version: "1.0.0"}, Values: map[string]interface{}{"a": map[string]interface{}{"b": 1}}}
	parent := &chart.Chart{
		Metadata:  &chart.Metadata{Name: "parent", Version: "1.0.0", Dependencies: []*chart.Dependency{{Name: "sub", Condition: "sub.enabled"}}},
		Values:    map[string]interface{}{"replicaCount": 1},
		Templates: []*chartcommon.File{{Name: "templates/a.yaml"}},
	}
	parent.SetDependencies(sub)

	copied, err := generators.CopyChart(parent)
	require.NoError(t, err)
	copied.Values["replicaCount"] = 3
	copied.Metadata.Dependencies[0].Condition = ""
	copied.Templates = append(copied.Templates[:0], &chartcommon.File{Name: "templates/b.yaml"})
	copied.Dependencies()[0].Values["a"].(map[string]interface{})["b"] = 2
	copied.SetDependencies()

	assert.Equal(t, 1, parent.Values["replicaCount"])
	assert.Equal(t, "sub.enabled", parent.Metadata.Dependencies[0].Condition)
	assert.Equal(t, "templates/a.yaml", parent.Templates[0].Name)
	assert.Equal(t, 1, sub.Values["a"].(map[string]interface{})["b"])
	assert.Len(t, parent.Dependencies(), 1)
}

// Helm's getter hands out the identity it was built with, and the release namespace.
func TestHelmGetterKeepsIdentityAndNamespace(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1", Impersonate: rest.ImpersonationConfig{UserName: "system:serviceaccount:team-a:fireworksapps-v1-1-5-controller"}}
	helm, err := NewHelm(cfg, testSeal(t), logr.Discard())
	require.NoError(t, err)
	getter := helm.Getter("apps")
	got, err := getter.ToRESTConfig()
	require.NoError(t, err)
	assert.Equal(t, cfg.Impersonate.UserName, got.Impersonate.UserName)
	got.Impersonate.UserName = "changed"
	again, err := getter.ToRESTConfig()
	require.NoError(t, err)
	assert.Equal(t, cfg.Impersonate.UserName, again.Impersonate.UserName, "callers get a copy")
	namespace, explicit, err := getter.ToRawKubeConfigLoader().Namespace()
	require.NoError(t, err)
	assert.Equal(t, "apps", namespace)
	assert.True(t, explicit)
}
