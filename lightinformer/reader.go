package lightinformer

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reader reads what the informer holds as a client.Reader: Get by namespace and name,
// List by namespace, labels and limit. The objects are copies, of the informer's type
// (Unstructured or PartialObjectMetadata).
func (i *Informer) Reader() client.Reader { return listerReader{i.Lister()} }

type listerReader struct{ lister toolscache.GenericLister }

func (r listerReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	got, err := r.lister.ByNamespace(key.Namespace).Get(key.Name)
	if err != nil {
		return err
	}
	return copyInto(got, obj)
}

func (r listerReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	selector := o.LabelSelector
	if selector == nil {
		selector = labels.Everything()
	}
	var got []runtime.Object
	var err error
	if o.Namespace != "" {
		got, err = r.lister.ByNamespace(o.Namespace).List(selector)
	} else {
		got, err = r.lister.List(selector)
	}
	if err != nil {
		return err
	}
	if o.Limit > 0 && int64(len(got)) > o.Limit {
		got = got[:o.Limit]
	}
	items := make([]runtime.Object, len(got))
	for i, obj := range got {
		items[i] = obj.DeepCopyObject()
	}
	return meta.SetList(list, items)
}

// copyInto copies the informer's object from into obj, of the same type.
func copyInto(from runtime.Object, obj client.Object) error {
	switch src := from.(type) {
	case *unstructured.Unstructured:
		if dst, ok := obj.(*unstructured.Unstructured); ok {
			src.DeepCopyInto(dst)
			return nil
		}
	case *metav1.PartialObjectMetadata:
		if dst, ok := obj.(*metav1.PartialObjectMetadata); ok {
			src.DeepCopyInto(dst)
			return nil
		}
	}
	return fmt.Errorf("the informer holds %T, not %T", from, obj)
}
