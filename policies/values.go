package policies

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"k8s.io/utils/lru"

	"github.com/compositor-dev/compositor/generators"
)

// helmValues computes what `helm install` would work with for spec: a private copy of
// ch with its dependencies processed (conditions, tags, aliases, import-values) and
// the chart's values coalesced with spec. Helm's own functions do the work, so the
// webhook and Helm agree; the copy keeps ch, which callers share, untouched.
func helmValues(ch *chart.Chart, spec map[string]any) (*chart.Chart, chartcommon.Values, error) {
	if ch == nil || ch.Metadata == nil {
		return nil, nil, fmt.Errorf("%w: no chart or no Chart.yaml", ErrNoChart)
	}
	c, err := processDependencies(ch, spec)
	if err != nil {
		return nil, nil, err
	}
	return coalesce(c, spec)
}

func processDependencies(ch *chart.Chart, spec map[string]any) (*chart.Chart, error) {
	c, err := generators.CopyChart(ch)
	if err != nil {
		return nil, err
	}
	if err := chartutil.ProcessDependencies(c, spec); err != nil {
		return nil, fmt.Errorf("processing the dependencies of chart %s: %w", ch.Name(), err)
	}
	return c, nil
}

func coalesce(c *chart.Chart, spec map[string]any) (*chart.Chart, chartcommon.Values, error) {
	vals, err := chartvalues.CoalesceValues(c, spec)
	if err != nil {
		return nil, nil, fmt.Errorf("coalescing values with chart %s: %w", c.Name(), err)
	}
	return c, vals, nil
}

// processedCharts keeps charts as Helm's dependency processing leaves them, so that a
// request only pays for merging its own values. Processing (aliases, version ranges,
// conditions, tags, import-values, each a deep copy of values through reflection) was
// most of the time of a schema check.
//
// What processing does to a chart depends on the values only through which
// dependencies the conditions and tags enable. Helm evaluates them on the coalesced
// values at paths that start with a dependency's name or alias, a condition's first
// segment, "tags" or "global" (globals are copied into every subchart's values), and
// the coalesced value under such a key is made only of the user's value under it and
// of the chart. So a processed chart is kept per chart digest and per the user's values
// under those keys, which most compositions of one chart share; the rest of the
// values, which compositions do not share, never matter.
//
// A kept chart is shared: callers only read it (coalescing copies what it reads).
type processedCharts struct {
	cache *lru.Cache
}

// processedChartsSize bounds the kept charts: a few per chart version in use.
const processedChartsSize = 256

func newProcessedCharts() *processedCharts {
	return &processedCharts{cache: lru.New(processedChartsSize)}
}

// values is helmValues for the chart of digest, from a kept processed chart when there
// is one. Without a digest nothing is kept.
func (p *processedCharts) values(ch *chart.Chart, digest string, spec map[string]any) (*chart.Chart, chartcommon.Values, error) {
	if digest == "" || ch == nil || ch.Metadata == nil {
		return helmValues(ch, spec)
	}
	key, err := processingKey(ch, digest, spec)
	if err != nil {
		return helmValues(ch, spec)
	}
	if c, ok := p.cache.Get(key); ok {
		return coalesce(c.(*chart.Chart), spec)
	}
	c, err := processDependencies(ch, spec)
	if err != nil {
		return nil, nil, err
	}
	p.cache.Add(key, c)
	return coalesce(c, spec)
}

// processingKey identifies what dependency processing of ch makes of spec: the chart
// digest and the user's values under every key a condition or tag can read.
func processingKey(ch *chart.Chart, digest string, spec map[string]any) (string, error) {
	keys := []string{"tags", "global"}
	var walk func(c *chart.Chart)
	walk = func(c *chart.Chart) {
		if c.Metadata == nil {
			return
		}
		for _, d := range c.Metadata.Dependencies {
			if d == nil {
				continue
			}
			keys = append(keys, d.Name, d.Alias)
			for _, cond := range strings.Split(d.Condition, ",") {
				first, _, _ := strings.Cut(strings.TrimSpace(cond), ".")
				keys = append(keys, first)
			}
		}
		for _, sub := range c.Dependencies() {
			keys = append(keys, sub.Name())
			walk(sub)
		}
	}
	walk(ch)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	relevant := make(map[string]any, len(keys))
	for _, k := range keys {
		if v, ok := spec[k]; ok && k != "" {
			relevant[k] = v
		}
	}
	b, err := json.Marshal(relevant)
	if err != nil {
		return "", err
	}
	// Hashed: the values are the user's, of any size, and the keys stay in memory.
	sum := sha256.Sum256(b)
	return digest + "\x00" + hex.EncodeToString(sum[:]), nil
}
