package crd

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/util/webhook"
)

var scheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	install.Install(s)
	return s
})

// Validate checks crd the way the API server does on create: defaulting, conversion to
// the internal version, then the apiextensions validation, structural-schema rules
// included, plus the CA bundle check that decides whether the CRD is Established. It
// returns an error wrapping ErrInvalidCRD with every violation.
func Validate(crd *apiextensionsv1.CustomResourceDefinition) error {
	in := crd.DeepCopy()
	scheme().Default(in)
	var internal apiextensions.CustomResourceDefinition
	if err := scheme().Convert(in, &internal, nil); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidCRD, err)
	}
	// The API server records the storage version on create.
	internal.Status.StoredVersions = nil
	for _, v := range internal.Spec.Versions {
		if v.Storage {
			internal.Status.StoredVersions = append(internal.Status.StoredVersions, v.Name)
		}
	}
	errs := validation.ValidateCustomResourceDefinition(context.Background(), &internal)
	// The API server accepts a bad CA bundle on create but never establishes the CRD.
	if conv := crd.Spec.Conversion; conv != nil && conv.Webhook != nil && conv.Webhook.ClientConfig != nil {
		errs = append(errs, webhook.ValidateCABundle(field.NewPath("spec", "conversion", "webhook", "clientConfig", "caBundle"), conv.Webhook.ClientConfig.CABundle)...)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidCRD, errs.ToAggregate())
	}
	return nil
}
