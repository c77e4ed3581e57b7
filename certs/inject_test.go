package certs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

func webhookClientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443" + path)}
}

func webhookRules() []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"example.compositor.dev"}, APIVersions: []string{"*"}, Resources: []string{"*"},
		},
	}}
}

func mutatingWebhook(name string) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name:                    name,
		ClientConfig:            webhookClientConfig("/mutate"),
		Rules:                   webhookRules(),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
	}
}

func validatingWebhook(name string) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:                    name,
		ClientConfig:            webhookClientConfig("/validate"),
		Rules:                   webhookRules(),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
	}
}

func crd(plural string, conversion *apiextensionsv1.CustomResourceConversion) *apiextensionsv1.CustomResourceDefinition {
	version := func(name string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: true, Storage: storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", XPreserveUnknownFields: ptr.To(true),
			}},
		}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".example.compositor.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.compositor.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: plural + "kind", ListKind: plural + "kindList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				version("v1alpha1", false), version("v1", true),
			},
			Conversion: conversion,
		},
	}
}

func TestInjectCABundle(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := t.Context()
	c := cp.Client

	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "compositor"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{mutatingWebhook("a.compositor.dev"), mutatingWebhook("b.compositor.dev")},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "compositor"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{validatingWebhook("a.compositor.dev"), validatingWebhook("b.compositor.dev")},
	}
	converted := crd("widgets", &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443/convert")},
			ConversionReviewVersions: []string{"v1"},
		},
	})
	unconverted := crd("gadgets", nil)
	for _, obj := range []client.Object{mutating, validating, converted, unconverted} {
		require.NoError(t, c.Create(ctx, obj))
	}

	// Objects are named by type and name only.
	targets := func() []client.Object {
		return []client.Object{
			&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "compositor"}},
			&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "compositor"}},
			&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: converted.Name}},
			&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: unconverted.Name}},
		}
	}
	assertBundle := func(bundle []byte) {
		t.Helper()
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(mutating), mutating))
		require.Len(t, mutating.Webhooks, 2)
		for _, w := range mutating.Webhooks {
			assert.Equal(t, bundle, w.ClientConfig.CABundle, w.Name)
		}
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(validating), validating))
		require.Len(t, validating.Webhooks, 2)
		for _, w := range validating.Webhooks {
			assert.Equal(t, bundle, w.ClientConfig.CABundle, w.Name)
		}
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(converted), converted))
		assert.Equal(t, bundle, converted.Spec.Conversion.Webhook.ClientConfig.CABundle)
	}

	ca, err := newCA(time.Now(), time.Hour)
	require.NoError(t, err)
	require.NoError(t, InjectCABundle(ctx, c, ca.certPEM, targets()...))
	assertBundle(ca.certPEM)

	// Another writer changes other fields; injecting again keeps them, and changes
	// nothing when the bundle is already there.
	mutating.Webhooks[1].TimeoutSeconds = ptr.To[int32](7)
	require.NoError(t, c.Update(ctx, mutating))
	var versions []string
	for _, obj := range targets() {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		versions = append(versions, obj.GetResourceVersion())
	}
	require.NoError(t, InjectCABundle(ctx, c, ca.certPEM, targets()...))
	for i, obj := range targets() {
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		assert.Equal(t, versions[i], obj.GetResourceVersion(), "%T %s was written again", obj, obj.GetName())
	}

	// A rotation's bundle replaces the old one everywhere.
	next, err := newCA(time.Now(), time.Hour)
	require.NoError(t, err)
	rotated := joinPEM(ca.certPEM, next.certPEM)
	require.NoError(t, InjectCABundle(ctx, c, rotated, targets()...))
	assertBundle(rotated)
	assert.Equal(t, ptr.To[int32](7), mutating.Webhooks[1].TimeoutSeconds, "the other writer's field survives")

	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(unconverted), unconverted))
	assert.Nil(t, unconverted.Spec.Conversion.Webhook, "a CRD without webhook conversion is left alone")

	t.Run("errors name the object", func(t *testing.T) {
		err := InjectCABundle(ctx, c, rotated,
			&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "missing"}},
			&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "compositor"}},
		)
		require.Error(t, err)
		assert.True(t, apierrors.IsNotFound(err))
		assert.ErrorContains(t, err, `ValidatingWebhookConfiguration "missing"`)

		err = InjectCABundle(ctx, c, rotated, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
		assert.ErrorIs(t, err, ErrUnsupportedObject)
		assert.ErrorIs(t, InjectCABundle(ctx, c, nil, targets()...), ErrEmptyBundle)
	})
}
