package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
)

// ConfigurationName names both webhook configurations Compositor installs.
const ConfigurationName = "compositor"

// fieldManager owns what Compositor applies.
const fieldManager = vocab.FieldManager

// Endpoint says how the API server reaches the webhook server: through a Service in a
// cluster, or at a URL (the local control plane of `compositor dev`).
type Endpoint struct {
	// Service is the webhook Service; its Path is ignored.
	Service *admissionregistrationv1.ServiceReference
	// URL is the base URL of the webhook server, e.g. https://127.0.0.1:9443.
	URL string
}

// ConfigurationOptions shape the webhook configurations.
type ConfigurationOptions struct {
	Endpoint Endpoint
	// CABundle is the PEM bundle the API server verifies the server with; empty when
	// cert-manager's cainjector fills it in (see Annotations).
	CABundle []byte
	// TimeoutSeconds the API server waits for an answer.
	TimeoutSeconds int32
	// Annotations go on both configurations, e.g. cert-manager.io/inject-ca-from.
	Annotations map[string]string
}

// StatusWebhookName names the validating webhook of compositions' status writes.
const StatusWebhookName = "status.compositor.dev"

// Configurations returns the mutating and validating webhook configurations. Their
// rules cover Compositor's own groups only, so an outage of Compositor can never block
// core Kubernetes objects; the mutating webhook covers only compositions, the one
// kind it changes. The validating configuration has a second webhook, for the status
// subresource of compositions alone (StatusPath), so that the writes of objects are
// not sent to it nor status writes to theirs.
func Configurations(opts ConfigurationOptions) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	mutateClient, err := opts.clientConfig(MutatePath)
	if err != nil {
		return nil, nil, err
	}
	validateClient, err := opts.clientConfig(ValidatePath)
	if err != nil {
		return nil, nil, err
	}
	statusClient, err := opts.clientConfig(StatusPath)
	if err != nil {
		return nil, nil, err
	}
	write := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	meta := metav1.ObjectMeta{Name: ConfigurationName, Annotations: opts.Annotations}

	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: meta,
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "compositions.mutate.compositor.dev",
			ClientConfig:            mutateClient,
			Rules:                   rules(write, vocab.CompositionGroup),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(opts.TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: *meta.DeepCopy(),
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validate.compositor.dev",
			ClientConfig:            validateClient,
			Rules:                   rules(append(write, admissionregistrationv1.Delete), vocab.CompositionGroup, corev1alpha1.GroupVersion.Group, policyGroup),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(opts.TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
		}, {
			// Writes of a composition's status, by anyone but Compositor, are refused
			// (StatusGuard); a patch is an update at admission.
			Name:         StatusWebhookName,
			ClientConfig: statusClient,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{vocab.CompositionGroup},
					APIVersions: []string{"*"},
					Resources:   []string{"*/status"},
					Scope:       ptr.To(admissionregistrationv1.AllScopes),
				},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(opts.TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	return mutating, validating, nil
}

func rules(ops []admissionregistrationv1.OperationType, groups ...string) []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: ops,
		Rule: admissionregistrationv1.Rule{
			APIGroups:   groups,
			APIVersions: []string{"*"},
			// "*" is every resource but no subresource: status writes go to the
			// status webhook alone.
			Resources: []string{"*"},
			Scope:     ptr.To(admissionregistrationv1.AllScopes),
		},
	}}
}

func (o ConfigurationOptions) clientConfig(path string) (admissionregistrationv1.WebhookClientConfig, error) {
	cfg := admissionregistrationv1.WebhookClientConfig{CABundle: o.CABundle}
	switch {
	case o.Endpoint.Service != nil && o.Endpoint.URL != "":
		return cfg, errors.New("webhook endpoint: set a Service or a URL, not both")
	case o.Endpoint.Service != nil:
		svc := *o.Endpoint.Service
		svc.Path = ptr.To(path)
		cfg.Service = &svc
	case o.Endpoint.URL != "":
		base, err := url.Parse(o.Endpoint.URL)
		if err != nil || base.Scheme != "https" || base.Host == "" {
			return cfg, fmt.Errorf("webhook endpoint URL %q must be an https:// URL", o.Endpoint.URL)
		}
		cfg.URL = ptr.To(base.JoinPath(path).String())
	default:
		return cfg, errors.New("webhook endpoint: a Service or a URL is required")
	}
	return cfg, nil
}

// BundleSource knows the current CA bundle and tells when it changes; certs.Provider
// is one.
type BundleSource interface {
	CABundle() []byte
	Subscribe(fn func(bundle []byte))
}

// Install applies the webhook configurations with the current CA bundle of certs, and
// applies them again whenever the bundle changes.
func Install(ctx context.Context, c client.Client, certs BundleSource, opts ConfigurationOptions) error {
	apply := func(bundle []byte) error {
		opts := opts
		opts.CABundle = bundle
		mutating, validating, err := Configurations(opts)
		if err != nil {
			return err
		}
		for _, obj := range []client.Object{mutating, validating} {
			if opts.Endpoint.Service != nil {
				// In a cluster, the chart's configurations: apply only what Compositor
				// fills in, so that the chart's own fields stay the chart's, which
				// Helm 4's server-side apply of an upgrade changes without conflict.
				err := applyOwnFields(ctx, c, obj)
				if err == nil {
					continue
				}
				if !apierrors.IsInvalid(err) {
					return err
				}
				// Not there (no chart made it): the whole configuration.
			}
			err := serverSideApply(ctx, c, obj)
			if apierrors.IsInvalid(err) {
				// Possibly another manager's endpoint of the other kind next to this
				// one's: move the webhooks to this endpoint, then apply again.
				if moved := moveEndpoint(ctx, c, obj); moved != nil {
					return errors.Join(err, moved)
				}
				err = serverSideApply(ctx, c, obj)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := apply(certs.CABundle()); err != nil {
		return err
	}
	certs.Subscribe(func(bundle []byte) {
		if err := apply(bundle); err != nil {
			log.FromContext(ctx).Error(err, "Updating the CA bundle of the webhook configurations")
		}
	})
	return nil
}

// moveEndpoint points the webhooks of the configuration obj names at obj's endpoint,
// clearing the endpoint of the other kind (a URL for a Service, or the reverse).
//
// The chart templates the configurations for its Service, as Helm's manager, so that
// Helm deletes them with the release; a Compositor serving elsewhere (--webhook-url)
// cannot take them over by applying alone, which never removes another manager's
// fields, and a webhook with both a Service and a URL is invalid. A strategic merge
// patch of each webhook's clientConfig, by webhook name, can: it needs no read, which
// Compositor's rights do not include.
func moveEndpoint(ctx context.Context, c client.Client, obj client.Object) error {
	type namedClientConfig struct {
		name string
		cfg  admissionregistrationv1.WebhookClientConfig
	}
	var clientConfigs []namedClientConfig
	switch o := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for _, w := range o.Webhooks {
			clientConfigs = append(clientConfigs, namedClientConfig{w.Name, w.ClientConfig})
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for _, w := range o.Webhooks {
			clientConfigs = append(clientConfigs, namedClientConfig{w.Name, w.ClientConfig})
		}
	default:
		return fmt.Errorf("moving the webhook endpoint: unsupported %T", obj)
	}
	webhooks := make([]map[string]any, 0, len(clientConfigs))
	for _, w := range clientConfigs {
		cfg := map[string]any{"url": nil, "service": nil}
		if w.cfg.URL != nil {
			cfg["url"] = *w.cfg.URL
		} else {
			cfg["service"] = w.cfg.Service
		}
		webhooks = append(webhooks, map[string]any{"name": w.name, "clientConfig": cfg})
	}
	data, err := json.Marshal(map[string]any{"webhooks": webhooks})
	if err != nil {
		return err
	}
	target, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("moving the webhook endpoint: %T is not a client.Object", obj)
	}
	if err := c.Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, data), client.FieldOwner(fieldManager)); err != nil {
		return fmt.Errorf("moving the webhooks of %s to this endpoint: %w", obj.GetName(), err)
	}
	log.FromContext(ctx).Info("Moved the webhook configuration to this endpoint", "name", obj.GetName())
	return nil
}

// applyOwnFields applies, of the configuration obj, only the fields Compositor fills
// in beside the chart: each webhook's rules (what this binary judges) and CA bundle
// (built-in certificates). Fields Compositor applied before and leaves out now stay
// as the chart's.
func applyOwnFields(ctx context.Context, c client.Client, obj client.Object) error {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("converting %s: %w", obj.GetName(), err)
	}
	webhooks, _, _ := unstructured.NestedSlice(content, "webhooks")
	own := make([]any, 0, len(webhooks))
	for _, w := range webhooks {
		hook, _ := w.(map[string]any)
		entry := map[string]any{"name": hook["name"], "rules": hook["rules"]}
		if bundle, found, _ := unstructured.NestedFieldNoCopy(hook, "clientConfig", "caBundle"); found && bundle != nil {
			entry["clientConfig"] = map[string]any{"caBundle": bundle}
		}
		own = append(own, entry)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": content["apiVersion"], "kind": content["kind"],
		"metadata": map[string]any{"name": obj.GetName()},
		"webhooks": own,
	}}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying the rules and CA bundle of %s %s: %w", content["kind"], obj.GetName(), err)
	}
	return nil
}

// serverSideApply applies obj, which must carry its apiVersion and kind, as Compositor.
func serverSideApply(ctx context.Context, c client.Client, obj client.Object) error {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("converting %s %s: %w", kind, obj.GetName(), err)
	}
	u := &unstructured.Unstructured{Object: content}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, obj.GetName(), err)
	}
	return nil
}
