package rbac

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/generators"
)

var (
	// ErrUnknownKind means the chart creates a kind the RESTMapper does not know: the
	// API server does not serve it (a missing CRD, a removed API version), so a release
	// could not be installed and no right can be granted for it. The message lists the
	// kinds and the templates they come from.
	ErrUnknownKind = errors.New("chart creates kinds the API server does not serve")
	// ErrForbiddenKind means the chart creates a type Compositor never grants (see
	// Refused): RBAC objects, admission configuration, CRDs and other cluster-wide
	// control. The message lists the types and why.
	ErrForbiddenKind = errors.New("chart creates types Compositor does not grant")
	// ErrRender means the chart cannot be rendered with its default values while some
	// of its manifests only show their apiVersion or kind once rendered, so the types
	// it creates cannot be known.
	ErrRender = errors.New("cannot render the chart to find the kinds it creates")
)

// ResourceType is a type of object a chart creates, resolved through discovery.
type ResourceType struct {
	// Group is the API group, "" for the core group.
	Group string
	// Version is the API version the chart writes.
	Version string
	// Kind as written in the chart.
	Kind string
	// Resource is the plural resource name RBAC rules use.
	Resource string
	// Namespaced is false for cluster-scoped types.
	Namespaced bool
}

// GroupResource returns the group and resource of t.
func (t ResourceType) GroupResource() schema.GroupResource {
	return schema.GroupResource{Group: t.Group, Resource: t.Resource}
}

// ResourceTypes returns every type of object ch can create with any values, sorted by
// group, resource, version and kind: the apiVersion/kind pairs written literally in
// any template or crds/ file of the chart and of its subcharts at any depth, whatever
// their conditions, unioned with what two renders produce — one with the default
// values as Helm would install them, one with every dependency enabled. Manifests
// whose kind is templated are known through the renders only.
//
// Each pair is resolved with mapper. Kinds the mapper does not know give
// ErrUnknownKind, types Compositor refuses give ErrForbiddenKind (both, joined, when
// both happen); a failing default render gives ErrRender only when some manifest
// could not be read statically. Any other mapper error (discovery unreachable) is
// returned wrapped. ch is not modified.
func ResourceTypes(ch *chart.Chart, mapper meta.RESTMapper) ([]ResourceType, error) {
	if ch == nil || ch.Metadata == nil {
		return nil, fmt.Errorf("%w: no chart", ErrRender)
	}
	scanned := scanChart(ch)
	refs := scanned.refs

	rendered, err := renderRefs(ch, false)
	if err != nil && len(scanned.dynamic) > 0 {
		return nil, fmt.Errorf("%w: %s need a render: %w", ErrRender, strings.Join(scanned.dynamic, ", "), err)
	}
	refs = append(refs, rendered...)
	// Enabling every subchart can fail where the defaults do not (a disabled subchart
	// that requires values); the static scan still covers its literal kinds.
	if all, err := renderRefs(ch, true); err == nil {
		refs = append(refs, all...)
	}
	return resolve(refs, mapper)
}

// resolve maps refs to resource types, deduplicated and sorted.
func resolve(refs []typeRef, mapper meta.RESTMapper) ([]ResourceType, error) {
	sources := map[schema.GroupVersionKind][]string{}
	for _, r := range refs {
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		if err != nil || r.APIVersion == "" || r.Kind == "" {
			gv = schema.GroupVersion{Version: r.APIVersion}
		}
		gvk := gv.WithKind(r.Kind)
		if !slices.Contains(sources[gvk], r.Source) {
			sources[gvk] = append(sources[gvk], r.Source)
		}
	}

	var (
		types     []ResourceType
		unknown   []string
		forbidden []string
	)
	for gvk, srcs := range sources {
		sort.Strings(srcs)
		where := fmt.Sprintf("%s %s (%s)", gvk.GroupVersion(), gvk.Kind, strings.Join(srcs, ", "))
		if gvk.Kind == "" || gvk.Version == "" {
			unknown = append(unknown, where)
			continue
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		switch {
		case meta.IsNoMatchError(err):
			unknown = append(unknown, where)
			continue
		case err != nil:
			return nil, fmt.Errorf("resolving %s: %w", where, err)
		}
		t := ResourceType{
			Group:      gvk.Group,
			Version:    gvk.Version,
			Kind:       gvk.Kind,
			Resource:   m.Resource.Resource,
			Namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace,
		}
		if reason, refused := Refused(t.Group, t.Resource); refused {
			forbidden = append(forbidden, fmt.Sprintf("%s from %s: %s", formatGR(t.GroupResource()), where, reason))
			continue
		}
		types = append(types, t)
	}

	var errs []error
	if len(unknown) > 0 {
		sort.Strings(unknown)
		errs = append(errs, fmt.Errorf("%w: %s", ErrUnknownKind, strings.Join(unknown, "; ")))
	}
	if len(forbidden) > 0 {
		sort.Strings(forbidden)
		errs = append(errs, fmt.Errorf("%w: %s", ErrForbiddenKind, strings.Join(forbidden, "; ")))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sortTypes(types)
	return types, nil
}

func sortTypes(types []ResourceType) {
	sort.Slice(types, func(i, j int) bool {
		a, b := types[i], types[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Kind < b.Kind
	})
}

// renderOptions are the release options of the renders: the names do not matter, only
// which kinds come out.
var renderOptions = chartcommon.ReleaseOptions{Name: "release", Namespace: "default", Revision: 1, IsInstall: true}

// renderRefs renders a copy of ch with its default values, the way `helm install`
// does, or with the conditions and tags of every dependency dropped so that every
// subchart is rendered, and returns the apiVersion/kind of each object produced.
// Schema validation is skipped: only the kinds matter here.
func renderRefs(ch *chart.Chart, enableAll bool) ([]typeRef, error) {
	c, err := cloneChart(ch, enableAll)
	if err != nil {
		return nil, err
	}
	if err := chartutil.ProcessDependencies(c, chartcommon.Values{}); err != nil {
		return nil, fmt.Errorf("processing dependencies: %w", err)
	}
	vals, err := chartvalues.ToRenderValuesWithSchemaValidation(c, map[string]interface{}{}, renderOptions, chartcommon.DefaultCapabilities, true)
	if err != nil {
		return nil, fmt.Errorf("computing values: %w", err)
	}
	out, err := engine.Render(c, vals)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	var refs []typeRef
	for _, name := range names {
		if path.Base(name) == "NOTES.txt" {
			continue
		}
		docs := releaseutil.SplitManifests(out[name])
		keys := make([]string, 0, len(docs))
		for k := range docs {
			keys = append(keys, k)
		}
		sort.Sort(releaseutil.BySplitManifestsOrder(keys))
		for _, k := range keys {
			var head manifestHead
			if err := yaml.Unmarshal([]byte(docs[k]), &head); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			refs = head.refs(name, refs)
		}
	}
	return refs, nil
}

// manifestHead is the part of a rendered manifest that says what it is.
type manifestHead struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Items      []manifestHead `json:"items"`
}

func (h manifestHead) refs(source string, refs []typeRef) []typeRef {
	switch {
	case h.APIVersion == "" && h.Kind == "":
		return refs // an empty document
	case h.Kind == "List" || (strings.HasSuffix(h.Kind, "List") && len(h.Items) > 0):
		for _, item := range h.Items {
			refs = item.refs(source, refs)
		}
		return refs
	}
	return append(refs, typeRef{APIVersion: h.APIVersion, Kind: h.Kind, Source: source})
}

// cloneChart copies c so that rendering it never changes the caller's chart. With
// enableAll, every dependency loses its condition and tags, so all of them render.
func cloneChart(c *chart.Chart, enableAll bool) (*chart.Chart, error) {
	out, err := generators.CopyChart(c)
	if err != nil || !enableAll {
		return out, err
	}
	enableDependencies(out)
	return out, nil
}

func enableDependencies(c *chart.Chart) {
	if c.Metadata != nil {
		for _, d := range c.Metadata.Dependencies {
			d.Condition, d.Tags = "", nil
		}
	}
	for _, d := range c.Dependencies() {
		enableDependencies(d)
	}
}

func formatGR(gr schema.GroupResource) string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Group + "/" + gr.Resource
}
