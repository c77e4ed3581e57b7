package rbac

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// kubeTypes are the built-in types the unit tests' mapper knows, as a real API server
// of this Kubernetes line serves them.
var kubeTypes = []ResourceType{
	{Group: "", Version: "v1", Kind: "ConfigMap", Resource: "configmaps", Namespaced: true},
	{Group: "", Version: "v1", Kind: "Namespace", Resource: "namespaces"},
	{Group: "", Version: "v1", Kind: "PersistentVolumeClaim", Resource: "persistentvolumeclaims", Namespaced: true},
	{Group: "", Version: "v1", Kind: "Pod", Resource: "pods", Namespaced: true},
	{Group: "", Version: "v1", Kind: "Secret", Resource: "secrets", Namespaced: true},
	{Group: "", Version: "v1", Kind: "Service", Resource: "services", Namespaced: true},
	{Group: "", Version: "v1", Kind: "ServiceAccount", Resource: "serviceaccounts", Namespaced: true},
	{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition", Resource: "customresourcedefinitions"},
	{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments", Namespaced: true},
	{Group: "apps", Version: "v1", Kind: "StatefulSet", Resource: "statefulsets", Namespaced: true},
	{Group: "autoscaling", Version: "v2", Kind: "HorizontalPodAutoscaler", Resource: "horizontalpodautoscalers", Namespaced: true},
	{Group: "batch", Version: "v1", Kind: "Job", Resource: "jobs", Namespaced: true},
	{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress", Resource: "ingresses", Namespaced: true},
	{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration", Resource: "validatingwebhookconfigurations"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role", Resource: "roles", Namespaced: true},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "RoleBinding", Resource: "rolebindings", Namespaced: true},
	{Group: "scheduling.k8s.io", Version: "v1", Kind: "PriorityClass", Resource: "priorityclasses"},
}

// staticMapper is a RESTMapper that knows exactly types: input data for unit tests,
// in place of discovery.
func staticMapper(types ...ResourceType) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, t := range types {
		scope := meta.RESTScopeRoot
		if t.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		gvk := schema.GroupVersionKind{Group: t.Group, Version: t.Version, Kind: t.Kind}
		gv := gvk.GroupVersion()
		m.AddSpecific(gvk, gv.WithResource(t.Resource), gv.WithResource(strings.ToLower(t.Kind)), scope)
	}
	return m
}

func kubeType(t testing.TB, group, kind string) ResourceType {
	t.Helper()
	for _, rt := range kubeTypes {
		if rt.Group == group && rt.Kind == kind {
			return rt
		}
	}
	t.Fatalf("no kube type %s %s", group, kind)
	return ResourceType{}
}

// testChart builds a chart from templates (name → text, under templates/) and values.
func testChart(name string, templates map[string]string, values map[string]any, deps ...*chart.Chart) *chart.Chart {
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: "0.1.0"},
		Values:   values,
	}
	for file, text := range templates {
		ch.Templates = append(ch.Templates, &chartcommon.File{Name: "templates/" + file, Data: []byte(text)})
	}
	for _, d := range deps {
		ch.AddDependency(d)
	}
	return ch
}

// withCondition declares d as a dependency of ch, enabled by condition.
func withCondition(t testing.TB, ch *chart.Chart, name, condition string) {
	t.Helper()
	for _, d := range ch.Dependencies() {
		if d.Name() == name {
			ch.Metadata.Dependencies = append(ch.Metadata.Dependencies, &chart.Dependency{
				Name: name, Version: d.Metadata.Version, Condition: condition,
			})
			return
		}
	}
	require.Failf(t, "no such subchart", "%s", name)
}
