// Package lightinformer runs informers of generated kinds at a cost that thousands of
// them can afford. A client-go shared informer with one event handler keeps nine
// goroutines besides its watch's HTTP/2 stream (its processor, a run/pop pair per
// handler, one that waits to stop it, the reflector's three, ...), and client-go's
// plain informer five (its queue's processing loop and closer besides the reflector's
// three). The informer here is client-go's Reflector writing into an indexer that tells
// the handler of each change as it stores it, with no queue in between: it keeps three
// goroutines — the reflector, its resync timer and the watch's decoder — and one
// watch, whose stream costs a fourth.
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
	store     *tellingStore
	reflector *toolscache.Reflector
	resource  schema.GroupResource
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
	store := &tellingStore{
		indexer: toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, indexers),
		handler: handler,
	}
	reflector := toolscache.NewReflectorWithOptions(lw, objectType, store, toolscache.ReflectorOptions{
		Name:         o.Resource.String(),
		ResyncPeriod: o.Resync,
	})
	return &Informer{store: store, reflector: reflector, resource: o.Resource.GroupResource()}
}

// stripManagedFields drops what nothing here reads before the store keeps it.
func stripManagedFields(obj any) any {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj
}

// Run lists, then watches, until ctx is done; it retries whatever fails, a resource
// the API server does not serve yet included.
func (i *Informer) Run(ctx context.Context) { i.reflector.RunWithContext(ctx) }

// HasSynced is true once the first list is in the store.
func (i *Informer) HasSynced() bool { return i.store.synced.Load() }

// Store is what the informer holds: read it, never write it.
func (i *Informer) Store() toolscache.Indexer { return i.store.indexer }

// Lister reads the store by namespace and labels.
func (i *Informer) Lister() toolscache.GenericLister {
	return toolscache.NewGenericLister(i.store.indexer, i.resource)
}
