package rbac

import (
	"errors"
	"testing"

	"github.com/mitchellh/copystructure"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/test/samplecharts"
)

// fireworksTypes are what each sample chart version can create: the Ingress only in
// 2.0.0 (rendered when exposure is public, so found by the static scan), the cache
// subchart's ConfigMap in both although the subchart is disabled by default.
func fireworksTypes(t testing.TB) map[string][]ResourceType {
	base := []ResourceType{
		kubeType(t, "", "ConfigMap"),
		kubeType(t, "", "Service"),
		kubeType(t, "apps", "Deployment"),
	}
	return map[string][]ResourceType{
		"1.1.5": base,
		"1.1.6": base,
		"2.0.0": append(append([]ResourceType(nil), base...), kubeType(t, "networking.k8s.io", "Ingress")),
	}
}

func TestResourceTypesFireworksApp(t *testing.T) {
	want := fireworksTypes(t)
	for _, v := range samplecharts.Versions() {
		t.Run(v, func(t *testing.T) {
			ch, err := samplecharts.Load(v)
			require.NoError(t, err)
			got, err := ResourceTypes(ch, staticMapper(kubeTypes...))
			require.NoError(t, err)
			assert.Equal(t, want[v], got)
		})
	}
}

const configMap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"

func TestResourceTypes(t *testing.T) {
	cm := kubeType(t, "", "ConfigMap")
	tests := []struct {
		name  string
		chart func(t *testing.T) *chart.Chart
		want  []ResourceType
		errIs []error
	}{{
		name: "subcharts at any depth, disabled or not",
		chart: func(t *testing.T) *chart.Chart {
			leaf := testChart("leaf", map[string]string{"job.yaml": "apiVersion: batch/v1\nkind: Job\n"}, nil)
			mid := testChart("mid", map[string]string{"sts.yaml": "apiVersion: apps/v1\nkind: StatefulSet\n"}, map[string]any{"leaf": map[string]any{"on": false}}, leaf)
			withCondition(t, mid, "leaf", "leaf.on")
			top := testChart("top", map[string]string{"cm.yaml": configMap}, map[string]any{"mid": map[string]any{"on": false}}, mid)
			withCondition(t, top, "mid", "mid.on")
			return top
		},
		want: []ResourceType{cm, kubeType(t, "apps", "StatefulSet"), kubeType(t, "batch", "Job")},
	}, {
		name: "a nested apiVersion/kind is a reference, not an object",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("hpa", map[string]string{"hpa.yaml": `apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: x
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: x
  minReplicas: 1
  maxReplicas: 2
`}, nil)
		},
		want: []ResourceType{kubeType(t, "autoscaling", "HorizontalPodAutoscaler")},
	}, {
		name: "templated kind comes from the render",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("dyn", map[string]string{"x.yaml": "apiVersion: {{ .Values.api }}\nkind: {{ .Values.kind }}\n"},
				map[string]any{"api": "v1", "kind": "Secret"})
		},
		want: []ResourceType{kubeType(t, "", "Secret")},
	}, {
		name: "templated kind in a disabled subchart comes from the render with every subchart on",
		chart: func(t *testing.T) *chart.Chart {
			sub := testChart("sub", map[string]string{"x.yaml": "apiVersion: {{ .Values.api }}\nkind: {{ .Values.kind }}\n"},
				map[string]any{"api": "v1", "kind": "PersistentVolumeClaim"})
			top := testChart("top", map[string]string{"cm.yaml": configMap}, map[string]any{"sub": map[string]any{"enabled": false}}, sub)
			withCondition(t, top, "sub", "sub.enabled")
			return top
		},
		want: []ResourceType{cm, kubeType(t, "", "PersistentVolumeClaim")},
	}, {
		name: "both branches of a conditional kind",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("wl", map[string]string{"workload.yaml": `{{- if .Values.stateful }}
apiVersion: apps/v1
kind: StatefulSet
{{- else }}
kind: Deployment
apiVersion: apps/v1
{{- end }}
metadata:
  name: x
`}, map[string]any{"stateful": false})
		},
		want: []ResourceType{kubeType(t, "apps", "Deployment"), kubeType(t, "apps", "StatefulSet")},
	}, {
		name: "the items of a List",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("list", map[string]string{"list.yaml": `apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Service
    metadata: {name: a}
  - apiVersion: batch/v1
    kind: Job
    metadata: {name: b}
`}, nil)
		},
		want: []ResourceType{kubeType(t, "", "Service"), kubeType(t, "batch", "Job")},
	}, {
		name: "a library partial holds the kind, another template includes it",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("lib", map[string]string{
				"_lib.tpl":   "{{- define \"lib.account\" -}}\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {{ .Release.Name }}\n{{- end }}\n",
				"a.yaml":     "{{- if .Values.account }}\n{{ include \"lib.account\" . }}\n{{- end }}\n",
				"NOTES.txt":  "apiVersion: v1\nkind: Pod\n",
				"empty.yaml": "{{/* nothing here */}}\n",
			}, map[string]any{"account": false})
		},
		want: []ResourceType{kubeType(t, "", "ServiceAccount")},
	}, {
		name: "cluster-scoped types",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("pc", map[string]string{"pc.yaml": "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nvalue: 10\n"}, nil)
		},
		want: []ResourceType{kubeType(t, "scheduling.k8s.io", "PriorityClass")},
	}, {
		name: "a required value fails the render, but every kind is literal",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("req", map[string]string{"cm.yaml": configMap + "data:\n  host: {{ required \"host is required\" .Values.host }}\n"}, nil)
		},
		want: []ResourceType{cm},
	}, {
		name: "a required value fails the render and a kind is templated",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("req", map[string]string{
				"cm.yaml":  configMap + "data:\n  host: {{ required \"host is required\" .Values.host }}\n",
				"dyn.yaml": "apiVersion: v1\nkind: {{ .Values.kind }}\n",
			}, map[string]any{"kind": "Secret"})
		},
		errIs: []error{ErrRender},
	}, {
		name: "RBAC objects",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("rbac", map[string]string{"role.yaml": "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n", "cm.yaml": configMap}, nil)
		},
		errIs: []error{ErrForbiddenKind},
	}, {
		name: "a webhook configuration",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("wh", map[string]string{"wh.yaml": "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n"}, nil)
		},
		errIs: []error{ErrForbiddenKind},
	}, {
		name: "CRDs in crds/",
		chart: func(t *testing.T) *chart.Chart {
			ch := testChart("crds", map[string]string{"cm.yaml": configMap}, nil)
			ch.Files = append(ch.Files, &chartcommon.File{Name: "crds/widgets.yaml", Data: []byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n")})
			return ch
		},
		errIs: []error{ErrForbiddenKind},
	}, {
		name: "a kind the API server does not serve",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("widget", map[string]string{"w.yaml": "apiVersion: example.com/v1\nkind: Widget\n", "cm.yaml": configMap}, nil)
		},
		errIs: []error{ErrUnknownKind},
	}, {
		name: "an API version the API server no longer serves",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("old", map[string]string{"ing.yaml": "apiVersion: extensions/v1beta1\nkind: Ingress\n"}, nil)
		},
		errIs: []error{ErrUnknownKind},
	}, {
		name: "unknown and forbidden at once",
		chart: func(t *testing.T) *chart.Chart {
			return testChart("both", map[string]string{"w.yaml": "apiVersion: example.com/v1\nkind: Widget\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n"}, nil)
		},
		errIs: []error{ErrUnknownKind, ErrForbiddenKind},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResourceTypes(tt.chart(t), staticMapper(kubeTypes...))
			if len(tt.errIs) > 0 {
				for _, want := range tt.errIs {
					assert.True(t, errors.Is(err, want), "want %v, got %v", want, err)
				}
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			sortTypes(tt.want)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestResourceTypesErrorsNameKindsAndTemplates(t *testing.T) {
	ch := testChart("both", map[string]string{"w.yaml": "apiVersion: example.com/v1\nkind: Widget\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n"}, nil)
	_, err := ResourceTypes(ch, staticMapper(kubeTypes...))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "example.com/v1 Widget (both/templates/w.yaml)")
	assert.Contains(t, err.Error(), "rbac.authorization.k8s.io/clusterroles from rbac.authorization.k8s.io/v1 ClusterRole (both/templates/w.yaml)")
}

// Helm's dependency processing writes into the chart it is given; ResourceTypes must
// leave the caller's chart as it was, aliases and import-values included.
func TestResourceTypesLeavesTheChartAlone(t *testing.T) {
	sub := testChart("sub", map[string]string{"cm.yaml": configMap}, map[string]any{"exported": map[string]any{"x": 1}, "on": false})
	top := testChart("top", map[string]string{"cm.yaml": configMap}, map[string]any{"b": map[string]any{"on": false}}, sub)
	top.Metadata.Dependencies = []*chart.Dependency{{
		Name: "sub", Version: "0.1.0", Alias: "b", Condition: "b.on", Tags: []string{"t"},
		ImportValues: []any{map[string]any{"child": "exported", "parent": "imported"}},
	}}
	metadata, err := copystructure.Copy(*top.Metadata)
	require.NoError(t, err)
	values, err := copystructure.Copy(top.Values)
	require.NoError(t, err)
	subValues, err := copystructure.Copy(sub.Values)
	require.NoError(t, err)

	_, err = ResourceTypes(top, staticMapper(kubeTypes...))
	require.NoError(t, err)

	assert.Equal(t, metadata, *top.Metadata)
	assert.Equal(t, values, top.Values)
	assert.Equal(t, subValues, sub.Values)
	require.Len(t, top.Dependencies(), 1)
	assert.Same(t, sub, top.Dependencies()[0])
	assert.Same(t, top, sub.Parent())
}
