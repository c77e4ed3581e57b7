package composition

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/policies"
)

// tellsChart renders what a template can tell an install's renders apart by: the
// revision, install or upgrade, the cluster's version and APIs, what lookup finds;
// and, through tpl, a value that may itself hold template actions ("{{" and all).
func tellsChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "tells", Version: "0.1.0"},
		Values:   map[string]any{"note": "hello"},
		Templates: []*chartcommon.File{
			{Name: "templates/cm.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: {{ .Release.Name }}}
data:
  revision: {{ .Release.Revision | quote }}
  upgrade: {{ .Release.IsUpgrade | quote }}
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
  served: {{ .Capabilities.APIVersions.Has "apps/v1/Deployment" | quote }}
  found: {{ dig "data" "flag" "none" (lookup "v1" "ConfigMap" .Release.Namespace "trigger") | quote }}
  note: {{ tpl .Values.note . | quote }}
  literal: "{{ "{{ not an action }}" }} <no val{{ "ue" }}?>"
`)},
			{Name: "templates/NOTES.txt", Data: []byte(`installed revision {{ .Release.Revision }}`)},
		},
	}
}

// Issue 47, the differential test: what the install gate judged is what Helm applied,
// object for object — the release manifest and the live object — at the install and
// at the upgrades to revisions 2 and 3, for a chart whose render depends on the
// revision, the cluster's capabilities and lookup; and it is what a render with the
// same inputs (policies.Render, as admission renders) gives.
func TestHelmAppliesTheRenderTheGateJudged(t *testing.T) {
	env := newAttackEnv(t, "tells")
	ctx := context.Background()
	require.NoError(t, env.cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "trigger", Namespace: env.namespace}, Data: map[string]string{"flag": "on"}}))
	ch := tellsChart()
	caps, err := env.helm.capabilities(ctx)
	require.NoError(t, err)
	require.NotEqual(t, chartcommon.DefaultCapabilities.KubeVersion.Version, caps.KubeVersion.Version, "the API server's version is not Helm's default")

	var last *release.Release
	notes := []string{"plain", "{{ .Release.Revision }} of {{ .Release.Name }}", "{{ `{{` }} braces"}
	for i, note := range notes {
		revision := i + 1
		values := map[string]any{"note": note}
		gate := env.gate(ctx, nil)
		outcome, rel, err := env.helm.UpgradeInstall(ctx, env.namespace, "r", ch, values, InstallOptions{Last: last, Gate: gate})
		require.NoError(t, err, "revision %d", revision)
		require.Equal(t, revision, rel.Version)
		if revision == 1 {
			assert.Equal(t, Installed, outcome)
		} else {
			assert.Equal(t, Upgraded, outcome)
		}
		last = rel

		// What Helm sends is the object of its manifest, placed in the release
		// namespace (its builder sets it) and with the release's ownership metadata.
		inNamespace := func(objs []policies.RenderedObject) []policies.RenderedObject {
			for _, o := range objs {
				o.Object["metadata"].(map[string]any)["namespace"] = env.namespace
			}
			return objs
		}
		applied, err := policies.ParseManifests(rel.Manifest)
		require.NoError(t, err)
		for i := range applied {
			applied[i].Object = policies.HelmOwned(applied[i].Object, "r", env.namespace, false)
		}
		applied = inNamespace(applied)
		require.Len(t, gate.judged, 1)
		assert.Equal(t, applied, gate.judged, "revision %d: the manifest Helm recorded is the one judged", revision)

		same, err := policies.Render(ch, values, policies.RenderOptions{
			ReleaseName: "r", Namespace: env.namespace, IsUpgrade: revision > 1, Revision: revision,
			Capabilities: caps, Lookup: env.helm.lookup(ctx, env.namespace, nil, lookupBoundsOf(0)),
		})
		require.NoError(t, err)
		assert.Equal(t, inNamespace(same), gate.judged, "revision %d: a render with the same inputs judges the same objects", revision)

		live := &corev1.ConfigMap{}
		require.NoError(t, env.cp.Client.Get(ctx, client.ObjectKey{Namespace: env.namespace, Name: "r"}, live))
		judgedData := gate.judged[0].Object["data"].(map[string]any)
		for k, v := range judgedData {
			assert.Equal(t, v, live.Data[k], "revision %d: the live ConfigMap's %s is what was judged", revision, k)
		}
		assert.Len(t, live.Data, len(judgedData))
		assert.Equal(t, map[string]string{
			"revision": itoa(revision), "upgrade": map[bool]string{true: "true", false: "false"}[revision > 1],
			"kube": caps.KubeVersion.Version, "served": "true", "found": "on",
			"note":    []string{"plain", itoa(revision) + " of r", "{{ braces"}[i],
			"literal": "{{ not an action }} <no value?>",
		}, live.Data, "revision %d", revision)
		assert.Equal(t, "installed revision "+itoa(revision), rel.Info.Notes)
	}
}

// A render that looks outside its namespace fails as Helm's would, through the
// confined client, and installs nothing; a render holding "<no value>", which Helm's
// render would remove, is refused rather than applied differently from how it was
// judged.
func TestTheInstallRenderIsConfinedAndExact(t *testing.T) {
	env := newAttackEnv(t, "confined")
	ctx := context.Background()
	peek := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "peek", Version: "0.1.0"},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: peek}
data:
  other: {{ lookup "v1" "Secret" "kube-system" "" | toJson | quote }}
`)}},
	}
	_, _, err := env.helm.UpgradeInstall(ctx, env.namespace, "peek", peek, nil, InstallOptions{Gate: env.gate(ctx, nil)})
	require.Error(t, err)
	assert.ErrorContains(t, err, "kube-system")
	absentConfigMap(t, env, "peek")

	nested := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "nested", Version: "0.1.0"},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: nested}
data:
  x: "<no {{ "<no value>" }}value>"
`)}},
	}
	_, _, err = env.helm.UpgradeInstall(ctx, env.namespace, "nested", nested, nil, InstallOptions{Gate: env.gate(ctx, nil)})
	gateErr, refused := asGateError(err)
	require.True(t, refused, "%v", err)
	assert.Equal(t, ReasonRenderRefused, gateErr.Reason)
	assert.ErrorContains(t, err, `"<no value>"`)
	absentConfigMap(t, env, "nested")
}

func absentConfigMap(t *testing.T, env attackEnv, name string) {
	t.Helper()
	err := env.cp.Client.Get(context.Background(), client.ObjectKey{Namespace: env.namespace, Name: name}, &corev1.ConfigMap{})
	assert.Error(t, err, "ConfigMap %s was not created", name)
}

func itoa(n int) string { return strconv.Itoa(n) }

// A template's lookup that lists reads the list in pages, and the lookups of one render
// read at most their bounds of objects and bytes into Compositor's process, however many
// objects the tenant's namespace holds: past them the render fails, naming the bound.
func TestLookupsReadListsInPagesWithinBounds(t *testing.T) {
	env := newAttackEnv(t, "lists")
	ctx := context.Background()
	for i := range 5 {
		require.NoError(t, env.cp.Client.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: env.namespace},
			Data:       map[string]string{"blob": strings.Repeat("x", 1000)},
		}))
	}
	list := func(bounds lookupBounds) ([]any, error) {
		answer, err := env.helm.lookup(ctx, env.namespace, nil, bounds)("v1", "ConfigMap", env.namespace, "")
		if err != nil {
			return nil, err
		}
		assert.Empty(t, answer["metadata"].(map[string]any)["continue"], "no trace of the pages")
		items, _ := answer["items"].([]any)
		return items, nil
	}

	items, err := list(lookupBounds{pageSize: 2, items: 100, bytes: 1 << 20})
	require.NoError(t, err)
	require.Len(t, items, 5, "three pages of two, read whole")
	for i, item := range items {
		assert.Equal(t, fmt.Sprintf("cm-%d", i), item.(map[string]any)["metadata"].(map[string]any)["name"])
	}

	_, err = list(lookupBounds{pageSize: 2, items: 4, bytes: 1 << 20})
	assert.ErrorContains(t, err, "the chart's lookups read more than 4 objects in one render")

	_, err = list(lookupBounds{pageSize: 2, items: 100, bytes: 3000})
	assert.ErrorContains(t, err, "more than 3000 bytes in one render (--max-rendered-bytes)")

	// The bounds are the render's, its gets and lists together.
	lookup := env.helm.lookup(ctx, env.namespace, nil, lookupBounds{pageSize: 2, items: 5, bytes: 1 << 20})
	_, err = lookup("v1", "ConfigMap", env.namespace, "cm-0")
	require.NoError(t, err)
	_, err = lookup("v1", "ConfigMap", env.namespace, "")
	assert.ErrorContains(t, err, "more than 5 objects")
}
