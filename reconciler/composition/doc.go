// Package composition is the composition controller: it installs, upgrades and
// uninstalls one Helm release per composition of one served version of a generated
// kind. Helm acts through a transport confined to the composition's namespace
// (confine.go), and nothing is applied that the install gate refuses (installgate.go).
//
// Reconcile (composition.go) reads as the table of contents. A composition is
// delivered to its sites (site.go: installOn and uninstallOn, the same on every
// cluster): the local cluster (local.go), or the target clusters it is placed on
// (placement.go), with targets.go (the clusters and their Helm), rights.go (the
// identity's rights there), clusterstatus.go (status.clusters) and, on replicas that
// do not lead, follow.go.
//
// Package kinds runs the controller in Compositor's process; NewManager runs it alone,
// as the generated Deployment of a version.
package composition
