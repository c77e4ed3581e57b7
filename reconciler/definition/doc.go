// Package definition is the CompositionDefinition reconciler: it turns a definition
// into a served API. It fetches the chart (package charts), translates its schema into
// a version of the generated CRD, applies the narrowest RBAC the chart needs and the
// version's controller (a generated Deployment, or package kinds in process), reports
// status, and retires the versions a definition no longer serves.
//
// It alone decides which versions the kinds runtime serves (served.go): on the leader
// as it reconciles; and where the runtime runs on every replica (target clusters
// shared among replicas), on a replica that does not lead, exactly those the
// definitions' status serves, writing nothing, until that replica is elected.
package definition
