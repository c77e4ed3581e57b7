// Package mchelm gives Helm for a target cluster: package composition's Helm (the same
// confinement to the release namespace, strict field validation and install path) over
// the cluster's REST config. It is a package of its own so that package composition may
// import package multicluster without a cycle.
package mchelm

import (
	"fmt"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"k8s.io/apimachinery/pkg/runtime/schema"

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

// Actions returns Helm's action configuration for releases in namespace of the cluster
// h acts on (from For), stored in Secrets there, as package composition builds its own.
func Actions(h *composition.Helm, namespace string, log logr.Logger, clusterResources ...schema.GroupResource) (*action.Configuration, error) {
	cfg := &action.Configuration{}
	debug := func(format string, v ...interface{}) { log.V(1).Info("Helm", "message", fmt.Sprintf(format, v...)) }
	if err := cfg.Init(h.Getter(namespace, clusterResources...), namespace, "secret", debug); err != nil {
		return nil, fmt.Errorf("initialising Helm for namespace %s: %w", namespace, err)
	}
	if kc, ok := cfg.KubeClient.(*kube.Client); ok {
		kc.Namespace = namespace
	}
	return cfg, nil
}
