// Package composition is the composition controller: it installs, upgrades and
// uninstalls one Helm release per composition of one served version of a generated
// kind. Helm acts through a transport confined to the composition's namespace
// (confine.go), and nothing is applied that the install gate refuses (installgate.go).
// A composition placed on target clusters is installed there by placement.go, with
// targets.go (the clusters and their Helm), rights.go (the identity's rights there),
// clusterstatus.go (status.clusters) and, on replicas that do not lead, follow.go.
// Package kinds runs the controller in Compositor's process; NewManager runs it alone,
// as the generated Deployment of a version.
package composition
