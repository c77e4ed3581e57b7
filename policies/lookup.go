package policies

import (
	"context"
	"fmt"
	"sync/atomic"

	"helm.sh/helm/v4/pkg/engine"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Lookup answers a template's `lookup apiVersion kind namespace name`: the object
// (name set) or the list (name empty) as the API server gives it, or nil when there is
// none. An error fails the render, as a failed lookup fails Helm's.
type Lookup func(apiVersion, kind, namespace, name string) (map[string]any, error)

// MaxLookups bounds the lookups of one render: each is a request to the API server,
// and a template that loops over lookup would otherwise send one per turn.
const MaxLookups = 64

// newLookupProvider gives Helm's engine lookup as ask answers it, at most MaxLookups
// times. It hands the engine a client per kind that knows only Get and List, the two
// calls the engine's lookup makes, and that calls every kind namespaced: ask is told
// the namespace the template named and decides, as Helm's lookup does, that a
// cluster-scoped kind has none.
func newLookupProvider(ask Lookup) engine.ClientProvider {
	return &lookupProvider{ask: ask}
}

type lookupProvider struct {
	ask   Lookup
	asked atomic.Int32
}

func (p *lookupProvider) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	return &lookupClient{provider: p, apiVersion: apiVersion, kind: kind}, true, nil
}

// lookupClient is the engine's client for one kind (and, after Namespace, one
// namespace). The embedded interface is nil: the engine calls nothing but Namespace,
// Get and List.
type lookupClient struct {
	dynamic.NamespaceableResourceInterface
	provider             *lookupProvider
	apiVersion, kind, ns string
}

func (c *lookupClient) Namespace(namespace string) dynamic.ResourceInterface {
	scoped := *c
	scoped.ns = namespace
	return &scoped
}

func (c *lookupClient) answer(name string) (map[string]any, error) {
	if n := c.provider.asked.Add(1); n > MaxLookups {
		return nil, fmt.Errorf("lookup %s %s: the chart looked up more than %d objects in one render", c.apiVersion, c.kind, MaxLookups)
	}
	obj, err := c.provider.ask(c.apiVersion, c.kind, c.ns, name)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		// Helm's lookup gives an empty map for what is not found.
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: c.kind}, name)
	}
	return obj, nil
}

func (c *lookupClient) Get(_ context.Context, name string, _ metav1.GetOptions, _ ...string) (*unstructured.Unstructured, error) {
	obj, err := c.answer(name)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

func (c *lookupClient) List(context.Context, metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	obj, err := c.answer("")
	if err != nil {
		return nil, err
	}
	list := &unstructured.UnstructuredList{Object: make(map[string]any, len(obj))}
	for k, v := range obj {
		if k != "items" {
			list.Object[k] = v
		}
	}
	items, _ := obj["items"].([]any)
	for _, item := range items {
		if m, ok := item.(map[string]any); ok {
			list.Items = append(list.Items, unstructured.Unstructured{Object: m})
		}
	}
	return list, nil
}
