// Package gatekeeper enforces Gatekeeper's policies as security teams already write
// them: ConstraintTemplates (templates.gatekeeper.sh, Rego v0 or v1, with libs) and the
// Constraints each defines (constraints.gatekeeper.sh: match, parameters,
// enforcementAction), unchanged.
//
// A template compiles once (Compile) into a prepared query of its violation rule;
// a Library holds the compiled templates with their constraints and reviews one
// object at a time (Library.Review): every constraint whose match selects the object
// (Constraint.Matches, Gatekeeper's rules) runs its template with the input Gatekeeper
// builds, input.review (the AdmissionRequest's kind, name, namespace, operation,
// userInfo, object, oldObject, and namespaceObject) and input.parameters. The
// constraints that select an object are evaluated together, in one evaluation of the
// library's batch, each template in a place of its own (batch.go), with the verdicts
// each constraint's own query would give.
//
// Compositor reviews what a composition will render: Expand gives the Pod a workload's
// pod template implies (as Gatekeeper's ExpansionTemplates do), and a template that
// reads data.inventory runs only when annotated to accept the release's own objects
// as its inventory (Inventory), never silently with a partial one.
//
// Suites (test.gatekeeper.sh Suite files, as `gator verify` runs them) are run by
// Verify.
package gatekeeper
