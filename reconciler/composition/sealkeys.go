// Keys per definition: the key that seals and proves a definition's release records
// and CompositionRevisions is derived from Compositor's master key and the
// definition's namespace (HKDF-SHA256, MasterSeal.ForNamespace). The master key never
// leaves Compositor's process: in process the controllers derive in memory; a
// generated controller Deployment reads, through a Role that names them, only the key
// Secrets of the definitions it serves (KeySecretName), which serve writes. A record
// sealed under one definition namespace's key is refused by every other: a tenant who
// got one controller's key forges records for its own team's compositions alone.
//
// The definitions of one namespace are one team's, and share a key: a composition
// moved between them (from a team's definition of 1.1.5 to its definition of 2.0.0,
// say) keeps its records and revisions, and so does a definition deleted and made
// again, which would get a new UID.

package composition

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/ownership"
)

// definitionKeyLabel is HKDF's info for the key of a definition namespace's
// definitions, followed by the namespace. A new derivation gets a new version, so no
// two share a key.
const definitionKeyLabel = "compositor.dev/definition-namespace-seal/v1\x00"

// ReasonReleaseSealUnavailable is the condition reason of a composition whose
// definition's key the controller cannot read: nothing was installed or deleted.
const ReasonReleaseSealUnavailable = "ReleaseSealUnavailable"

// ErrSealUnavailable means a definition's key cannot be had (yet): the seal migration
// has not finished, or its Secret is not written or not readable.
var ErrSealUnavailable = errors.New("the release seal of the definition is not available")

// SealKeys gives the seal of the release records and CompositionRevisions of the
// compositions of a definition.
type SealKeys interface {
	SealFor(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*ReleaseSeal, error)
}

// MasterSeal is Compositor's master key. It seals nothing itself (but records of
// the build before keys per definition, which the migration reads): every
// definition's key is derived from it.
type MasterSeal struct {
	master *ReleaseSeal
	// ready, when set, says whether the seal migration is done: until then no key is
	// given, so nothing acts on a record the migration has still to re-seal.
	ready func() bool
}

var _ SealKeys = (*MasterSeal)(nil)

// NewMasterSeal returns the master seal of key, which must hold at least 32 bytes.
func NewMasterSeal(key []byte) (*MasterSeal, error) {
	seal, err := NewReleaseSeal(key)
	if err != nil {
		return nil, err
	}
	return &MasterSeal{master: seal}, nil
}

// GateOn returns m giving keys only once ready says so.
func (m *MasterSeal) GateOn(ready func() bool) *MasterSeal {
	return &MasterSeal{master: m.master, ready: ready}
}

// ForNamespace is the seal of the definitions in namespace.
func (m *MasterSeal) ForNamespace(namespace string) (*ReleaseSeal, error) {
	if namespace == "" {
		return nil, fmt.Errorf("%w: the definition has no namespace", ErrSealUnavailable)
	}
	key, err := hkdf.Key(sha256.New, m.master.key, nil, definitionKeyLabel+namespace, minSealKey)
	if err != nil {
		return nil, fmt.Errorf("deriving the key of the definitions of namespace %s: %w", namespace, err)
	}
	return &ReleaseSeal{key: key}, nil
}

// SealFor derives the seal of def in memory, once the migration is done.
func (m *MasterSeal) SealFor(_ context.Context, def *corev1alpha1.CompositionDefinition) (*ReleaseSeal, error) {
	if m.ready != nil && !m.ready() {
		return nil, fmt.Errorf("%w: the seal migration has not finished", ErrSealUnavailable)
	}
	return m.ForNamespace(def.Namespace)
}

// Legacy is the seal of the records written before keys per definition, with the
// master key itself: only the migration reads with it.
func (m *MasterSeal) Legacy() *ReleaseSeal { return m.master }

// KeySecretName is the Secret, in Compositor's namespace, that keeps the key of the
// definition whose UID is uid: a hash of the UID, so the name says nothing of the
// definition and no definition can choose another's.
func KeySecretName(uid types.UID) string {
	sum := sha256.Sum256([]byte("compositor.dev/seal-key-secret\x00" + string(uid)))
	return KeySecretPrefix + hex.EncodeToString(sum[:])[:24]
}

// KeySecretPrefix starts the name of every key Secret.
const KeySecretPrefix = "compositor-seal-"

// KeySecret is the Secret of namespace that keeps def's derived key, labelled with
// def's UID so it can be found and removed when def goes.
func (m *MasterSeal) KeySecret(namespace string, def *corev1alpha1.CompositionDefinition) (*corev1.Secret, error) {
	seal, err := m.ForNamespace(def.Namespace)
	if err != nil {
		return nil, err
	}
	secret := SealSecret(namespace, KeySecretName(def.UID), seal.key)
	secret.Labels = map[string]string{
		vocab.LabelManagedBy:     vocab.ManagedBy,
		LabelSealKeyOfDefinition: string(def.UID),
	}
	secret.Immutable = ptrTo(true)
	return secret, nil
}

// LabelSealKeyOfDefinition labels a key Secret with the UID of its definition.
const LabelSealKeyOfDefinition = "compositor.dev/seal-key-of"

// SecretKeys reads each definition's key from its Secret in Compositor's namespace:
// what a controller Deployment does, whose Role may get those Secrets by name and no
// other. Keys read are kept; a key Secret is immutable.
type SecretKeys struct {
	Reader    client.Reader
	Namespace string

	mu   sync.Mutex
	keys map[types.UID]*ReleaseSeal
}

var _ SealKeys = (*SecretKeys)(nil)

// SealFor reads the seal of def from its key Secret, once.
func (s *SecretKeys) SealFor(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*ReleaseSeal, error) {
	s.mu.Lock()
	seal, ok := s.keys[def.UID]
	s.mu.Unlock()
	if ok {
		return seal, nil
	}
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: s.Namespace, Name: KeySecretName(def.UID)}
	if err := s.Reader.Get(ctx, key, secret); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("%w: Secret %s, the key of definition %s/%s, does not exist yet; compositor serve writes it once the seal migration is done: %v",
				ErrSealUnavailable, key, def.Namespace, def.Name, err)
		case apierrors.IsForbidden(err):
			return nil, fmt.Errorf("%w: this controller may not get Secret %s, the key of definition %s/%s (its release-seal Role names the keys of the definitions it serves): %v",
				ErrSealUnavailable, key, def.Namespace, def.Name, err)
		}
		return nil, fmt.Errorf("reading Secret %s, the key of definition %s/%s: %w", key, def.Namespace, def.Name, err)
	}
	if secret.Labels[LabelSealKeyOfDefinition] != string(def.UID) {
		return nil, fmt.Errorf("%w: Secret %s is not the key of definition %s/%s", ErrSealUnavailable, key, def.Namespace, def.Name)
	}
	data, err := SealKeyFrom(secret)
	if err != nil {
		return nil, err
	}
	if seal, err = NewReleaseSeal(data); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.keys == nil {
		s.keys = map[types.UID]*ReleaseSeal{}
	}
	s.keys[def.UID] = seal
	s.mu.Unlock()
	return seal, nil
}

// KeyDefinition is the definition whose key seals the records of a composition of gvk
// in namespace: the one it belongs to (ownership.For); while none serves it, the one
// it belonged to by the same rule among those being deleted, which keep their key
// until they are gone, so a composition deleted with its definition is uninstalled.
func KeyDefinition(defs []corev1alpha1.CompositionDefinition, gvk schema.GroupVersionKind, namespace string) *corev1alpha1.CompositionDefinition {
	if def := ownership.For(defs, gvk, namespace); def != nil {
		return def
	}
	var deleting []corev1alpha1.CompositionDefinition
	for i := range defs {
		if !defs[i].DeletionTimestamp.IsZero() && ownership.Reports(&defs[i], gvk) {
			d := *defs[i].DeepCopy()
			d.DeletionTimestamp = nil
			deleting = append(deleting, d)
		}
	}
	def := ownership.For(deleting, gvk, namespace)
	if def == nil {
		return nil
	}
	i := slices.IndexFunc(defs, func(d corev1alpha1.CompositionDefinition) bool { return d.UID == def.UID })
	return &defs[i]
}

// sealKey is the context key of the seal of the composition being reconciled.
type sealKey struct{}

// withSeal returns ctx carrying seal, the seal of the records of the composition
// being reconciled.
func withSeal(ctx context.Context, seal *ReleaseSeal) context.Context {
	return context.WithValue(ctx, sealKey{}, seal)
}

// sealFrom is the seal withSeal put in ctx; nil for none.
func sealFrom(ctx context.Context) *ReleaseSeal {
	seal, _ := ctx.Value(sealKey{}).(*ReleaseSeal)
	return seal
}

// Sealed returns h reading and writing release records with seal.
func (h *Helm) Sealed(seal *ReleaseSeal) *Helm {
	if seal == nil || seal == h.seal {
		return h
	}
	c := *h
	c.seal = seal
	return &c
}

// sealOf chooses the seal of obj's records: that of its definition def, or, with none
// serving it, of its KeyDefinition; without Keys, the one Helm was built with. ours is
// false when the key definition is another definition namespace's, whose controller
// acts on obj.
func (r *Reconciler) sealOf(ctx context.Context, obj client.Object, def *corev1alpha1.CompositionDefinition) (seal *ReleaseSeal, ours bool, err error) {
	if r.Keys == nil {
		if r.Helm == nil {
			return nil, true, nil
		}
		return r.Helm.seal, true, nil
	}
	if def == nil {
		list := &corev1alpha1.CompositionDefinitionList{}
		if err := r.Client.List(ctx, list); err != nil {
			return nil, true, fmt.Errorf("listing CompositionDefinitions for the release seal: %w", err)
		}
		if def = KeyDefinition(list.Items, r.GVK, obj.GetNamespace()); def == nil {
			return nil, true, fmt.Errorf("%w: no CompositionDefinition serves %s to namespace %s, nor is being deleted", ErrSealUnavailable, r.GVK, obj.GetNamespace())
		}
	}
	if r.DefinitionNamespace != "" && def.Namespace != r.DefinitionNamespace {
		return nil, false, nil
	}
	seal, err = r.Keys.SealFor(ctx, def)
	return seal, true, err
}

// DefinitionRevisions proves revisions with the key of the definition given: what the
// rollback webhook asks (webhooks.RevisionVerifier).
type DefinitionRevisions struct{ Keys SealKeys }

// VerifyRevision is def's seal's VerifyRevision.
func (d DefinitionRevisions) VerifyRevision(ctx context.Context, def *corev1alpha1.CompositionDefinition, rev *corev1alpha1.CompositionRevision, uid types.UID) error {
	seal, err := d.Keys.SealFor(ctx, def)
	if err != nil {
		return err
	}
	return seal.VerifyRevision(rev, uid)
}
