package generators

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/mitchellh/copystructure"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
)

// CopyChart returns a copy of c that Helm may process, render and install without
// changing c: Helm's dependency processing and installs write to a chart's metadata,
// dependency list, values and template list, and charts are shared (cached by digest).
// File contents and schemas, which nothing writes, are shared.
func CopyChart(c *chart.Chart) (*chart.Chart, error) {
	out := *c
	if c.Metadata != nil {
		md := *c.Metadata
		md.Dependencies = nil
		for _, d := range c.Metadata.Dependencies {
			if d == nil {
				continue
			}
			dd := *d
			dd.Tags = append([]string(nil), d.Tags...)
			dd.ImportValues = append([]interface{}(nil), d.ImportValues...)
			md.Dependencies = append(md.Dependencies, &dd)
		}
		out.Metadata = &md
	}
	if c.Values != nil {
		v, err := copyValues(c.Values)
		if err != nil {
			return nil, fmt.Errorf("copying the values of chart %s: %w", c.Name(), err)
		}
		out.Values = v.(map[string]interface{})
	}
	out.Templates = append([]*chartcommon.File(nil), c.Templates...)
	out.Files = append([]*chartcommon.File(nil), c.Files...)
	deps := make([]*chart.Chart, 0, len(c.Dependencies()))
	for _, d := range c.Dependencies() {
		dc, err := CopyChart(d)
		if err != nil {
			return nil, err
		}
		deps = append(deps, dc)
	}
	out.SetDependencies(deps...)
	return &out, nil
}

// copyValues deep-copies chart values. Values read from YAML hold only maps, lists and
// scalars, which are copied directly (reflection-based copying was a quarter of an
// admission review's time); anything else goes through copystructure.
func copyValues(v interface{}) (interface{}, error) {
	switch x := v.(type) {
	case map[string]interface{}:
		out := make(map[string]interface{}, len(x))
		for k, e := range x {
			c, err := copyValues(e)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case []interface{}:
		out := make([]interface{}, len(x))
		for i, e := range x {
			c, err := copyValues(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case nil, string, bool, int, int64, float64, json.Number:
		return x, nil
	default:
		return copystructure.Copy(x)
	}
}

// ContentDigest identifies what a chart holds, whatever archive it came in: a sha256
// over the name and content of every file the archive had (subcharts included), in
// name order. Two packagings of one chart directory share it, while their archive
// digests differ by timestamps.
func ContentDigest(c *chart.Chart) string {
	files := slices.Clone(c.Raw)
	slices.SortFunc(files, func(a, b *chartcommon.File) int { return strings.Compare(a.Name, b.Name) })
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
