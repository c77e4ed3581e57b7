package definition

import (
	"errors"
	"fmt"
	"slices"

	"github.com/Masterminds/semver/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/conversion"
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
	// Conversions are the steps from earlier chart versions: the chart's, with those of
	// spec.conversions added or in their place.
	Conversions []corev1alpha1.ConversionStep
	// ConversionLosses are what the acknowledged rules lose, found when the CRD was
	// built.
	ConversionLosses []corev1alpha1.ConversionLoss
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
	if api.Conversions, err = declaredConversions(def, fetched); err != nil {
		return nil, err
	}
	if def.Spec.Chart.Version != "" && def.Spec.Chart.Version != meta.Version {
		return nil, &condition.Error{Reason: ReasonInvalidChartVersion, Terminal: true, Err: errors.New(
			"the fetched chart is version " + meta.Version + ", not spec.chart.version " + def.Spec.Chart.Version)}
	}
	return api, nil
}

// declaredConversions are the conversion steps of the chart's values.conversions.yaml
// with those of spec.conversions added, a step of the spec replacing the chart's
// between the same versions; each source is compiled first, so that an error names
// where it is.
func declaredConversions(def *corev1alpha1.CompositionDefinition, fetched *chartfetch.Result) ([]corev1alpha1.ConversionStep, error) {
	invalid := func(err error) error {
		return &condition.Error{Reason: ReasonInvalidConversions, Terminal: true, Err: err}
	}
	fromChart, err := crd.ChartConversions(fetched.Chart)
	if err != nil {
		return nil, invalid(err)
	}
	if _, err := conversion.CompileSteps(fromChart, field.NewPath(crd.ConversionsFile, "conversions")); err != nil {
		return nil, invalid(err)
	}
	own, _ := semver.NewVersion(fetched.Chart.Metadata.Version)
	for i, s := range def.Spec.Conversions {
		if to, err := semver.NewVersion(s.To); err == nil && own != nil && own.LessThan(to) {
			return nil, invalid(fmt.Errorf("spec.conversions[%d].to: %s is later than the chart's version %s", i, s.To, own))
		}
	}
	if _, err := conversion.CompileSteps(def.Spec.Conversions, field.NewPath("spec", "conversions")); err != nil {
		return nil, invalid(err)
	}
	steps := slices.DeleteFunc(slices.Clone(fromChart), func(c corev1alpha1.ConversionStep) bool {
		return slices.ContainsFunc(def.Spec.Conversions, func(s corev1alpha1.ConversionStep) bool { return sameStep(s, c) })
	})
	steps = append(steps, def.Spec.Conversions...)
	if _, err := conversion.CompileSteps(steps, field.NewPath("conversions")); err != nil {
		return nil, invalid(fmt.Errorf("the steps of %s and spec.conversions together: %w", crd.ConversionsFile, err))
	}
	return steps, nil
}

// sameStep tells whether two steps are between the same chart versions.
func sameStep(a, b corev1alpha1.ConversionStep) bool {
	av, aerr := semver.NewVersion(a.From)
	bv, berr := semver.NewVersion(b.From)
	at, aterr := semver.NewVersion(a.To)
	bt, bterr := semver.NewVersion(b.To)
	return aerr == nil && berr == nil && aterr == nil && bterr == nil && av.Equal(bv) && at.Equal(bt)
}
