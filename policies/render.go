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

// RenderOptions are the inputs of a render besides the chart and the values: the
// release it is rendered for and what its templates may ask of the cluster. With the
// revision, the capabilities and a lookup Helm's install or upgrade would have, a
// render is the one Helm makes (RenderFiles).
type RenderOptions struct {
	// ReleaseName is the Helm release, the composition's krateo.io/release-name.
	ReleaseName string
	// Namespace is the release namespace, the composition's.
	Namespace string
	// IsUpgrade renders as `helm upgrade` would (.Release.IsUpgrade); else as install.
	IsUpgrade bool
	// Revision is .Release.Revision: the revision the install or upgrade records; 0
	// is 1, a first install's.
	Revision int
	// Capabilities are .Capabilities: the target cluster's version and APIs; nil is
	// Helm's defaults (`helm template`'s).
	Capabilities *chartcommon.Capabilities
	// Lookup answers the templates' lookup; nil finds nothing, as `helm template`
	// does. It is not sent to a sandbox worker: the worker asks its parent, which
	// calls it.
	Lookup Lookup
	// MaxRenderedBytes bounds the bytes the chart may render to (Limits.CheckRendered);
	// 0 is DefaultMaxRenderedBytes. A Renderer sets its own bound here, which is how a
	// sandbox worker gets it.
	MaxRenderedBytes int
}

// RenderedObject is one Kubernetes object a chart renders.
type RenderedObject struct {
	// Template is the template file it comes from, e.g. fireworks-app/templates/deployment.yaml.
	Template string
	// Object is the object as rendered, with the release's ownership metadata Helm
	// adds before it sends it (HelmOwned).
	Object map[string]any
}

// Helm's ownership metadata: the label and annotations Helm's install, upgrade and
// rollback set on every object of a release's manifest after building it, and
// Compositor's install gate on its hooks.
const (
	LabelManagedBy             = "app.kubernetes.io/managed-by"
	ManagedByHelm              = "Helm"
	AnnotationReleaseName      = "meta.helm.sh/release-name"
	AnnotationReleaseNamespace = "meta.helm.sh/release-namespace"
)

// HelmOwned is obj as it reaches the cluster in release name of namespace. Helm builds
// each object of the release manifest, then (setMetadataVisitor, in pkg/action)
// labels it app.kubernetes.io/managed-by=Helm and annotates it with the release's name
// and namespace, over whatever the chart wrote there, before it creates or updates it;
// the install gate annotates a hook likewise (hook true), and labels nothing. What a
// policy judges is what is applied, so it judges this. obj is not changed: the copy
// shares all but its metadata, labels and annotations.
func HelmOwned(obj map[string]any, name, namespace string, hook bool) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	owned := make(map[string]any, len(md)+2)
	for k, v := range md {
		owned[k] = v
	}
	if !hook {
		owned["labels"] = withStrings(md["labels"], LabelManagedBy, ManagedByHelm)
	}
	owned["annotations"] = withStrings(md["annotations"], AnnotationReleaseName, name, AnnotationReleaseNamespace, namespace)
	out := make(map[string]any, len(obj)+1)
	for k, v := range obj {
		out[k] = v
	}
	out["metadata"] = owned
	return out
}

// withStrings is the label or annotation map m as Helm reads it (stringMap), with the
// key-value pairs kv set, as Helm writes it back.
func withStrings(m any, kv ...string) map[string]any {
	out := stringMap(m)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// stringMap is a copy of the label or annotation map m as Helm's accessor reads it
// (Unstructured.GetLabels, GetAnnotations): a null value is "", and a map with any
// other value that is not a string, or anything but a map, reads as empty.
func stringMap(m any) map[string]any {
	old, _ := m.(map[string]any)
	out := make(map[string]any, len(old)+2)
	for k, v := range old {
		switch v := v.(type) {
		case string:
			out[k] = v
		case nil:
			out[k] = ""
		default:
			return make(map[string]any, 2)
		}
	}
	return out
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
// job), entirely in memory: lookup finds nothing and the capabilities are Helm's
// defaults unless opts give them. The objects are those Helm's kube client would
// build to create, release manifest and hooks alike (see objectsOf and decode.go):
// a list's items rather than the list; notes, empty documents and hooks of an event Helm
// does not know left out. They come in template order, then in their order inside each
// template. Errors wrap ErrRender; a document whose reading is ambiguous is refused
// with one naming the template, the document and why.
func Render(ch *chart.Chart, spec map[string]any, opts RenderOptions) ([]RenderedObject, error) {
	files, err := RenderFiles(ch, spec, opts)
	if err != nil {
		return nil, err
	}
	for name := range files {
		// Helm takes every file ending in NOTES.txt out before sorting the manifests.
		if strings.HasSuffix(name, notesSuffix) {
			delete(files, name)
		}
	}
	return objectsOf(files, &opts)
}

// RenderFiles renders ch with spec for the release opts name, as Helm's install or
// upgrade renders it: the templates' output by file (notes included), within the
// bound on rendered bytes. Errors wrap ErrRender.
func RenderFiles(ch *chart.Chart, spec map[string]any, opts RenderOptions) (map[string]string, error) {
	processed, _, err := helmValues(ch, spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	vals, err := chartvalues.ToRenderValuesWithSchemaValidation(processed, spec, chartcommon.ReleaseOptions{
		Name:      opts.ReleaseName,
		Namespace: opts.Namespace,
		Revision:  max(1, opts.Revision),
		IsInstall: !opts.IsUpgrade,
		IsUpgrade: opts.IsUpgrade,
	}, opts.Capabilities, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	var files map[string]string
	if opts.Lookup != nil {
		files, err = engine.RenderWithClientProvider(processed, vals, newLookupProvider(opts.Lookup))
	} else {
		files, err = engine.Render(processed, vals)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	bound := &Renderer{MaxRenderedBytes: opts.MaxRenderedBytes}
	if err := bound.CheckRendered(ch.Name(), files); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRender, err)
	}
	return files, nil
}

// notesSuffix ends the names of the files Helm renders as notes, not manifests.
const notesSuffix = "NOTES.txt"

// objectsOf gives the objects Helm's kube client builds from rendered template files, in
// template order, then in their order inside each template. It follows Helm's install:
// releaseutil.SortManifests splits each file and tells hooks from manifests (a hook of
// an event Helm does not know is never created, so it is left out); a manifest is
// decoded as Client.Build decodes it in the release manifest, under its
// "---\n# Source: <file>" header; a hook alone, as Helm builds it. With release, each
// object is as Helm sends it for that release (HelmOwned): the manifest's labelled and
// annotated, the hooks annotated.
func objectsOf(files map[string]string, release *RenderOptions) ([]RenderedObject, error) {
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
			hook := false
			switch {
			case manifestPieces[p] > 0:
				manifestPieces[p]--
				stream = "---\n# Source: " + name + "\n" + p.content + "\n"
			case hookPieces[p] > 0:
				hookPieces[p]--
				stream, hook = p.content, true
			default:
				continue
			}
			first := len(d.out)
			if err := d.add(stream, template); err != nil {
				return nil, err
			}
			if release != nil {
				for i := first; i < len(d.out); i++ {
					d.out[i].Object = HelmOwned(d.out[i].Object, release.ReleaseName, release.Namespace, hook)
				}
			}
		}
	}
	return d.out, nil
}
