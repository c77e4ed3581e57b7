package definition

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/internal/condition"
)

// Reasons of a CompositionDefinition's conditions. Each names what happened in words an
// operator can act on. Available and Paused are shared with compositions (package
// condition); fetching the chart has its own (package charts).
const (
	ReasonNoSchema            = "NoSchema"
	ReasonReconcileSuccess    = "ReconcileSuccess"
	ReasonInvalidChartName    = "InvalidChartName"
	ReasonInvalidChartVersion = "InvalidChartVersion"
	ReasonInvalidSchema       = "InvalidSchema"
	// ReasonInvalidConversions: the declared conversions (the chart's
	// values.conversions.yaml and spec.conversions) do not compile, or a rule is
	// unsound or loses values without acknowledging it.
	ReasonInvalidConversions = "InvalidConversions"
	ReasonApplyFailed        = "ApplyFailed"
	ReasonDeleting           = "Deleting"
)

// setConditions sets Ready and Synced for the definition's current generation. A
// condition whose status does not change keeps its lastTransitionTime, so conditions
// never flap.
func setConditions(def *corev1alpha1.CompositionDefinition, ready, synced metav1.Condition) {
	for _, c := range []metav1.Condition{ready, synced} {
		c.ObservedGeneration = def.Generation
		meta.SetStatusCondition(&def.Status.Conditions, c)
	}
}

// failed marks the definition not Synced for reason. It stays Ready when its API was
// already served for this generation: a chart server that is down for a while does not
// take the generated API away, and Ready does not flap with it.
func failed(def *corev1alpha1.CompositionDefinition, reason, message string) {
	ready := condition.New(corev1alpha1.ConditionReady, false, reason, message)
	if c := meta.FindStatusCondition(def.Status.Conditions, corev1alpha1.ConditionReady); c != nil &&
		c.Status == metav1.ConditionTrue && c.ObservedGeneration == def.Generation {
		ready = *c
	}
	setConditions(def, ready, condition.New(corev1alpha1.ConditionSynced, false, reason, message))
}
