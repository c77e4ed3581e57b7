// Package v1alpha1 holds the CompositionDefinition API of the core.krateo.io group. Its
// shape follows the Krateo core-provider so that the manifests of its README apply
// unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=core.krateo.io
package v1alpha1
