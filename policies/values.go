package policies

import (
	"fmt"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/compositor-dev/compositor/generators"
)

// helmValues computes what `helm install` would work with for spec: a private copy of
// ch with its dependencies processed (conditions, tags, aliases, import-values) and
// the chart's values coalesced with spec. Helm's own functions do the work, so the
// webhook and Helm agree; the copy keeps ch, which callers share, untouched.
func helmValues(ch *chart.Chart, spec map[string]any) (*chart.Chart, chartutil.Values, error) {
	if ch == nil || ch.Metadata == nil {
		return nil, nil, fmt.Errorf("%w: no chart or no Chart.yaml", ErrNoChart)
	}
	c, err := generators.CopyChart(ch)
	if err != nil {
		return nil, nil, err
	}
	if err := chartutil.ProcessDependenciesWithMerge(c, spec); err != nil {
		return nil, nil, fmt.Errorf("processing the dependencies of chart %s: %w", ch.Name(), err)
	}
	vals, err := chartutil.CoalesceValues(c, spec)
	if err != nil {
		return nil, nil, fmt.Errorf("coalescing values with chart %s: %w", ch.Name(), err)
	}
	return c, vals, nil
}
