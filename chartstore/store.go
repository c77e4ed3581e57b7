package chartstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
)

// Labels, annotation and type of the Secrets that keep chart archives in the cluster.
const (
	SecretTypeChartArchive = corev1.SecretType("compositor.dev/chart-archive")
	archiveKey             = "chart.tgz"
)

// MaxStoredArchiveBytes bounds an archive kept in the cluster: one Secret holds at
// most 1 MiB, metadata included. A bigger archive is not kept (not chunked): its
// definition says so, and admission after a restart needs its chart source.
const MaxStoredArchiveBytes = 1000 * 1024

var (
	// ErrTooLargeToStore means an archive is over MaxStoredArchiveBytes.
	ErrTooLargeToStore = errors.New("the chart archive is too large to keep in the cluster")
	// ErrNotStored means no archive with the digest is kept in the cluster.
	ErrNotStored = errors.New("the chart archive is not kept in the cluster")
	// ErrStoredMismatch means the Secret named after a digest holds other content; it
	// is never used.
	ErrStoredMismatch = errors.New("the chart archive kept in the cluster does not match its digest")
)

// Store keeps verified chart archives in Secrets of Compositor's namespace, one per
// digest, so that any replica finds a definition's chart without its chart source.
// What it reads back is used only when its sha256 is the digest asked for.
type Store struct {
	// Client reads and writes the Secrets directly: the manager's cache drops Secret
	// annotations and Compositor never caches Secret data.
	Client client.Client
	// Namespace is Compositor's own namespace.
	Namespace string
	// Owner, when set, names the ServiceAccount in Namespace that owns every archive
	// kept, so that the archives go with it (helm uninstall deletes it). Archives of an
	// owner that cannot be read are kept without one.
	Owner string
	// ReadOnly refuses Put and Prune: a generated controller reads the archives its
	// definition's reconciler keeps, and is granted get on its own one alone.
	ReadOnly bool
}

// ErrReadOnly means a write was asked of a read-only Store.
var ErrReadOnly = errors.New("the chart archives kept in the cluster are read-only here")

// SecretName is the name of the Secret that keeps the archive of digest
// (chartfetch.KeptArchiveSecretName, which the generated RBAC names too).
func SecretName(digest string) string {
	return chartfetch.KeptArchiveSecretName(digest)
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Put keeps archive, whose sha256 must be digest. A Secret already there with other
// content is replaced.
func (s *Store) Put(ctx context.Context, digest string, archive []byte) error {
	if s.ReadOnly {
		return fmt.Errorf("%w: not keeping %s", ErrReadOnly, digest)
	}
	if digestOf(archive) != digest {
		return fmt.Errorf("%w: the archive given is %s, not %s", ErrStoredMismatch, digestOf(archive), digest)
	}
	if len(archive) > MaxStoredArchiveBytes {
		return fmt.Errorf("%w: %d bytes, the most is %d", ErrTooLargeToStore, len(archive), MaxStoredArchiveBytes)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   s.Namespace,
			Name:        SecretName(digest),
			Labels:      map[string]string{vocab.LabelChartArchive: "true", vocab.LabelManagedBy: "compositor"},
			Annotations: map[string]string{vocab.AnnotationChartDigest: digest},
		},
		Type: SecretTypeChartArchive,
		Data: map[string][]byte{archiveKey: archive},
	}
	if owner := s.OwnerReference(ctx); owner != nil {
		secret.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	err := s.Client.Create(ctx, secret)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := s.Get(ctx, digest); err == nil {
		return nil
	}
	existing := &corev1.Secret{}
	if err := s.Client.Get(ctx, client.ObjectKeyFromObject(secret), existing); err != nil {
		return err
	}
	existing.Labels, existing.Annotations, existing.Data = secret.Labels, secret.Annotations, secret.Data
	return s.Client.Update(ctx, existing)
}

// OwnerReference is the reference to Owner, or nil when there is none or it cannot be
// read: what Compositor keeps in its namespace for as long as it is installed.
func (s *Store) OwnerReference(ctx context.Context) *metav1.OwnerReference {
	if s.Owner == "" {
		return nil
	}
	account := &metav1.PartialObjectMetadata{}
	account.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ServiceAccount"))
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Owner}, account); err != nil {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "ServiceAccount", Name: account.Name, UID: account.UID}
}

// Get returns the archive of digest, verified against it.
func (s *Store) Get(ctx context.Context, digest string) ([]byte, error) {
	secret := &corev1.Secret{}
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: SecretName(digest)}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s", ErrNotStored, digest)
		}
		return nil, fmt.Errorf("reading the chart archive of %s from Secret %s/%s: %w", digest, s.Namespace, SecretName(digest), err)
	}
	data := secret.Data[archiveKey]
	if secret.Annotations[vocab.AnnotationChartDigest] != digest || digestOf(data) != digest {
		return nil, fmt.Errorf("%w: Secret %s/%s holds %s, not %s", ErrStoredMismatch, s.Namespace, secret.Name, digestOf(data), digest)
	}
	return data, nil
}

// Prune deletes the kept archives whose digest inUse does not report.
func (s *Store) Prune(ctx context.Context, inUse func(digest string) bool) error {
	if s.ReadOnly {
		return fmt.Errorf("%w: not pruning", ErrReadOnly)
	}
	// Their metadata only: a definition's every reconciliation prunes, and a thousand
	// archives of up to a MiB each are not read to learn their digests.
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := s.Client.List(ctx, list, client.InNamespace(s.Namespace), client.MatchingLabels{vocab.LabelChartArchive: "true"}); err != nil {
		return fmt.Errorf("listing the chart archives kept in the cluster: %w", err)
	}
	var errs []error
	for i := range list.Items {
		secret := &list.Items[i]
		if inUse(secret.Annotations[vocab.AnnotationChartDigest]) {
			continue
		}
		secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		if err := s.Client.Delete(ctx, secret, client.Preconditions{UID: &secret.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
