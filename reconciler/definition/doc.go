// Package definition is the CompositionDefinition reconciler: it turns a definition
// into a served API. It fetches the chart (package charts), translates its schema into
// a version of the generated CRD, applies the narrowest RBAC the chart needs and the
// version's controller (a generated Deployment, or package kinds in process), reports
// status, and retires the versions a definition no longer serves.
package definition
