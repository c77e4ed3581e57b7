package webhooks

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

// definitionChecks are the validations every CompositionDefinition write goes through.
func definitionChecks(reader client.Reader) Chain {
	return Chain{keepServedCompositions{reader: reader}}
}

// keepServedCompositions refuses to delete a definition while compositions of the
// version it serves exist and no other definition serves that version: they would be
// left without a controller.
type keepServedCompositions struct {
	reader client.Reader
}

func (k keepServedCompositions) Check(ctx context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Operation != admissionv1.Delete || req.Kind.Kind != "CompositionDefinition" || req.OldObject == nil {
		return nil, nil
	}
	def := &corev1alpha1.CompositionDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(req.OldObject.Object, def); err != nil {
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("decoding the definition: %w", err))}, nil
	}
	gv, err := schema.ParseGroupVersion(def.Status.APIVersion)
	if err != nil || gv.Group != CompositionGroup || def.Status.Kind == "" {
		return nil, nil // it never served an API
	}

	definitions := &corev1alpha1.CompositionDefinitionList{}
	if err := k.reader.List(ctx, definitions); err != nil {
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("listing definitions: %w", err))}, nil
	}
	for _, other := range definitions.Items {
		if other.UID != def.UID && other.DeletionTimestamp.IsZero() &&
			other.Status.Kind == def.Status.Kind && other.Status.APIVersion == def.Status.APIVersion {
			return nil, nil
		}
	}

	// The compositions are listed through any version the CRD still serves: the
	// definition's own may be gone already (an upgrade in flight).
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k.reader.Get(ctx, client.ObjectKey{Name: def.Status.Resource + "." + gv.Group}, crd); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil // no API, no compositions
		}
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("reading the CRD of %s: %w", def.Status.Kind, err))}, nil
	}
	via := ""
	for _, v := range crd.Spec.Versions {
		if v.Served {
			via = v.Name
			break
		}
	}
	if via == "" {
		return nil, nil
	}
	compositions := &metav1.PartialObjectMetadataList{}
	compositions.SetGroupVersionKind(schema.GroupVersionKind{Group: gv.Group, Version: via, Kind: def.Status.Kind + "List"})
	if err := k.reader.List(ctx, compositions, client.MatchingLabels{LabelCompositionVersion: gv.Version}); err != nil {
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("listing %s compositions: %w", def.Status.Kind, err))}, nil
	}
	if n := len(compositions.Items); n > 0 {
		return field.ErrorList{field.Forbidden(field.NewPath("metadata", "name"), fmt.Sprintf(
			"%d %s of version %s still exist and no other definition serves that version: delete them first (kubectl delete %s.%s.%s --all -A), or move them to another version",
			n, def.Status.Kind, gv.Version, def.Status.Resource, gv.Version, gv.Group))}, nil
	}
	return nil, nil
}
