// Package generators holds the pure functions that turn a Helm chart into Kubernetes
// objects (CRD, RBAC, controller objects) and the code that fetches charts. Nothing
// here talks to a cluster; the reconciler applies what these functions return.
package generators
