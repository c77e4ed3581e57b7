package certs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/compositor-dev/compositor/api/vocab"
)

// fieldOwner is the field manager of the CA bundles written here.
const fieldOwner = client.FieldOwner(vocab.FieldManager)

var (
	// ErrEmptyBundle is returned by InjectCABundle for an empty bundle, which would
	// make every call to the webhooks fail.
	ErrEmptyBundle = errors.New("certs: refusing to inject an empty CA bundle")
	// ErrUnsupportedObject is returned by InjectCABundle for an object it cannot write
	// a CA bundle into.
	ErrUnsupportedObject = errors.New("certs: cannot inject a CA bundle into this kind of object")
)

// InjectCABundle writes bundle into every webhook of the MutatingWebhookConfigurations
// and ValidatingWebhookConfigurations among objs, and into the conversion webhook of
// the CustomResourceDefinitions among them (a CRD without one is left alone). objs are
// identified by type and name only; their content is neither read nor changed.
//
// Each object is patched, only where its bundle differs, so other writers of the same
// objects keep their fields. Every object is tried; the error names each that failed.
func InjectCABundle(ctx context.Context, c client.Client, bundle []byte, objs ...client.Object) error {
	if len(bytes.TrimSpace(bundle)) == 0 {
		return ErrEmptyBundle
	}
	var errs []error
	for _, obj := range objs {
		if err := injectInto(ctx, c, bundle, obj); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func injectInto(ctx context.Context, c client.Client, bundle []byte, obj client.Object) error {
	var (
		kind  string
		patch client.Patch
		err   error
	)
	key := client.ObjectKey{Name: obj.GetName()}
	switch obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		kind = "MutatingWebhookConfiguration"
		current := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err = c.Get(ctx, key, current); err == nil {
			patch, err = webhooksPatch(staleWebhooks(current.Webhooks, bundle, func(w admissionregistrationv1.MutatingWebhook) (string, []byte) {
				return w.Name, w.ClientConfig.CABundle
			}), bundle)
		}
		obj = current
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		kind = "ValidatingWebhookConfiguration"
		current := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err = c.Get(ctx, key, current); err == nil {
			patch, err = webhooksPatch(staleWebhooks(current.Webhooks, bundle, func(w admissionregistrationv1.ValidatingWebhook) (string, []byte) {
				return w.Name, w.ClientConfig.CABundle
			}), bundle)
		}
		obj = current
	case *apiextensionsv1.CustomResourceDefinition:
		kind = "CustomResourceDefinition"
		current := &apiextensionsv1.CustomResourceDefinition{}
		if err = c.Get(ctx, key, current); err == nil {
			patch, err = conversionPatch(current, bundle)
		}
		obj = current
	default:
		return fmt.Errorf("%w: %T %q", ErrUnsupportedObject, obj, obj.GetName())
	}
	if err == nil && patch != nil {
		err = c.Patch(ctx, obj, patch, fieldOwner)
		if err == nil {
			log.FromContext(ctx).Info("Injected the CA bundle", "kind", kind, "name", key.Name)
		}
	}
	if err != nil {
		return fmt.Errorf("injecting the CA bundle into %s %q: %w", kind, key.Name, err)
	}
	return nil
}

// webhooksPatch is a strategic merge patch of the caBundle of the named webhooks only:
// webhooks merge by name, so the others and every other field stay as they are. It is
// nil when there is nothing to change.
func webhooksPatch(names []string, bundle []byte) (client.Patch, error) {
	if len(names) == 0 {
		return nil, nil
	}
	type clientConfig struct {
		CABundle []byte `json:"caBundle"`
	}
	type webhook struct {
		Name         string       `json:"name"`
		ClientConfig clientConfig `json:"clientConfig"`
	}
	webhooks := make([]webhook, 0, len(names))
	for _, name := range names {
		webhooks = append(webhooks, webhook{Name: name, ClientConfig: clientConfig{CABundle: bundle}})
	}
	data, err := json.Marshal(map[string]any{"webhooks": webhooks})
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.StrategicMergePatchType, data), nil
}

// conversionPatch is a merge patch of the caBundle of crd's conversion webhook, nil when
// crd has none or its bundle is already right.
func conversionPatch(crd *apiextensionsv1.CustomResourceDefinition, bundle []byte) (client.Patch, error) {
	conversion := crd.Spec.Conversion
	if conversion == nil || conversion.Strategy != apiextensionsv1.WebhookConverter ||
		conversion.Webhook == nil || conversion.Webhook.ClientConfig == nil ||
		bytes.Equal(conversion.Webhook.ClientConfig.CABundle, bundle) {
		return nil, nil
	}
	data, err := json.Marshal(map[string]any{
		"spec": map[string]any{
			"conversion": map[string]any{
				"webhook": map[string]any{
					"clientConfig": map[string]any{"caBundle": bundle},
				},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.MergePatchType, data), nil
}

// staleWebhooks names the webhooks whose CA bundle is not bundle.
func staleWebhooks[W any](webhooks []W, bundle []byte, nameAndBundle func(W) (string, []byte)) []string {
	var names []string
	for _, w := range webhooks {
		if name, current := nameAndBundle(w); !bytes.Equal(current, bundle) {
			names = append(names, name)
		}
	}
	return names
}
