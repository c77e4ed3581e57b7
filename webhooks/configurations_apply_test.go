package webhooks

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// fixedBundle is a CA bundle that never changes.
type fixedBundle []byte

func (b fixedBundle) CABundle() []byte       { return b }
func (fixedBundle) Subscribe(func(b []byte)) {}

// Issue 28: the chart's webhook configurations are applied server-side by Helm 4
// (manager helm), and Compositor applies its own fields beside them (the rules and the
// CA bundle): a `helm upgrade` that changes a field of the chart's, the timeout say,
// meets no conflict with Compositor's manager, and Compositor's fields stay.
func TestAChartUpgradeMeetsNoConflictWithCompositor(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	service := &admissionregistrationv1.ServiceReference{Namespace: "ops", Name: "compositor-webhook"}
	port := int32(443)
	service.Port = &port
	helmApply := func(timeout int32) error {
		mutating, validating, err := Configurations(ConfigurationOptions{Endpoint: Endpoint{Service: service}, TimeoutSeconds: timeout})
		require.NoError(t, err)
		for _, obj := range []client.Object{mutating, validating} {
			content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			require.NoError(t, err)
			u := &unstructured.Unstructured{Object: content}
			unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			for _, h := range hooks {
				delete(h.(map[string]any), "rules") // the chart templates no rules
			}
			require.NoError(t, unstructured.SetNestedSlice(u.Object, hooks, "webhooks"))
			if err := cp.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("helm")); err != nil {
				return err
			}
		}
		return nil
	}
	require.NoError(t, helmApply(5), "helm install")
	bundle := fixedBundle("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	require.NoError(t, Install(ctx, cp.Client, bundle, ConfigurationOptions{Endpoint: Endpoint{Service: service}, TimeoutSeconds: 5}))
	require.NoError(t, helmApply(10), "helm upgrade changing the timeout, without forcing conflicts")

	got := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: ConfigurationName}, got))
	for _, w := range got.Webhooks {
		assert.Equal(t, int32(10), *w.TimeoutSeconds, w.Name)
		assert.NotEmpty(t, w.Rules, "%s: Compositor's rules stay", w.Name)
		assert.Equal(t, []byte(bundle), w.ClientConfig.CABundle, w.Name)
		require.NotNil(t, w.ClientConfig.Service, w.Name)
	}

	// Without the chart's configurations, Compositor applies them whole.
	require.NoError(t, cp.Client.Delete(ctx, got))
	require.NoError(t, cp.Client.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: got.ObjectMeta}))
	require.NoError(t, Install(ctx, cp.Client, bundle, ConfigurationOptions{Endpoint: Endpoint{Service: service}, TimeoutSeconds: 5}))
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: ConfigurationName}, got))
	require.NotEmpty(t, got.Webhooks)
	assert.Equal(t, int32(5), *got.Webhooks[0].TimeoutSeconds)
	assert.NotNil(t, got.Webhooks[0].SideEffects)
}
