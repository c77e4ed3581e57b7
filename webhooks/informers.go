package webhooks

import (
	"context"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/compositor-dev/compositor/generators/crd"
)

// ForgetRetiredVersions removes from c the informers the release-name check started
// (uniqueReleaseName: one of compositions' metadata per kind and version written)
// once the generated CRD no longer serves their version, or is gone: an informer of a
// version the API server no longer serves only fails, and thousands of kinds come and
// go. It returns once it watches, and watches until ctx is done; run it on every
// replica, as the webhooks run.
func ForgetRetiredVersions(ctx context.Context, c cache.Cache) error {
	informer, err := c.GetInformer(ctx, &apiextensionsv1.CustomResourceDefinition{})
	if err != nil {
		return err
	}
	forget := func(old, current *apiextensionsv1.CustomResourceDefinition) {
		if old == nil || old.Spec.Group != crd.Group {
			return
		}
		served := map[string]bool{}
		if current != nil {
			for _, v := range current.Spec.Versions {
				served[v.Name] = v.Served
			}
		}
		for _, v := range old.Spec.Versions {
			if !v.Served || served[v.Name] {
				continue
			}
			obj := &metav1.PartialObjectMetadata{}
			obj.SetGroupVersionKind(schema.GroupVersionKind{Group: crd.Group, Version: v.Name, Kind: old.Spec.Names.Kind})
			if err := c.RemoveInformer(ctx, obj); err != nil {
				log.FromContext(ctx).Error(err, "Removing the informer of a retired version", "kind", old.Spec.Names.Kind, "version", v.Name)
			}
		}
	}
	registration, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, _ := oldObj.(*apiextensionsv1.CustomResourceDefinition)
			current, _ := newObj.(*apiextensionsv1.CustomResourceDefinition)
			forget(old, current)
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			old, _ := obj.(*apiextensionsv1.CustomResourceDefinition)
			forget(old, nil)
		},
	})
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		_ = informer.RemoveEventHandler(registration)
	}()
	return nil
}
