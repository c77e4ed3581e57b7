package crd

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// ErrInvalidValues means values.yaml is not a YAML map.
var ErrInvalidValues = errors.New("invalid values.yaml")

// Translate turns a chart's values.schema.json into the structural schema of spec, using
// the chart's values.yaml (may be empty) for what it defaults: a key with a default is
// never required. Every key is nullable (a null in a composition deletes the default,
// as in Helm, or is refused by the webhook where there is none), and every object
// keeps undeclared keys, also where the schema forbids them: the API server never
// removes what a user wrote before the webhook judges it. It never fetches anything: remote references become fields that keep any
// value, listed in the Report with every other constraint the CRD cannot carry.
//
// An empty schema is treated as "no schema": spec keeps unknown fields, and the Report
// says so.
func Translate(schemaJSON, valuesYAML []byte) (*apiextensionsv1.JSONSchemaProps, Report, error) {
	defaults, err := chartcommon.ReadValues(valuesYAML)
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
// Helm validates a subchart only when it is enabled and after copying the parent's
// globals over the subchart's own, so the schema of a subchart with a condition or
// tags, and a subchart's constraints on its "global", are left to the webhook (and
// listed in the Report).
func TranslateChart(ch *chart.Chart) (*apiextensionsv1.JSONSchemaProps, Report, error) {
	t := newTranslator()
	n, err := t.chart(ch, ch.Values, "", "")
	if err != nil {
		return nil, nil, err
	}
	return t.finish(n)
}

func (t *translator) finish(n *node) (*apiextensionsv1.JSONSchemaProps, Report, error) {
	p := t.emit(n, false)
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
			subFile := file
			if subFile != "" {
				subFile = subFile[:len(subFile)-len("values.schema.json")]
			}
			subFile += "charts/" + dep.Name() + "/values.schema.json"
			var c *node
			if kw, what := conditional(ch, dep, key); kw != "" {
				c = t.conditionalSubchart(dep, key, kw, what, childPath(prefix, key), subFile)
			} else {
				sub := map[string]any{}
				deepMerge(sub, parentValues(defaults, key))
				deepMerge(sub, dep.Values)
				var err error
				if c, err = t.chart(dep, sub, childPath(prefix, key), subFile); err != nil {
					return nil, err
				}
				t.subchartGlobal(c, subFile)
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

// conditional says why Helm may leave subchart dep, configured under key, out: the
// dependency's condition or tags (keyword "condition" or "tags", and their value).
// No keyword means Helm always validates the subchart.
func conditional(parent, dep *chart.Chart, key string) (keyword, what string) {
	if parent.Metadata == nil {
		return "", ""
	}
	for _, d := range parent.Metadata.Dependencies {
		if d == nil || d.Name != dep.Name() || (d.Alias != "" && d.Alias != key) || (d.Alias == "" && key != dep.Name()) {
			continue
		}
		switch {
		case strings.TrimSpace(d.Condition) != "":
			return "condition", d.Condition
		case len(d.Tags) > 0:
			return "tags", strings.Join(d.Tags, ", ")
		}
	}
	return "", ""
}

// conditionalSubchart is the CRD's shape for the key of a subchart Helm may disable:
// any object (Helm refuses anything else there, enabled or not), no constraint of the
// subchart's schema or its own subcharts'. Helm validates a subchart only when it is
// enabled, and which are depends on the merged values, so its schema is the webhook's.
func (t *translator) conditionalSubchart(dep *chart.Chart, key, keyword, what, path, schemaFile string) *node {
	if len(dep.Schema) > 0 || len(dep.Dependencies()) > 0 {
		t.lose(path, schemaFile+"#", keyword, fmt.Sprintf("subchart %s is enabled by %s %q: Helm validates its values only when it is enabled, so its schema (and its subcharts') is enforced by the webhook only", key, keyword, what))
	}
	return &node{types: tObject | tNull, path: path, ptr: schemaFile + "#"}
}

// subchartGlobal frees a subchart's own "global": Helm copies the parent's globals
// over it before validating, so what a composition writes there is not what the
// subchart's schema judges. The webhook judges the coalesced globals.
func (t *translator) subchartGlobal(c *node, schemaFile string) {
	path := childPath(c.path, chartcommon.GlobalKey)
	old, declared := c.props[chartcommon.GlobalKey]
	if dropKey(c, chartcommon.GlobalKey) {
		t.lose(path, schemaFile+"#", chartcommon.GlobalKey, "Helm merges the parent's globals over a subchart's own before validating; its constraints on global are enforced by the webhook on the merged values")
	}
	if declared { // still documented as a field, holding any value
		c.props[chartcommon.GlobalKey] = &node{types: tAll, hasDefault: true, desc: old.desc, path: path, ptr: old.ptr}
	}
}

// dropKey removes every constraint n (an object's schema, with its allOf and anyOf
// branches) puts on key, and tells whether there was one.
func dropKey(n *node, key string) bool {
	if n == nil {
		return false
	}
	dropped := false
	if p, ok := n.props[key]; ok {
		delete(n.props, key)
		dropped = dropped || p.types != tAll || !p.valueEmpty() || p.props != nil || p.items != nil || p.addl != nil
	}
	if i := slices.Index(n.v.required, key); i >= 0 {
		n.v.required = slices.Delete(n.v.required, i, i+1)
		dropped = true
	}
	for _, a := range n.allOf {
		dropped = dropKey(a, key) || dropped
	}
	for _, group := range n.anyOf {
		for _, b := range group {
			dropped = dropKey(b, key) || dropped
		}
	}
	return dropped
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
