package policies

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"
)

// RenderOptions name the release a chart is rendered for.
type RenderOptions struct {
	// ReleaseName is the Helm release, the composition's krateo.io/release-name.
	ReleaseName string
	// Namespace is the release namespace, the composition's.
	Namespace string
	// IsUpgrade renders as `helm upgrade` would (.Release.IsUpgrade); else as install.
	IsUpgrade bool
}

// RenderedObject is one Kubernetes object a chart renders.
type RenderedObject struct {
	// Template is the template file it comes from, e.g. fireworks-app/templates/deployment.yaml.
	Template string
	// Object is the object as rendered.
	Object map[string]any
}

// Ref names the object as violations do: "Deployment/x-fireworks-app".
func (o RenderedObject) Ref() string {
	kind, _ := o.Object["kind"].(string)
	md, _ := o.Object["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	return kind + "/" + name
}

// Render renders ch with spec as `helm template` would (dependencies processed,
// values coalesced, the chart's schema not checked — that is the schema validator's
// job), entirely in memory and without a cluster: lookup finds nothing and the
// capabilities are Helm's defaults. Objects come in template order, then in their
// order inside each template; NOTES.txt and empty documents are left out. Errors wrap
// ErrRender.
func Render(ch *chart.Chart, spec map[string]any, opts RenderOptions) ([]RenderedObject, error) {
	processed, _, err := helmValues(ch, spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	vals, err := chartutil.ToRenderValuesWithSchemaValidation(processed, spec, chartutil.ReleaseOptions{
		Name:      opts.ReleaseName,
		Namespace: opts.Namespace,
		Revision:  1,
		IsInstall: !opts.IsUpgrade,
		IsUpgrade: opts.IsUpgrade,
	}, nil, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	files, err := engine.Render(processed, vals)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" || strings.TrimSpace(files[name]) == "" {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var out []RenderedObject
	for _, name := range names {
		docs := releaseutil.SplitManifests(files[name])
		keys := make([]string, 0, len(docs))
		for k := range docs {
			keys = append(keys, k)
		}
		sort.Sort(releaseutil.BySplitManifestsOrder(keys))
		for _, k := range keys {
			obj := map[string]any{}
			if err := yaml.Unmarshal([]byte(docs[k]), &obj); err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrRender, name, err)
			}
			if len(obj) == 0 {
				continue
			}
			out = append(out, RenderedObject{Template: name, Object: obj})
		}
	}
	return out, nil
}
