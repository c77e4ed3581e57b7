package policies

import (
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func gvk(group, version, kind string) metav1.GroupVersionKind {
	return metav1.GroupVersionKind{Group: group, Version: version, Kind: kind}
}

func withData(f *chartcommon.File, data string) *chartcommon.File {
	return &chartcommon.File{Name: f.Name, Data: []byte(data)}
}
