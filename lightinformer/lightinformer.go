// Package lightinformer runs informers of generated kinds at a cost that thousands of
// them can afford. A client-go shared informer with one event handler keeps nine
// goroutines besides its watch's HTTP/2 stream (its processor, a run/pop pair per
// handler, one that waits to stop it, the reflector's three, ...); the plain informer
// this package builds keeps five — the reflector, its resync timer, the watch's
// decoder, the loop that stores each change and calls the handler, and the one that
// closes its queue — and one watch, whose stream costs a sixth.
// Nothing here shares an informer between handlers: each user of a resource owns its
// own, started and stopped with what it serves.
package lightinformer

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	toolscache "k8s.io/client-go/tools/cache"
)

// Options say what an informer watches and whom it tells.
type Options struct {
	// Resource is watched in every namespace.
	Resource schema.GroupVersionResource
	// LabelSelector narrows what is watched; empty watches everything.
	LabelSelector string
	// Indexers are kept besides the namespace index every informer has.
	Indexers toolscache.Indexers
	// Handler is called from the informer's one processing loop, after the store has
	// the change: it must not block. Nil tells nobody.
	Handler toolscache.ResourceEventHandler
	// Resync replays every object to Handler as an update this often; 0 never does.
	Resync time.Duration
}

// Informer keeps a store of one resource current.
type Informer struct {
	store      toolscache.Indexer
	controller toolscache.Controller
	resource   schema.GroupResource
}

// NewDynamic is an informer of whole objects (*unstructured.Unstructured).
func NewDynamic(client dynamic.Interface, o Options) *Informer {
	resource := client.Resource(o.Resource)
	return newInformer(o, &unstructured.Unstructured{}, &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return resource.List(ctx, o.selecting(opts))
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return resource.Watch(ctx, o.selecting(opts))
		},
	})
}

// NewMetadata is an informer of objects' metadata (*metav1.PartialObjectMetadata).
func NewMetadata(client metadata.Interface, o Options) *Informer {
	resource := client.Resource(o.Resource)
	return newInformer(o, &metav1.PartialObjectMetadata{}, &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return resource.List(ctx, o.selecting(opts))
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return resource.Watch(ctx, o.selecting(opts))
		},
	})
}

func (o Options) selecting(opts metav1.ListOptions) metav1.ListOptions {
	opts.LabelSelector = o.LabelSelector
	return opts
}

func newInformer(o Options, objectType runtime.Object, lw *toolscache.ListWatch) *Informer {
	indexers := toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}
	for name, index := range o.Indexers {
		indexers[name] = index
	}
	handler := o.Handler
	if handler == nil {
		handler = toolscache.ResourceEventHandlerFuncs{}
	}
	store, controller := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    objectType,
		Handler:       handler,
		ResyncPeriod:  o.Resync,
		Indexers:      indexers,
		Transform:     stripManagedFields,
	})
	return &Informer{store: store.(toolscache.Indexer), controller: controller, resource: o.Resource.GroupResource()}
}

// stripManagedFields drops what nothing here reads before the store keeps it.
func stripManagedFields(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}

// Run lists, then watches, until ctx is done; it retries whatever fails, a resource
// the API server does not serve yet included.
func (i *Informer) Run(ctx context.Context) { i.controller.RunWithContext(ctx) }

// HasSynced is true once the first list is in the store.
func (i *Informer) HasSynced() bool { return i.controller.HasSynced() }

// Store is what the informer holds: read it, never write it.
func (i *Informer) Store() toolscache.Indexer { return i.store }

// Lister reads the store by namespace and labels.
func (i *Informer) Lister() toolscache.GenericLister {
	return toolscache.NewGenericLister(i.store, i.resource)
}
