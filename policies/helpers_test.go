package policies

import (
	"helm.sh/helm/v3/pkg/chart"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func gvk(group, version, kind string) metav1.GroupVersionKind {
	return metav1.GroupVersionKind{Group: group, Version: version, Kind: kind}
}

func withData(f *chart.File, data string) *chart.File {
	return &chart.File{Name: f.Name, Data: []byte(data)}
}
