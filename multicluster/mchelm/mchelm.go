// Package mchelm gives Helm for a target cluster: package composition's Helm (the same
// confinement to the release namespace, strict field validation and install path) over
// the cluster's REST config. It is a package of its own so that package composition may
// import package multicluster without a cycle.
package mchelm

import (
	"fmt"

	"github.com/go-logr/logr"

	"github.com/compositor-dev/compositor/multicluster"
	"github.com/compositor-dev/compositor/reconciler/composition"
)

// For returns Helm acting as the identity of the cluster's kubeconfig. Each call builds
// a discovery cache for the cluster; keep the result for as long as the engagement
// (until cluster.Done is closed).
func For(cluster multicluster.Cluster, log logr.Logger) (*composition.Helm, error) {
	h, err := composition.NewHelm(cluster.Config(), log.WithValues("cluster", cluster.Name))
	if err != nil {
		return nil, fmt.Errorf("building Helm for cluster %s: %w", cluster.Name, err)
	}
	return h, nil
}
