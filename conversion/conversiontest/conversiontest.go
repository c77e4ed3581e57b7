// Package conversiontest gives the tests of package conversion and of the conversion
// webhook the CRD of the sample chart fireworks-app in every sample version, and
// objects of it.
package conversiontest

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// FireworksCRD builds the fireworks-app CRD with all sample versions, as the reconciler
// does, with its conversion webhook at webhook.
func FireworksCRD(webhook crd.ConversionWebhook) (*apiextensionsv1.CustomResourceDefinition, error) {
	var versions []crd.ServedVersion
	for _, v := range samplecharts.Versions() {
		ch, err := samplecharts.Load(v)
		if err != nil {
			return nil, err
		}
		served, _, err := crd.ServedVersionOf(ch)
		if err != nil {
			return nil, err
		}
		versions = append(versions, served)
	}
	out, _, err := crd.Build(crd.BuildOptions{ChartName: samplecharts.ChartName, Versions: versions, Conversion: webhook})
	return out, err
}

// FireworksApp is the FireworksApp default/demo of version with spec, and with
// annotations unless they are nil.
func FireworksApp(version string, spec map[string]any, annotations map[string]any) map[string]any {
	metadata := map[string]any{"name": "demo", "namespace": "default", "uid": "0b8c6d0e-5d7f-4d55-9a4e-2f1d3c4b5a69", "resourceVersion": "42"}
	if annotations != nil {
		metadata["annotations"] = annotations
	}
	return map[string]any{"apiVersion": vocab.CompositionGroup + "/" + version, "kind": "FireworksApp", "metadata": metadata, "spec": spec}
}

// Spec is the spec of obj, nil when it has none.
func Spec(obj map[string]any) map[string]any {
	spec, _ := obj["spec"].(map[string]any)
	return spec
}

// Annotation is the annotation key of obj, if obj has it and it is a string.
func Annotation(obj map[string]any, key string) (string, bool) {
	metadata, _ := obj["metadata"].(map[string]any)
	annotations, _ := metadata["annotations"].(map[string]any)
	s, ok := annotations[key].(string)
	return s, ok
}
