// Package rbac generates the least-privilege identity of one served version of a
// generated API: the ServiceAccount its controller runs as, and the roles and bindings
// that let that controller manage its compositions and install their Helm releases.
//
// ResourceTypes finds what a chart can create — a static scan of every template of the
// chart and its subcharts, unioned with renders of the default values — and resolves it
// through a RESTMapper (discovery, in a cluster). Generate turns those types into
// objects: rights on the compositions themselves are cluster-wide, because compositions
// live in any namespace; rights on the chart's namespaced resources and on Helm's
// release Secrets sit in a ClusterRole that is bound only per namespace, by a RoleBinding
// (Objects.ReleaseBinding) in each namespace that holds compositions of the version.
// Only the chart's cluster-scoped types, if any, are granted cluster-wide.
//
// Check holds the invariants every generated object keeps — no wildcards, no RBAC
// writes, no escalate, bind or impersonate, no Secrets cluster-wide — and Generate never
// returns objects that fail it. Everything here is a pure function; the reconciler
// applies the objects.
package rbac
