package composition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/compositor-dev/compositor/generators"
	"github.com/compositor-dev/compositor/policies"
)

// One render per install, and it is the one Helm applies. The chart's templates run
// once, in the sandbox (policies.Renderer.RenderFiles: a worker that is killed at
// the deadline, in the composition's namespace lane), with the inputs Helm's own
// render would have: the revision the install or upgrade records, the target
// cluster's capabilities, and lookup answered through the namespace-confined client.
// Helm is then handed the rendered files as a chart whose templates are those files,
// verbatim (prerendered): its own render only copies text, so no template of a tenant
// runs in Compositor's process, however it branches on what it is given.

// capabilities are .Capabilities for the cluster h acts on, shared by h's copies
// (As), as discovery is.
func (h *Helm) capabilities(ctx context.Context) (*chartcommon.Capabilities, error) {
	return h.caps.Get(ctx)
}

// lookupBounds bound what the lookups of one render read into this process: a list is
// read in pages of pageSize objects, and the answers of one render together hold at
// most items objects and bytes bytes (as JSON). Helm's own lookup reads a list whole,
// in one response; a tenant's namespace can hold more than any template needs, and
// what a lookup reads is held here, in Compositor's process, then sent to the worker.
type lookupBounds struct {
	pageSize int64
	items    int
	bytes    int
}

// maxLookupItems bounds the objects the lookups of one render read.
const maxLookupItems = 1000

// lookupBoundsOf are the bounds of the lookups of a render within maxRenderedBytes (0:
// the default): what the lookups read may be as big as what the render may produce.
func lookupBoundsOf(maxRenderedBytes int) lookupBounds {
	bound := &policies.Renderer{MaxRenderedBytes: maxRenderedBytes}
	return lookupBounds{pageSize: 250, items: maxLookupItems, bytes: bound.RenderedBytes()}
}

// lookup answers the templates' lookup for a release in namespace as Helm's would, but
// through Helm's confined client (ToRESTConfig): what is outside the namespace, or
// cluster-scoped and not among clusterResources, is refused by the client's transport
// and fails the render, as it fails Helm's. What is not found is nil. The answers of
// the render keep to bounds, past which the lookup fails the render.
func (h *Helm) lookup(ctx context.Context, namespace string, clusterResources []schema.GroupResource, bounds lookupBounds) policies.Lookup {
	var (
		once   sync.Once
		client dynamic.Interface
		made   error
		mu     sync.Mutex
		read   struct{ items, bytes int }
	)
	// take counts obj against the bounds.
	take := func(apiVersion, kind string, obj map[string]any) error {
		encoded, err := json.Marshal(obj)
		if err != nil {
			return fmt.Errorf("lookup %s %s: %w", apiVersion, kind, err)
		}
		mu.Lock()
		defer mu.Unlock()
		read.items++
		read.bytes += len(encoded)
		switch {
		case read.items > bounds.items:
			return fmt.Errorf("lookup %s %s: the chart's lookups read more than %d objects in one render", apiVersion, kind, bounds.items)
		case read.bytes > bounds.bytes:
			return fmt.Errorf("lookup %s %s: the chart's lookups read more than %d bytes in one render (%s)", apiVersion, kind, bounds.bytes, policies.FlagMaxRenderedBytes)
		}
		return nil
	}
	return func(apiVersion, kind, ns, name string) (map[string]any, error) {
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			return nil, fmt.Errorf("lookup %q %q: %w", apiVersion, kind, err)
		}
		mapping, err := h.mapper.RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version)
		if err != nil {
			return nil, fmt.Errorf("lookup %s %s: %w", apiVersion, kind, err)
		}
		once.Do(func() {
			config, _ := h.Getter(namespace, clusterResources...).ToRESTConfig()
			client, made = dynamic.NewForConfig(config)
		})
		if made != nil {
			return nil, fmt.Errorf("lookup %s %s: %w", apiVersion, kind, made)
		}
		var resource dynamic.ResourceInterface = client.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace && ns != "" {
			resource = client.Resource(mapping.Resource).Namespace(ns)
		}
		if name != "" {
			obj, err := resource.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			if err := take(apiVersion, kind, obj.Object); err != nil {
				return nil, err
			}
			return obj.Object, nil
		}
		var whole *unstructured.UnstructuredList
		opts := metav1.ListOptions{Limit: bounds.pageSize}
		for {
			page, err := resource.List(ctx, opts)
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			for i := range page.Items {
				if err := take(apiVersion, kind, page.Items[i].Object); err != nil {
					return nil, err
				}
			}
			if whole == nil {
				whole = page
			} else {
				whole.Items = append(whole.Items, page.Items...)
			}
			if opts.Continue = page.GetContinue(); opts.Continue == "" {
				break
			}
		}
		// The list as one answer gives, with no trace of its pages.
		whole.SetContinue("")
		whole.SetRemainingItemCount(nil)
		return whole.UnstructuredContent(), nil
	}
}

// errNoValue: Helm's engine removes the text "<no value>" from whatever it renders,
// so a render that holds it (only a template built to, by nesting it in itself) would
// not be what Helm applies.
var errNoValue = errors.New(`the chart rendered the text "<no value>", which Helm's render removes`)

// prerendered is ch with its templates replaced by files, what the sandbox rendered of
// it: each file a template that gives back exactly its text (every "{{" is written as
// an action that prints "{{"), under the file's own path, so that Helm's render gives
// the same files under the same names, its "# Source:" lines included. The subcharts
// are gone (their files are among the templates, under charts/<name>/), and so are
// the dependencies Chart.yaml lists; the metadata, values, schema and files stay, so
// that the release record tells which chart and version it is.
func prerendered(ch *chart.Chart, files map[string]string) (*chart.Chart, error) {
	out, err := generators.CopyChart(ch) // Helm writes into the charts it installs
	if err != nil {
		return nil, err
	}
	out.Metadata.Dependencies = nil
	out.Lock = nil
	out.SetDependencies()
	prefix := ch.Name() + "/"
	out.Templates = make([]*chartcommon.File, 0, len(files))
	for name, content := range files {
		rel, ok := strings.CutPrefix(name, prefix)
		if !ok {
			return nil, fmt.Errorf("the render of chart %s gave a file %s outside it", ch.Name(), name)
		}
		if strings.Contains(content, "<no value>") {
			return nil, fmt.Errorf("%w (in %s)", errNoValue, name)
		}
		out.Templates = append(out.Templates, &chartcommon.File{Name: rel, Data: []byte(verbatim(content))})
	}
	return out, nil
}

// verbatim is a Go template whose output is text.
func verbatim(text string) string {
	return strings.ReplaceAll(text, "{{", "{{`{{`}}")
}
