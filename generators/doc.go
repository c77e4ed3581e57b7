// Package generators holds the pure functions that turn a Helm chart into Kubernetes
// objects: the CRD (generators/crd), the RBAC of a served version (generators/rbac) and
// its controller Deployment (generators/controller); this package itself copies charts
// for Helm and computes a chart's content digest (chart.go). Nothing here fetches a
// chart (package chartfetch does) or talks to a cluster; the reconciler applies what
// these functions return.
package generators
