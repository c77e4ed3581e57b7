// Package multicluster knows the clusters Compositor may deliver compositions to, and
// where a composition is placed among them.
//
// # Target clusters
//
// A target cluster is registered the multicluster-runtime way: a Secret in Compositor's
// namespace labelled sigs.k8s.io/multicluster-runtime-kubeconfig: "true", whose data key
// "kubeconfig" holds a kubeconfig for the cluster. The Secret's name is the cluster's
// name and its labels are the cluster's labels, which placements select on. Clusters
// runs multicluster-runtime's own kubeconfig provider (providers/kubeconfig) inside a
// multicluster manager (mcmanager) over Compositor's REST config, so it is that provider
// which engages a cluster when its Secret appears and disengages it when the Secret is
// deleted, or loses the label. A Secret whose kubeconfig changes (rotation) disengages
// the cluster and engages it again from the new kubeconfig: Cluster.Done is closed for
// the old engagement, and anything built from its config should be built again.
// Changing only the Secret's labels does not re-engage: List and Select read the
// labels from the Secret at the time they are called.
//
// # What it costs
//
// In Compositor's own cluster: one manager (no metrics or health endpoint, no leader
// election) with one controller, the provider's, and one watch: Secrets in Compositor's
// namespace that carry the label (the cache is restricted to them by namespace and
// label selector, so other Secrets are neither listed nor kept in memory). That is a
// fixed handful of goroutines (the manager's runnables, the controller's worker, the
// informer's reflector and processor) whatever the number of clusters.
//
// Per engaged cluster: the provider's controller-runtime cluster.Cluster (a REST
// client, a lazy REST mapper and a cache that starts no informer until something reads
// through it) and its Start goroutine, plus one goroutine here that waits for the
// disengagement: two goroutines, and one HTTP/2 reader per connection once the cluster
// is used. No watch is opened on a target cluster: Cluster.Client is uncached, and the
// cache of the provider's cluster is never read by this package. The composition
// controller's Helm for a cluster (composition.Targets) adds a discovery cache, filled
// on first use. In test/e2e's TestMulticluster the process runs about 40 goroutines
// more with two clusters engaged than before Start (the hub's manager, controller and
// Secret informer, the two clusters, and the connections of the test's own clients),
// and the only watch is the hub's Secrets.
//
// Notify is called when a cluster is engaged or disengaged, and on every change of a
// kubeconfig Secret (a change of labels moves a cluster in or out of placements
// without engaging it again). Select picks among the registered clusters, engaged or
// not: a cluster whose kubeconfig was just rotated is registered but, for a moment,
// not engaged, and that is not the same as leaving.
//
// # Sharing the clusters among replicas
//
// With Options.Shard, multicluster-runtime's sharded coordinator engages each cluster
// on one of the replicas that run Clusters in the same namespace (rendezvous hashing
// over the replicas' Leases, fenced by a Lease per cluster); List, Get and Select then
// return only this replica's share as engaged. A replica that stops moves its clusters
// to the others once its Leases lapse (test/e2e's TestReplicasShareTheClusters: six
// clusters shared three and three, all on the survivor about 28 s after the other
// stopped). Compositor's serve uses it with --multicluster and --leader-election:
// every replica installs on the clusters engaged there, and the leader keeps the rest.
//
// # Who may deliver where
//
// A cluster takes compositions only from the namespaces its Secret's
// NamespaceSelectorAnnotation selects (OpenTo); without it, from none. Select reports
// the clusters a placement matches that are not open to the composition's namespace
// apart, so that the composition can say so.
//
// # Placement
//
// A composition annotated compositor.dev/placement carries a label selector over the
// clusters' labels (for example `env in (prod),region=eu`); ParsePlacement reads and
// validates it. Without the annotation a composition is installed in the local cluster
// only, as before.
package multicluster
