package composition

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// refusalsTotal counts the installs the controller refused, by the reason its
	// condition gives (RenderRefused, PolicyDenied, InvalidValues, ...).
	refusalsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "compositor_composition_refusals_total",
		Help: "Installs of compositions the controller refused, by the reason on the composition's Ready condition",
	}, []string{"reason"})
	// laneFullTotal counts the reconciles put back in the queue because their lane was
	// full: the namespace's compositions, or a target cluster's releases.
	laneFullTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "compositor_composition_lane_full_total",
		Help: "Reconciles of compositions put back in the queue for a moment because their lane (lane=namespace: the namespace's compositions; lane=cluster: a target cluster's releases) held all it may",
	}, []string{"lane"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(refusalsTotal, laneFullTotal)
}
