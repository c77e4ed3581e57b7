package chartstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api/vocab"
)

// ImportedScheme is the URL scheme of a chart imported into the cluster with
// `compositor import`: spec.chart.url imported://NAME with spec.chart.version names
// it, and no chart source is reached.
const ImportedScheme = "imported"

// SecretTypeImportedChart is the type of the Secrets that hold imported charts.
const SecretTypeImportedChart = corev1.SecretType("compositor.dev/imported-chart")

// Keys of an imported chart's Secret: the archive and the signature it came with.
const (
	importedArchiveKey    = "chart.tgz"
	importedProvenanceKey = "chart.tgz.prov"
	importedBundleKey     = "chart.sigstore.json"
)

var (
	// ErrNotImported means no chart of that name and version was imported.
	ErrNotImported = errors.New("no chart of that name and version was imported")
	// ErrImportedElsewhere means a chart of that name and version was imported with
	// other content; it is replaced only when asked.
	ErrImportedElsewhere = errors.New("a chart of that name and version was imported with other content")
)

// Imported is a chart imported into the cluster, with the signature it came with.
type Imported struct {
	Name, Version string
	// Digest is "sha256:<hex>" of Archive.
	Digest  string
	Archive []byte
	// Provenance is its Helm provenance file, Bundle its Sigstore bundle; either may
	// be empty.
	Provenance []byte
	Bundle     []byte
}

// ImportedSecretName is the name of the Secret holding the imported chart of name
// and version: a hash, since chart names and versions (1.0.0+build) are not all valid
// object names.
func ImportedSecretName(name, version string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + version))
	return "compositor-imported-" + hex.EncodeToString(sum[:10])
}

// ParseImportedURL returns the chart name of an imported://NAME URL; ok is false for
// any other URL.
func ParseImportedURL(raw string) (name string, ok bool, err error) {
	scheme, rest, found := strings.Cut(raw, "://")
	if !found || !strings.EqualFold(scheme, ImportedScheme) {
		return "", false, nil
	}
	u, perr := url.Parse(raw)
	if perr != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Port() != "" {
		return "", true, fmt.Errorf("spec.chart.url %q: an imported chart is named imported://NAME, with the chart's name alone (got %q)", raw, rest)
	}
	return u.Hostname(), true, nil
}

// Import keeps im in the cluster under its name and version. The same archive imported
// again keeps the signatures it came with before (a .prov, then a bundle), the new one
// replacing only its own kind. A chart of the same name and version imported with other
// content is replaced, signatures and all, only when replace is true: definitions that
// recorded its digest refuse the new content anyway (ChartChanged).
func (s *Store) Import(ctx context.Context, im Imported, replace bool) error {
	if s.ReadOnly {
		return fmt.Errorf("%w: not importing %s %s", ErrReadOnly, im.Name, im.Version)
	}
	if digestOf(im.Archive) != im.Digest {
		return fmt.Errorf("%w: the archive given is %s, not %s", ErrStoredMismatch, digestOf(im.Archive), im.Digest)
	}
	data := map[string][]byte{importedArchiveKey: im.Archive}
	if len(im.Provenance) > 0 {
		data[importedProvenanceKey] = im.Provenance
	}
	if len(im.Bundle) > 0 {
		data[importedBundleKey] = im.Bundle
	}
	size := 0
	for _, v := range data {
		size += len(v)
	}
	if size > MaxStoredArchiveBytes {
		return fmt.Errorf("%w: the archive and its signature are %d bytes, the most is %d", ErrTooLargeToStore, size, MaxStoredArchiveBytes)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.Namespace,
			Name:      ImportedSecretName(im.Name, im.Version),
			Labels:    map[string]string{vocab.LabelImportedChart: "true", vocab.LabelManagedBy: "compositor"},
			Annotations: map[string]string{
				vocab.AnnotationChartDigest:  im.Digest,
				vocab.AnnotationChartName:    im.Name,
				vocab.AnnotationChartVersion: im.Version,
			},
		},
		Type: SecretTypeImportedChart,
		Data: data,
	}
	err := s.Client.Create(ctx, secret)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	existing := &corev1.Secret{}
	if err := s.Client.Get(ctx, client.ObjectKeyFromObject(secret), existing); err != nil {
		return err
	}
	was := existing.Annotations[vocab.AnnotationChartDigest]
	if was != im.Digest && !replace {
		return fmt.Errorf("%w: %s %s is %s in Secret %s/%s, this archive is %s; import it with --replace to replace it",
			ErrImportedElsewhere, im.Name, im.Version, was, s.Namespace, secret.Name, im.Digest)
	}
	if was == im.Digest && digestOf(existing.Data[importedArchiveKey]) == im.Digest {
		// The same archive again, perhaps with its other signature: both are kept, so
		// that definitions checking either go on finding theirs.
		for _, k := range []string{importedProvenanceKey, importedBundleKey} {
			if _, given := data[k]; !given && len(existing.Data[k]) > 0 {
				data[k] = existing.Data[k]
			}
		}
		size = 0
		for _, v := range data {
			size += len(v)
		}
		if size > MaxStoredArchiveBytes {
			return fmt.Errorf("%w: the archive and its signatures are %d bytes, the most is %d", ErrTooLargeToStore, size, MaxStoredArchiveBytes)
		}
	}
	existing.Labels, existing.Annotations, existing.Data = secret.Labels, secret.Annotations, data
	return s.Client.Update(ctx, existing)
}

// Imported reads the imported chart of name and version. What it returns is checked:
// the Secret names that chart and the archive's digest is the one recorded.
func (s *Store) Imported(ctx context.Context, name, version string) (*Imported, error) {
	key := client.ObjectKey{Namespace: s.Namespace, Name: ImportedSecretName(name, version)}
	secret := &corev1.Secret{}
	if err := s.Client.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s %s (import it with: compositor import CHART.tgz -n %s)", ErrNotImported, name, version, s.Namespace)
		}
		return nil, fmt.Errorf("reading the imported chart %s %s from Secret %s: %w", name, version, key, err)
	}
	a := secret.Annotations
	if secret.Type != SecretTypeImportedChart || a[vocab.AnnotationChartName] != name || a[vocab.AnnotationChartVersion] != version {
		return nil, fmt.Errorf("%w: Secret %s is not the imported chart %s %s", ErrStoredMismatch, key, name, version)
	}
	im := &Imported{
		Name: name, Version: version, Digest: a[vocab.AnnotationChartDigest],
		Archive: secret.Data[importedArchiveKey], Provenance: secret.Data[importedProvenanceKey], Bundle: secret.Data[importedBundleKey],
	}
	if digestOf(im.Archive) != im.Digest {
		return nil, fmt.Errorf("%w: Secret %s holds %s, recorded as %s", ErrStoredMismatch, key, digestOf(im.Archive), im.Digest)
	}
	return im, nil
}
