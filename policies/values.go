package policies

import (
	"fmt"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
)

// helmValues computes what `helm install` would work with for spec: a private copy of
// ch with its dependencies processed (conditions, tags, aliases, import-values) and
// the chart's values coalesced with spec. Helm's own functions do the work, so the
// webhook and Helm agree; the copy keeps ch, which callers share, untouched.
func helmValues(ch *chart.Chart, spec map[string]any) (*chart.Chart, chartutil.Values, error) {
	if ch == nil || ch.Metadata == nil {
		return nil, nil, fmt.Errorf("%w: no chart or no Chart.yaml", ErrNoChart)
	}
	c := cloneChart(ch)
	if err := chartutil.ProcessDependenciesWithMerge(c, spec); err != nil {
		return nil, nil, fmt.Errorf("processing the dependencies of chart %s: %w", ch.Name(), err)
	}
	vals, err := chartutil.CoalesceValues(c, spec)
	if err != nil {
		return nil, nil, fmt.Errorf("coalescing values with chart %s: %w", ch.Name(), err)
	}
	return c, vals, nil
}

// cloneChart copies the parts of a chart tree that Helm's dependency processing
// changes (metadata, the dependency list, values), sharing templates, files and
// schemas, which nothing writes.
func cloneChart(c *chart.Chart) *chart.Chart {
	out := *c
	if c.Metadata != nil {
		md := *c.Metadata
		md.Dependencies = make([]*chart.Dependency, len(c.Metadata.Dependencies))
		for i, d := range c.Metadata.Dependencies {
			if d != nil {
				dc := *d
				md.Dependencies[i] = &dc
			}
		}
		if c.Metadata.Dependencies == nil {
			md.Dependencies = nil
		}
		out.Metadata = &md
	}
	deps := c.Dependencies()
	children := make([]*chart.Chart, len(deps))
	for i, d := range deps {
		children[i] = cloneChart(d)
	}
	out.SetDependencies(children...)
	return &out
}
