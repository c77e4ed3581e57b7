// Package policies makes admission decisions: JSON Schema validation of composition
// values, the Rego engine for CompositionPolicies and the built-in policy library.
//
// The webhook and `compositor validate` share one entry point, Checker.Check, and one
// formatter (Decision.Message, Decision.Warnings, FormatLines), so they print the
// same lines for the same input:
//
//	checker := &policies.Checker{Schemas: policies.NewJSONSchemaValidator(0), Engine: engine}
//	decision, err := checker.Check(ctx, &policies.Request{...})
//	if statusErr := decision.Err(gk, name); statusErr != nil { /* deny: 422 or 403 */ }
//	warnings := decision.Warnings() // admission warnings; decision.DryRun() for metrics/audit
//
// Schema validation (JSONSchemaValidator) computes the values `helm install` would use
// with Helm's own dependency processing and coalescing, validates them with the
// chart's values.schema.json and each enabled subchart's schema under its key
// (jsonschema v6, as Helm), compiles the schemas once per chart digest, and never
// loads a schema by URL.
//
// The Engine holds compiled policies from three origins — built-ins, CompositionPolicy
// objects, --policy-dir files — and swaps the whole set atomically on every change; a
// policy that stops compiling keeps its last good version. Policies compile against
// Capabilities(): no network, clock, randomness or runtime built-ins. Every request's
// evaluation has a deadline (Options.Timeout); a policy cut off by it, or failing at
// run time, denies unless Options.FailOpen. Policies with target rendered are
// evaluated once per object the chart renders (input.rendered holds that object), so
// each violation names its object, e.g. "Deployment/x-fireworks-app".
package policies
