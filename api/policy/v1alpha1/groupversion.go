package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is the API group and version of CompositionPolicies.
var GroupVersion = schema.GroupVersion{Group: "policy.compositor.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers this group's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this group's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
