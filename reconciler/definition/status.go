package definition

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/internal/condition"
)

// recordStatus reports the served API and marks the definition Ready and Synced.
func (r *Reconciler) recordStatus(def *corev1alpha1.CompositionDefinition, fetched *chartfetch.Result, api *generatedAPI) {
	def.Status.APIVersion = api.APIVersion()
	def.Status.Kind = api.Kind
	def.Status.Resource = api.Plural
	def.Status.PackageURL = fetched.PackageURL
	def.Status.Digest = fetched.Digest
	versions := []corev1alpha1.VersionInfo{{Version: api.Version, Served: true, Stored: false, Chart: api.ChartVersion}}
	for _, r := range def.Status.Retained {
		if gv, err := schema.ParseGroupVersion(r.APIVersion); err == nil {
			versions = append(versions, corev1alpha1.VersionInfo{Version: gv.Version, Served: true, Chart: r.Chart})
		}
	}
	def.Status.Managed = corev1alpha1.Managed{
		Group:       vocab.CompositionGroup,
		Kind:        api.Kind,
		VersionInfo: append(versions, corev1alpha1.VersionInfo{Version: crd.HubVersion, Served: false, Stored: true}),
	}
	// nil: no earlier version was served to check the conversions against, so what
	// was found last stands.
	if api.ConversionLosses != nil {
		def.Status.ConversionLosses = nil
		if len(api.ConversionLosses) > 0 {
			def.Status.ConversionLosses = slices.Clone(api.ConversionLosses) // the check's result is shared
		}
	}
	readyReason, readyMessage := condition.ReasonAvailable, fmt.Sprintf("%s is served as %s", api.Kind, api.APIVersion())
	if api.NoSchema {
		readyReason = ReasonNoSchema
		readyMessage += "; the chart has no values.schema.json, so spec accepts any value"
	}
	setConditions(def,
		condition.New(corev1alpha1.ConditionReady, true, readyReason, readyMessage),
		condition.New(corev1alpha1.ConditionSynced, true, ReasonReconcileSuccess, "the generated API matches the chart"))
}

func equalStatus(a, b corev1alpha1.CompositionDefinitionStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}
