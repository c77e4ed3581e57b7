package definition

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
)

// Values of a version's key in Compositor's record of moves
// (rbac.IdentityMovesConfigMap).
const (
	moveHandover = rbac.MoveHandover
	moveRemove   = rbac.MoveRemove
)

// identityMoves is Compositor's record of the versions whose identity moves from
// their definition's namespace to Compositor's, as this process last read or wrote it.
// The definition reconciler, on the leader, is its only writer.
type identityMoves struct {
	mu     sync.Mutex
	loaded bool
	keys   map[string]string // rbac.MoveKey → moveHandover or moveRemove
}

// moveState is the value of the version's key in Compositor's record of moves, ""
// when it is not moving. The first call of an installation without a record writes it
// (takeCensus).
func (r *Reconciler) moveState(ctx context.Context, namespace, plural, version string) (string, error) {
	r.moves.mu.Lock()
	defer r.moves.mu.Unlock()
	if err := r.loadMoves(ctx); err != nil {
		return "", err
	}
	return r.moves.keys[rbac.MoveKey(namespace, plural, version)], nil
}

// loadMoves reads the record, or writes it when there is none; r.moves.mu is held.
func (r *Reconciler) loadMoves(ctx context.Context) error {
	if r.moves.loaded {
		return nil
	}
	ns := r.compositorNamespace()
	if ns == "" {
		r.moves.loaded, r.moves.keys = true, map[string]string{}
		return nil
	}
	cm := &corev1.ConfigMap{}
	err := r.liveReader().Get(ctx, client.ObjectKey{Namespace: ns, Name: rbac.IdentityMovesConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		if cm, err = r.takeCensus(ctx, ns); apierrors.IsAlreadyExists(err) {
			err = r.liveReader().Get(ctx, client.ObjectKey{Namespace: ns, Name: rbac.IdentityMovesConfigMap}, cm)
		}
	}
	if err != nil {
		return fmt.Errorf("reading Compositor's record of identity moves %s/%s: %w", ns, rbac.IdentityMovesConfigMap, err)
	}
	r.moves.loaded, r.moves.keys = true, maps.Clone(cm.Data)
	if r.moves.keys == nil {
		r.moves.keys = map[string]string{}
	}
	return nil
}

// takeCensus writes the record of moves, once per installation: every version a
// definition's status serves or retains had its identity in the definition's
// namespace before identities moved (moveRemove), and the versions whose old
// controller Deployment runs hand over from it (moveHandover), unless controllers
// run in process, which have nothing to wait for. An installation made by this build
// writes it before any definition serves, so with no key: nothing found later in a
// tenant's namespace ever starts a move.
func (r *Reconciler) takeCensus(ctx context.Context, ns string) (*corev1.ConfigMap, error) {
	defs := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, defs); err != nil {
		return nil, err
	}
	keys := map[string]string{}
	for i := range defs.Items {
		def := &defs.Items[i]
		for _, version := range statusVersions(def) {
			keys[rbac.MoveKey(def.Namespace, def.Status.Resource, version)] = moveRemove
		}
	}
	if r.Kinds == nil || !r.Kinds.InProcess {
		deployments := &appsv1.DeploymentList{}
		if err := r.Client.List(ctx, deployments, client.MatchingLabels{vocab.LabelManagedBy: vocab.ManagedBy}); err != nil {
			return nil, err
		}
		for _, d := range deployments.Items {
			l := d.Labels
			key := rbac.MoveKey(l[vocab.LabelDefinitionNamespace], l[vocab.LabelResource], l[vocab.LabelVersion])
			if _, served := keys[key]; served && d.Namespace == l[vocab.LabelDefinitionNamespace] &&
				d.Name == rbac.LegacyServiceAccountName(l[vocab.LabelResource], l[vocab.LabelVersion]) {
				keys[key] = moveHandover
			}
		}
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rbac.IdentityMovesConfigMap, Labels: map[string]string{vocab.LabelManagedBy: vocab.ManagedBy}},
		Data:       keys,
	}
	if owner := r.Charts.Store.OwnerReference(ctx); owner != nil {
		cm.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if err := r.Client.Create(ctx, cm); err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("Recorded the identities that move to Compositor's namespace", "versions", len(keys))
	return cm, nil
}

// endMove removes the version's key from the record: its move is done, for good.
func (r *Reconciler) endMove(ctx context.Context, namespace, plural, version string) error {
	r.moves.mu.Lock()
	defer r.moves.mu.Unlock()
	key := rbac.MoveKey(namespace, plural, version)
	if _, ok := r.moves.keys[key]; !ok || r.compositorNamespace() == "" {
		return nil
	}
	cm := &corev1.ConfigMap{}
	err := r.liveReader().Get(ctx, client.ObjectKey{Namespace: r.compositorNamespace(), Name: rbac.IdentityMovesConfigMap}, cm)
	if err == nil {
		if _, ok := cm.Data[key]; ok {
			delete(cm.Data, key)
			err = r.Client.Update(ctx, cm)
		}
	}
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("recording that the identity of %s %s has moved: %w", plural, version, err)
	}
	delete(r.moves.keys, key)
	return nil
}

// movesOf are the keys of the record naming def's versions (those its status serves
// or retains), with their plural and version.
func (r *Reconciler) movesOf(ctx context.Context, def *corev1alpha1.CompositionDefinition) (map[[2]string]string, error) {
	r.moves.mu.Lock()
	defer r.moves.mu.Unlock()
	if err := r.loadMoves(ctx); err != nil {
		return nil, err
	}
	out := map[[2]string]string{}
	for _, version := range statusVersions(def) {
		if state, ok := r.moves.keys[rbac.MoveKey(def.Namespace, def.Status.Resource, version)]; ok {
			out[[2]string{def.Status.Resource, version}] = state
		}
	}
	return out, nil
}

// statusVersions are the versions def's status serves and retains.
func statusVersions(def *corev1alpha1.CompositionDefinition) []string {
	if def.Status.Resource == "" {
		return nil
	}
	var out []string
	for _, served := range servedCharts(def) {
		if gv, err := schema.ParseGroupVersion(served.APIVersion); err == nil && gv.Version != "" && !slices.Contains(out, gv.Version) {
			out = append(out, gv.Version)
		}
	}
	return out
}

// sweepLegacyIdentities runs first in every reconciliation of a definition, whatever
// its state, and needs no chart: the names come from its status and the record of
// moves. The identity a version of def had in def's namespace, where its tenants may
// mint its token, never keeps the seal keys, the chart archive, the credentials or a
// cluster-wide right. When syncing (def neither paused, nor being deleted, nor failing
// to sync) and handing over (moveHandover), it keeps its release bindings until the
// new controller serves (removeLegacyIdentity); otherwise its bindings, cluster-wide
// ones included, ServiceAccount (and so its tokens) and Deployment are removed now.
// Not syncing, the move is done; syncing, the sync applies the bindings anew for the
// new ServiceAccount, and the move ends once it has (endRemovedMoves).
func (r *Reconciler) sweepLegacyIdentities(ctx context.Context, def *corev1alpha1.CompositionDefinition, syncing bool) error {
	moves, err := r.movesOf(ctx, def)
	if err != nil || len(moves) == 0 {
		return err
	}
	var errs []error
	for pv, state := range moves {
		plural, version := pv[0], pv[1]
		if syncing && state == moveHandover {
			errs = append(errs, r.unbindLegacy(ctx, def.Namespace, plural, version, true))
			continue
		}
		if err := r.removeLegacyObjects(ctx, def.Namespace, plural, version); err != nil {
			errs = append(errs, err)
			continue
		}
		// Compositor may not read ClusterRoleBindings: those that may still name the
		// old ServiceAccount, with the rules of before, go whole.
		names := rbac.NamesFor(def.Namespace, plural, version)
		labels := client.MatchingLabels(rbac.IdentityLabels(def.Namespace, plural, version))
		failures := len(errs)
		for _, name := range []string{names.CompositionsRole, names.ClusterRole} {
			if err := r.Client.DeleteAllOf(ctx, &rbacv1.ClusterRoleBinding{}, labels, client.MatchingFields{"metadata.name": name}); client.IgnoreNotFound(err) != nil {
				errs = append(errs, fmt.Errorf("removing ClusterRoleBinding %s, which may name the ServiceAccount of before identities moved: %w", name, err))
			}
		}
		if !syncing && len(errs) == failures {
			errs = append(errs, r.endMove(ctx, def.Namespace, plural, version))
		}
	}
	return errors.Join(errs...)
}

// endRemovedMoves ends the moves of def's versions that had no controller to hand
// over from (moveRemove), once def has synced: their identity in def's namespace is
// gone (sweepLegacyIdentities) and every binding is applied for the new one.
func (r *Reconciler) endRemovedMoves(ctx context.Context, def *corev1alpha1.CompositionDefinition) error {
	moves, err := r.movesOf(ctx, def)
	if err != nil {
		return err
	}
	var errs []error
	for pv, state := range moves {
		if state == moveRemove {
			errs = append(errs, r.endMove(ctx, def.Namespace, pv[0], pv[1]))
		}
	}
	return errors.Join(errs...)
}

// removeLegacyObjects removes what a version's controller had in the definition's
// namespace before identities moved to Compositor's: the former ServiceAccount from
// every RoleBinding (the binding itself when it names no other), then the
// ServiceAccount, whose tokens die with it, and the Deployment, found by name and
// identity labels.
func (r *Reconciler) removeLegacyObjects(ctx context.Context, namespace, plural, version string) error {
	if err := r.unbindLegacy(ctx, namespace, plural, version, false); err != nil {
		return err
	}
	err := r.Client.DeleteAllOf(ctx, &corev1.ServiceAccount{}, client.InNamespace(namespace),
		client.MatchingLabels(rbac.IdentityLabels(namespace, plural, version)),
		client.MatchingFields{"metadata.name": rbac.LegacyServiceAccountName(plural, version)})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing the ServiceAccount %s/%s, which Compositor made before identities moved to its namespace: %w",
			namespace, rbac.LegacyServiceAccountName(plural, version), err)
	}
	legacy, err := r.legacyController(ctx, namespace, plural, version)
	if err != nil || legacy == nil {
		return err
	}
	if err := client.IgnoreNotFound(r.Client.Delete(ctx, legacy, client.Preconditions{UID: &legacy.UID})); err != nil {
		return fmt.Errorf("removing the controller Deployment %s/%s, which Compositor ran before identities moved to its namespace: %w",
			legacy.Namespace, legacy.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Removed the controller Deployment of the definition's namespace",
		"namespace", legacy.Namespace, "name", legacy.Name)
	return nil
}

// unbindLegacy takes the version's former ServiceAccount out of its RoleBindings, in
// every namespace; keepRelease leaves it in the release bindings, while it hands over.
func (r *Reconciler) unbindLegacy(ctx context.Context, namespace, plural, version string, keepRelease bool) error {
	list := &rbacv1.RoleBindingList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels(rbac.IdentityLabels(namespace, plural, version))); err != nil {
		return fmt.Errorf("listing the RoleBindings of %s %s: %w", plural, version, err)
	}
	legacy := rbac.LegacySubject(namespace, plural, version)
	release := rbac.NamesFor(namespace, plural, version).ReleaseBinding
	var errs []error
	for i := range list.Items {
		b := &list.Items[i]
		if !slices.Contains(b.Subjects, legacy) || (keepRelease && b.Name == release && b.RoleRef.Kind == "ClusterRole") {
			continue
		}
		rest := slices.DeleteFunc(slices.Clone(b.Subjects), func(s rbacv1.Subject) bool { return s == legacy })
		var err error
		if len(rest) == 0 {
			err = r.Client.Delete(ctx, b, client.Preconditions{UID: &b.UID})
		} else {
			patched := b.DeepCopy()
			patched.Subjects = rest
			err = r.Client.Patch(ctx, patched, client.MergeFrom(b))
		}
		if client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("taking ServiceAccount %s/%s out of RoleBinding %s/%s: %w", legacy.Namespace, legacy.Name, b.Namespace, b.Name, err))
		}
	}
	return errors.Join(errs...)
}

// liveReader reads from the API server when the reconciler has a live reader.
func (r *Reconciler) liveReader() client.Reader {
	if r.Live != nil {
		return r.Live
	}
	return r.Client
}

// failedToSync tells whether err, from a definition's sync, says it does not sync: a
// conflict is retried at once and says nothing of its health, so a handover goes on.
func failedToSync(err error) bool {
	return err != nil && !apierrors.IsConflict(err)
}
