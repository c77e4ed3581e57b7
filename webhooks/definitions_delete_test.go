package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// A definition that moved to v2-0-0 and retains v1-1-5 may not be deleted while
// compositions are pinned to v1-1-5 and no other definition serves it, as it may not
// while compositions of v2-0-0 exist.
func TestDeletingADefinitionKeepsTheCompositionsOfItsRetainedVersions(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform"}}))
	version := func(name string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: true, Storage: storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", XPreserveUnknownFields: ptr.To(true)}}}
	}
	require.NoError(t, cp.Client.Create(ctx, &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "fireworksapps." + vocab.CompositionGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: vocab.CompositionGroup, Scope: apiextensionsv1.NamespaceScoped,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: "fireworksapps", Singular: "fireworksapp", Kind: "FireworksApp", ListKind: "FireworksAppList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version("v1-1-5", true), version("v2-0-0", false)},
		},
	}))
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "fireworksapp"},
		Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: "oci://charts.invalid/fireworks-app", Version: "2.0.0"}},
	}
	require.NoError(t, cp.Client.Create(ctx, def))
	def.Status.Kind, def.Status.Resource, def.Status.APIVersion = "FireworksApp", "fireworksapps", "composition.krateo.io/v2-0-0"
	def.Status.Retained = []corev1alpha1.ServedChart{{APIVersion: "composition.krateo.io/v1-1-5", Chart: "1.1.5", Digest: "sha256:old"}}
	require.NoError(t, cp.Client.Status().Update(ctx, def))

	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "composition.krateo.io/v1-1-5", "kind": "FireworksApp",
		"metadata": map[string]any{"namespace": "platform", "name": "old-app", "labels": map[string]any{vocab.LabelCompositionVersion: "v1-1-5"}},
	}}
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.NoError(c, cp.Client.Create(ctx, app)) }, 30*time.Second, 50*time.Millisecond)

	old, err := runtime.DefaultUnstructuredConverter.ToUnstructured(def)
	require.NoError(t, err)
	req := &Request{OldObject: &unstructured.Unstructured{Object: old}}
	req.Request = admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Delete, Kind: metav1.GroupVersionKind{Group: vocab.DefinitionGroup, Version: "v1alpha1", Kind: "CompositionDefinition"},
	}}
	check := keepServedCompositions{reader: cp.Client}
	errs, _ := check.Check(ctx, req)
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0].Error(), "1 FireworksApp of version v1-1-5 still exist")

	require.NoError(t, cp.Client.Delete(ctx, app))
	errs, _ = check.Check(ctx, req)
	assert.Empty(t, errs, "no composition left on any of its versions")
}
