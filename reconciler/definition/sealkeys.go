package definition

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/reconciler/composition"
)

// ReasonSealKeyPending is the reason of a definition whose controller Deployment waits
// for its key: the seal migration has not finished.
const ReasonSealKeyPending = "SealKeyPending"

// sealKeySecrets writes def's key into its Secret in Compositor's namespace, once the
// seal migration is done, and returns the key Secrets the controller of api's version
// for def's namespace may get: those of every definition of def's namespace that
// reports the version (several may serve it from one chart, and share its controller,
// whose Role they must agree on). Only serve holds the master key; a controller holds
// the keys of its own definitions.
func (r *Reconciler) sealKeySecrets(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI) ([]string, error) {
	if r.Seal == nil {
		return nil, &condition.Error{Reason: ReasonApplyFailed, Terminal: true, Err: fmt.Errorf("%w: Compositor was started without its master key", composition.ErrSealUnavailable)}
	}
	if _, err := r.Seal.SealFor(ctx, def); err != nil {
		return nil, &condition.Error{Reason: ReasonSealKeyPending, Err: err}
	}
	secret, err := r.Seal.KeySecret(r.compositorNamespace(), def)
	if err != nil {
		return nil, err
	}
	if owner := r.Charts.Store.OwnerReference(ctx); owner != nil {
		secret.OwnerReferences = append(secret.OwnerReferences, *owner)
	}
	// The key of a UID never changes, and the Secret is immutable: made once.
	if err := r.Client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("writing Secret %s/%s, the key of definition %s/%s: %w", secret.Namespace, secret.Name, def.Namespace, def.Name, err)
	}
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, list, client.InNamespace(def.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the definitions of namespace %s: %w", def.Namespace, err)
	}
	gvk := schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: api.Version, Kind: api.Kind}
	names := []string{composition.KeySecretName(def.UID)}
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID != def.UID && ownership.Reports(other, gvk) {
			names = append(names, composition.KeySecretName(other.UID))
		}
	}
	slices.Sort(names)
	return names, nil
}

// deleteSealKey removes def's key Secret as def goes: a record sealed under it is of
// no definition any more.
func (r *Reconciler) deleteSealKey(ctx context.Context, def *corev1alpha1.CompositionDefinition) error {
	ns := r.compositorNamespace()
	if ns == "" || def.UID == "" {
		return nil
	}
	secret := &corev1.Secret{}
	secret.Namespace, secret.Name = ns, composition.KeySecretName(def.UID)
	if err := r.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing Secret %s/%s, the key of definition %s/%s: %w", ns, secret.Name, def.Namespace, def.Name, err)
	}
	return nil
}
