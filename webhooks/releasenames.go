package webhooks

import (
	"context"
	"fmt"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/lightinformer"
)

// releaseNameIndex names the index of compositions by namespace and release name.
const releaseNameIndex = "releaseName"

// ReleaseNames knows the release name of every composition of the kinds written to,
// for the release-name check: one metadata-only informer per kind (whatever the
// version, the objects are the same), started on the kind's first write and stopped
// when its CRD stops serving the version it watches or goes, since thousands of kinds
// come and go. It runs on every replica, as the webhooks do: add it to the manager.
type ReleaseNames struct {
	// Metadata lists and watches compositions' metadata.
	Metadata metadata.Interface
	// CRDs is a cache that informs of CustomResourceDefinitions.
	CRDs cache.Cache

	kinds lightinformer.Set[schema.GroupResource, *kindReleaseNames]
	// handled is the resourceVersion of the last update handled, by CRD name: a test
	// tells from it that an update was handled and changed nothing.
	handled sync.Map
}

// kindReleaseNames is the informer of one kind, watched at one served version.
type kindReleaseNames struct {
	resource schema.GroupVersionResource
	informer *lightinformer.Informer
}

// Run watches until ctx is done.
func (k *kindReleaseNames) Run(ctx context.Context) {
	log.FromContext(ctx).V(1).Info("Watching release names", "resource", k.resource.Resource, "version", k.resource.Version)
	k.informer.Run(ctx)
}

// NewReleaseNames returns ReleaseNames reading through client and crds.
func NewReleaseNames(client metadata.Interface, crds cache.Cache) *ReleaseNames {
	return &ReleaseNames{Metadata: client, CRDs: crds}
}

// NeedLeaderElection is false: every replica answers admission.
func (n *ReleaseNames) NeedLeaderElection() bool { return false }

// Start serves until ctx is done, then stops every informer and waits for them.
func (n *ReleaseNames) Start(ctx context.Context) error {
	crds, err := n.CRDs.GetInformer(ctx, &apiextensionsv1.CustomResourceDefinition{})
	if err != nil {
		return err
	}
	registration, err := crds.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if current, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
				n.retire(current.Spec.Group, current.Spec.Names.Plural, current)
				n.handled.Store(current.Name, current.ResourceVersion)
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if old, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
				n.retire(old.Spec.Group, old.Spec.Names.Plural, nil)
			}
		},
	})
	if err != nil {
		return err
	}
	n.kinds.Run(ctx)
	_ = crds.RemoveEventHandler(registration)
	return nil
}

// retire stops the informer of group/plural unless current still serves its version,
// and waits until it has. Only the CRD informer's handler calls it, one event at a
// time, so the informer it looks at is the one it stops.
func (n *ReleaseNames) retire(group, plural string, current *apiextensionsv1.CustomResourceDefinition) {
	if group != vocab.CompositionGroup {
		return
	}
	resource := schema.GroupResource{Group: group, Resource: plural}
	k, ok := n.kinds.Get(resource)
	if !ok {
		return
	}
	if current != nil {
		for _, v := range current.Spec.Versions {
			if v.Name == k.resource.Version && v.Served {
				return
			}
		}
	}
	n.kinds.Stop(resource)
}

// Users are the names of the compositions of resource in namespace whose release name
// is name. The first call for a kind starts its informer and waits until it has listed
// them, at most as long as ctx allows.
func (n *ReleaseNames) Users(ctx context.Context, resource schema.GroupVersionResource, namespace, name string) ([]string, error) {
	informer, err := n.informer(ctx, resource)
	if err != nil {
		return nil, err
	}
	if !informer.HasSynced() {
		err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
			return informer.HasSynced(), nil
		})
		if err != nil {
			return nil, fmt.Errorf("waiting for the list of %s: %w", resource.Resource, err)
		}
	}
	objs, err := informer.Store().ByIndex(releaseNameIndex, namespace+"/"+name)
	if err != nil {
		return nil, err
	}
	users := make([]string, 0, len(objs))
	for _, obj := range objs {
		if o, ok := obj.(*metav1.PartialObjectMetadata); ok {
			users = append(users, o.Name)
		}
	}
	return users, nil
}

// informer returns the informer of resource's kind, started if need be.
func (n *ReleaseNames) informer(ctx context.Context, resource schema.GroupVersionResource) (*lightinformer.Informer, error) {
	k, err := n.kinds.Ensure(ctx, resource.GroupResource(), func() (*kindReleaseNames, error) {
		return &kindReleaseNames{resource: resource, informer: lightinformer.NewMetadata(n.Metadata, lightinformer.Options{
			Resource: resource,
			Indexers: toolscache.Indexers{releaseNameIndex: byReleaseName},
		})}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("release names are not served: %w", err)
	}
	return k.informer, nil
}

// byReleaseName indexes a composition by namespace and release name.
func byReleaseName(obj any) ([]string, error) {
	o, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return nil, nil
	}
	name := o.Annotations[vocab.AnnotationReleaseName]
	if name == "" {
		return nil, nil
	}
	return []string{o.Namespace + "/" + name}, nil
}

// watching is how many kinds have an informer, for tests.
func (n *ReleaseNames) watching() map[schema.GroupResource]string {
	running := n.kinds.All()
	out := make(map[schema.GroupResource]string, len(running))
	for resource, k := range running {
		out[resource] = k.resource.Version
	}
	return out
}
