// Package policies makes admission decisions: JSON Schema validation of composition
// values, the Rego engine for CompositionPolicies and the built-in policy library.
package policies
