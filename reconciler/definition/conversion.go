package definition

import (
	"bytes"
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/crd"
)

// ConversionKeeper keeps the conversion webhook of every generated CRD pointed at
// Compositor's current endpoint, with the current CA bundle. It needs no chart: a
// restart that moves the endpoint, or a CA rotation, reaches the CRDs of definitions
// whose chart source is down as well. It runs on the leader only, so that replicas
// that disagree during a rollout do not fight over the CRDs.
type ConversionKeeper struct {
	// Client reads the CRDs through the manager's cache and patches them.
	Client client.Client
	// Conversion locates the conversion webhook; its CABundle is ignored.
	Conversion crd.ConversionWebhook
	// Bundle is the CA bundle the API server trusts the webhooks with. An empty bundle
	// (cert-manager's cainjector has yet to fill it in) leaves the CRDs' bundles as
	// they are.
	Bundle BundleSource

	rotated chan event.GenericEvent
}

// SetupWithManager registers the keeper with mgr.
func (k *ConversionKeeper) SetupWithManager(mgr ctrl.Manager) error {
	k.rotated = make(chan event.GenericEvent, 1)
	managed := predicate.NewPredicateFuncs(func(obj client.Object) bool { return obj.GetLabels()[vocab.LabelManaged] == "true" })
	return ctrl.NewControllerManagedBy(mgr).
		Named("conversionkeeper").
		For(&apiextensionsv1.CustomResourceDefinition{}, builder.WithPredicates(managed)).
		WatchesRawSource(source.Channel(k.rotated, handler.EnqueueRequestsFromMapFunc(k.managedCRDs))).
		Complete(k)
}

// BundleChanged makes the keeper check every generated CRD again. It never blocks.
func (k *ConversionKeeper) BundleChanged() {
	if k.rotated == nil {
		return
	}
	select {
	case k.rotated <- event.GenericEvent{Object: &apiextensionsv1.CustomResourceDefinition{}}:
	default: // a check of every CRD is already due
	}
}

// Reconcile patches the conversion client configuration of one generated CRD when it
// differs from the current one.
func (k *ConversionKeeper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	current := &apiextensionsv1.CustomResourceDefinition{}
	if err := k.Client.Get(ctx, req.NamespacedName, current); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if current.Labels[vocab.LabelManaged] != "true" || current.Spec.Conversion == nil || current.Spec.Conversion.Webhook == nil {
		return ctrl.Result{}, nil
	}
	was := current.Spec.Conversion.Webhook.ClientConfig
	want := k.clientConfig(was)
	if equality.Semantic.DeepEqual(was, want) {
		return ctrl.Result{}, nil
	}
	patched := current.DeepCopy()
	patched.Spec.Conversion.Webhook.ClientConfig = want
	if err := k.Client.Patch(ctx, patched, client.MergeFromWithOptions(current, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, fmt.Errorf("pointing the conversion webhook of %s at Compositor: %w", current.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Conversion webhook of a generated CRD updated", "crd", current.Name,
		"endpointChanged", !sameEndpoint(was, want), "bundleChanged", !bytes.Equal(bundleOf(was), want.CABundle))
	return ctrl.Result{}, nil
}

// clientConfig is the conversion client configuration a generated CRD should have,
// keeping the bundle of was while no bundle is known.
func (k *ConversionKeeper) clientConfig(was *apiextensionsv1.WebhookClientConfig) *apiextensionsv1.WebhookClientConfig {
	cc := &apiextensionsv1.WebhookClientConfig{CABundle: bundleOf(was)}
	if bundle := k.Bundle.CABundle(); len(bytes.TrimSpace(bundle)) > 0 {
		cc.CABundle = append([]byte(nil), bundle...)
	}
	if svc := k.Conversion.Service; svc != nil {
		cc.Service = svc.DeepCopy()
		if cc.Service.Path == nil {
			cc.Service.Path = ptr.To(crd.ConvertPath)
		}
		if cc.Service.Port == nil {
			cc.Service.Port = ptr.To[int32](443) // the API server's default, as stored
		}
	} else {
		cc.URL = ptr.To(k.Conversion.URL)
	}
	return cc
}

// managedCRDs are requests for every generated CRD.
func (k *ConversionKeeper) managedCRDs(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := k.Client.List(ctx, list, client.MatchingLabels{vocab.LabelManaged: "true"}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing generated CRDs after a CA bundle change")
		return nil
	}
	requests := make([]reconcile.Request, 0, len(list.Items))
	for _, item := range list.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKey{Name: item.Name}})
	}
	return requests
}

func bundleOf(cc *apiextensionsv1.WebhookClientConfig) []byte {
	if cc == nil {
		return nil
	}
	return cc.CABundle
}

func sameEndpoint(a, b *apiextensionsv1.WebhookClientConfig) bool {
	if a == nil || b == nil {
		return a == b
	}
	return equality.Semantic.DeepEqual(a.URL, b.URL) && equality.Semantic.DeepEqual(a.Service, b.Service)
}
