package policies

import (
	"fmt"
	"sort"
	"strings"

	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
)

// RenderOptions name the release a chart is rendered for.
type RenderOptions struct {
	// ReleaseName is the Helm release, the composition's krateo.io/release-name.
	ReleaseName string
	// Namespace is the release namespace, the composition's.
	Namespace string
	// IsUpgrade renders as `helm upgrade` would (.Release.IsUpgrade); else as install.
	IsUpgrade bool
	// MaxRenderedBytes bounds the bytes the chart may render to (Limits.CheckRendered);
	// 0 is the process's bound (SetMaxRenderedBytes). A sandbox worker gets the
	// parent's bound this way.
	MaxRenderedBytes int
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
// capabilities are Helm's defaults. The objects are those Helm's kube client would
// build to create, release manifest and hooks alike (see objectsOf and decode.go):
// a list's items rather than the list; notes, empty documents and hooks of an event Helm
// does not know left out. They come in template order, then in their order inside each
// template. Errors wrap ErrRender; a document whose reading is ambiguous is refused
// with one naming the template, the document and why.
func Render(ch *chart.Chart, spec map[string]any, opts RenderOptions) ([]RenderedObject, error) {
	processed, _, err := helmValues(ch, spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	vals, err := chartvalues.ToRenderValuesWithSchemaValidation(processed, spec, chartcommon.ReleaseOptions{
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
	if opts.MaxRenderedBytes > 0 {
		err = Limits{MaxRenderedBytes: opts.MaxRenderedBytes}.CheckRendered(ch.Name(), files)
	} else {
		err = CheckRenderedSize(ch.Name(), files)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	for name := range files {
		// Helm takes every file ending in NOTES.txt out before sorting the manifests.
		if strings.HasSuffix(name, notesSuffix) {
			delete(files, name)
		}
	}
	return objectsOf(files)
}

// notesSuffix ends the names of the files Helm renders as notes, not manifests.
const notesSuffix = "NOTES.txt"

// objectsOf gives the objects Helm's kube client builds from rendered template files, in
// template order, then in their order inside each template. It follows Helm's install:
// releaseutil.SortManifests splits each file and tells hooks from manifests (a hook of
// an event Helm does not know is never created, so it is left out); a manifest is
// decoded as Client.Build decodes it in the release manifest, under its
// "---\n# Source: <file>" header; a hook alone, as Helm builds it.
func objectsOf(files map[string]string) ([]RenderedObject, error) {
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	type piece struct{ file, content string }
	hookPieces := map[piece]int{}
	// pieces counts what SortManifests keeps of each file, hooks and manifests alike.
	pieces := map[string]int{}
	only := map[string]string{}
	for _, h := range hooks {
		hookPieces[piece{h.Path, h.Manifest}]++
		pieces[h.Path]++
		only[h.Path] = h.Manifest
	}
	manifestPieces := map[piece]int{}
	for _, m := range manifests {
		manifestPieces[piece{m.Name, m.Content}]++
		pieces[m.Name]++
		only[m.Name] = m.Content
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	d := newManifestDecoder()
	for _, name := range names {
		// Every piece SortManifests keeps of a file is a document SplitManifests gives of
		// it (SortManifests splits it so), and only those are read below. A file with no
		// piece has nothing to read; a file with one piece, only that piece, once, so its
		// place among the file's documents does not matter and the file need not be split
		// again.
		var docs []string
		switch pieces[name] {
		case 0:
			continue
		case 1:
			docs = []string{only[name]}
		default:
			split := releaseutil.SplitManifests(files[name])
			keys := make([]string, 0, len(split))
			for k := range split {
				keys = append(keys, k)
			}
			sort.Sort(releaseutil.BySplitManifestsOrder(keys))
			docs = make([]string, 0, len(keys))
			for _, k := range keys {
				docs = append(docs, split[k])
			}
		}
		template := func(string) string { return name }
		for _, content := range docs {
			p := piece{name, content}
			var stream string
			switch {
			case manifestPieces[p] > 0:
				manifestPieces[p]--
				stream = "---\n# Source: " + name + "\n" + p.content + "\n"
			case hookPieces[p] > 0:
				hookPieces[p]--
				stream = p.content
			default:
				continue
			}
			if err := d.add(stream, template); err != nil {
				return nil, err
			}
		}
	}
	return d.out, nil
}
