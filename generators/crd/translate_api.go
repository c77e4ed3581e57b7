package crd

import (
	"errors"
	"fmt"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// ErrInvalidValues means values.yaml is not a YAML map.
var ErrInvalidValues = errors.New("invalid values.yaml")

// Translate turns a chart's values.schema.json into the structural schema of spec, using
// the chart's values.yaml (may be empty) for what it defaults: a key with a default is
// never required and always nullable (a null in a composition deletes the default, as
// in Helm). It never fetches anything: remote references become fields that keep any
// value, listed in the Report with every other constraint the CRD cannot carry.
//
// An empty schema is treated as "no schema": spec keeps unknown fields, and the Report
// says so.
func Translate(schemaJSON, valuesYAML []byte) (*apiextensionsv1.JSONSchemaProps, Report, error) {
	defaults, err := chartutil.ReadValues(valuesYAML)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidValues, err)
	}
	t := newTranslator()
	n, err := t.chartSchema(schemaJSON, defaults, "")
	if err != nil {
		return nil, nil, err
	}
	return t.finish(n)
}

// TranslateChart is Translate for a loaded chart, subcharts included: each subchart's
// schema applies under its key (its alias if the dependency has one), with defaults
// from the subchart's values.yaml overridden by the parent's values under that key.
func TranslateChart(ch *chart.Chart) (*apiextensionsv1.JSONSchemaProps, Report, error) {
	t := newTranslator()
	n, err := t.chart(ch, ch.Values, "", "")
	if err != nil {
		return nil, nil, err
	}
	return t.finish(n)
}

func (t *translator) finish(n *node) (*apiextensionsv1.JSONSchemaProps, Report, error) {
	p := t.emit(n)
	p.Nullable = false
	report := t.report.normalize()
	if report == nil {
		report = Report{}
	}
	return &p, report, nil
}

func (t *translator) chartSchema(schema []byte, defaults map[string]any, prefix string) (*node, error) {
	if len(schema) == 0 {
		t.lose(prefix, t.schemaFile, "values.schema.json", "the chart has no schema: spec keeps any value")
		n := anyNode(prefix, "")
		n.types = tObject
		return n, nil
	}
	return t.translateDocument(schema, defaults, prefix)
}

func (t *translator) chart(ch *chart.Chart, defaults map[string]any, prefix, file string) (*node, error) {
	t.schemaFile = file
	n, err := t.chartSchema(ch.Schema, defaults, prefix)
	if err != nil {
		if file != "" {
			return nil, fmt.Errorf("subchart %s: %w", ch.Name(), err)
		}
		return nil, err
	}
	for _, dep := range ch.Dependencies() {
		for _, key := range valuesKeys(ch, dep) {
			sub := map[string]any{}
			deepMerge(sub, parentValues(defaults, key))
			deepMerge(sub, dep.Values)
			subFile := file
			if subFile != "" {
				subFile = subFile[:len(subFile)-len("values.schema.json")]
			}
			subFile += "charts/" + dep.Name() + "/values.schema.json"
			c, err := t.chart(dep, sub, childPath(prefix, key), subFile)
			if err != nil {
				return nil, err
			}
			// Helm always gives a subchart its key in the merged values.
			c.hasDefault = true
			if n.props == nil {
				n.props = map[string]*node{}
			}
			n.props[key] = intersect(c, n.props[key])
		}
	}
	return n, nil
}

func parentValues(defaults map[string]any, key string) map[string]any {
	m, _ := defaults[key].(map[string]any)
	return m
}

// valuesKeys returns the keys under which the parent's values configure subchart dep:
// its aliases, or its name.
func valuesKeys(parent, dep *chart.Chart) []string {
	var keys []string
	if parent.Metadata != nil {
		for _, d := range parent.Metadata.Dependencies {
			if d != nil && d.Name == dep.Name() && d.Alias != "" {
				keys = append(keys, d.Alias)
			}
		}
	}
	if len(keys) == 0 {
		keys = []string{dep.Name()}
	}
	return keys
}
