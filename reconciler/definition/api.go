package definition

import (
	"errors"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/internal/condition"
)

// generatedAPI is what a definition serves: one version of a generated kind.
type generatedAPI struct {
	ChartName    string
	ChartVersion string
	Kind         string
	Plural       string
	Version      string
	Spec         *apiextensionsv1.JSONSchemaProps
	// NoSchema is true when the chart has no values.schema.json.
	NoSchema bool
}

// CRDName is the name of the generated CRD.
func (a *generatedAPI) CRDName() string { return a.Plural + "." + vocab.CompositionGroup }

// APIVersion is group/version of the served version.
func (a *generatedAPI) APIVersion() string { return vocab.CompositionGroup + "/" + a.Version }

// describeAPI names the generated API and translates the chart's schema.
func (r *Reconciler) describeAPI(def *corev1alpha1.CompositionDefinition, fetched *chartfetch.Result) (*generatedAPI, error) {
	meta := fetched.Chart.Metadata
	api := &generatedAPI{ChartName: meta.Name, ChartVersion: meta.Version, NoSchema: len(fetched.Chart.Schema) == 0}
	var err error
	if api.Kind, err = crd.Kind(meta.Name); err != nil {
		return nil, &condition.Error{Reason: ReasonInvalidChartName, Terminal: true, Err: err}
	}
	if api.Plural, err = crd.Plural(meta.Name); err != nil {
		return nil, &condition.Error{Reason: ReasonInvalidChartName, Terminal: true, Err: err}
	}
	if api.Version, err = crd.VersionName(meta.Version); err != nil {
		return nil, &condition.Error{Reason: ReasonInvalidChartVersion, Terminal: true, Err: err}
	}
	if api.Spec, _, err = crd.TranslateChart(fetched.Chart); err != nil {
		return nil, &condition.Error{Reason: ReasonInvalidSchema, Terminal: true, Err: fmt.Errorf("translating values.schema.json of %s %s: %w", meta.Name, meta.Version, err)}
	}
	if def.Spec.Chart.Version != "" && def.Spec.Chart.Version != meta.Version {
		return nil, &condition.Error{Reason: ReasonInvalidChartVersion, Terminal: true, Err: errors.New(
			"the fetched chart is version " + meta.Version + ", not spec.chart.version " + def.Spec.Chart.Version)}
	}
	return api, nil
}
