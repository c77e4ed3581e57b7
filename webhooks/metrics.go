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

// refusalsTotal counts the writes admission refused for a bound rather than for what
// they say: an object over a limit (depth, keys, string), a lane that stayed full until
// the deadline (fairness), work that ran out of time (deadline).
var refusalsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "compositor_admission_refusals_total",
	Help: "Writes refused by admission for a bound, by reason: depth, keys, string (an object over a limit), fairness (its namespace's lane stayed full until the deadline), deadline (the schema check, rendering or a policy ran out of time), rendered (a chart rendered past --max-rendered-bytes), range (a policy's numbers.range past --policy-max-range).",
}, []string{"reason"})

// deprecatedWritesTotal counts the writes of compositions through a deprecated version
// (one a definition keeps served only for its clients): who still speaks it, before it
// goes.
var deprecatedWritesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "compositor_deprecated_version_writes_total",
	Help: "Writes of compositions through a deprecated served version (kept served only for the clients that still speak it), by kind, version and operation.",
}, []string{"kind", "version", "operation"})

// conversionBusyTotal counts the ConversionReviews answered 503 because their caller's
// lane, or the converter, stayed full for their whole wait.
var conversionBusyTotal = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "compositor_conversion_busy_total",
	Help: "ConversionReviews refused with 503 before their body was read: their caller's share of the converter, or all of it, stayed busy for the whole wait.",
})

func init() {
	metrics.Registry.MustRegister(violationsTotal, refusalsTotal, deprecatedWritesTotal, conversionBusyTotal)
}

// countViolations adds the violations of a decision that was answered to the metrics.
func countViolations(d policies.Decision) {
	for _, v := range d.Violations {
		violationsTotal.WithLabelValues(v.Source, string(v.Action)).Inc()
	}
}
