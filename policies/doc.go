// Package policies makes admission decisions: JSON Schema validation of composition
// values, the Rego engine for CompositionPolicies and the built-in policy library.
//
// Every judge of a write — admission, the install gate, the audit, the upgrade plan
// and `compositor validate` — builds its Request with NewRequest and asks a Judge:
// Decide (values, then policies), Values, Policies (the audit) or Objects (what Helm is
// about to apply). They share one formatter (Decision.Message, Decision.Warnings,
// FormatLines), so they print the same lines for the same input:
//
//	judge := policies.NewJudge(policies.JudgeOptions{Engine: engine, Renderer: renderer})
//	decision, err := judge.Decide(ctx, policies.NewRequest(policies.Write{Operation: "CREATE", Object: obj, Chart: ch}))
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
//
// Rendering is the Renderer's: in its Sandbox's worker processes, killed at the
// deadline, within its bound on rendered bytes. It is an option of each Judge, never a
// setting of the process. What stays process-wide bounds the process itself: the
// memory budget of policy evaluations (membudget: the heap is the process's) and the
// bound on numbers.range (SetMaxRangeElements: OPA's built-ins are registered
// process-wide).
package policies
