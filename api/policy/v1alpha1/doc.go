// Package v1alpha1 holds the CompositionPolicy API of the policy.compositor.dev group:
// Rego policies, written by security teams, that Compositor's validating webhook
// evaluates on every write to definitions and compositions.
//
// +kubebuilder:object:generate=true
// +groupName=policy.compositor.dev
package v1alpha1
