package webhooks

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/compositor-dev/compositor/policies"
)

// violationsTotal counts the violations admission found, dryrun ones included: a dryrun
// policy is never shown to the caller, so this and the audit are where it is seen.
var violationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "compositor_admission_violations_total",
	Help: "Violations found by admission, by source (a policy or a chart's values.schema.json) and enforcement action.",
}, []string{"source", "action"})

func init() {
	metrics.Registry.MustRegister(violationsTotal)
}

// countViolations adds the violations of a decision that was answered to the metrics.
func countViolations(d policies.Decision) {
	for _, v := range d.Violations {
		violationsTotal.WithLabelValues(v.Source, string(v.Action)).Inc()
	}
}
