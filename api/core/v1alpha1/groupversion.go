package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is the API group and version of CompositionDefinitions.
var GroupVersion = schema.GroupVersion{Group: "core.krateo.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers this group's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this group's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
