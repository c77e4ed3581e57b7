// Package reconciler holds the CompositionDefinition reconciler, which applies what
// generators/ produces, and the composition controller that installs one Helm release
// per composition.
package reconciler
