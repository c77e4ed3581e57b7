package composition

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	ri "helm.sh/helm/v4/pkg/release"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/compositor-dev/compositor/api/vocab"
)

// A Helm release record is a Secret in the release's namespace, which the tenant who
// owns the composition may write: its manifest says what an upgrade or uninstall
// deletes, its hooks what an uninstall creates, its status and labels what the
// controller skips and who owns the release. Compositor therefore writes its records
// sealed — an HMAC, with a key only Compositor holds, over everything Helm reads from
// the Secret — and acts on no record whose seal does not hold. The record keeps Helm's
// format (type helm.sh/release.v1, base64 of gzipped JSON, Helm's labels), so `helm
// list` and `helm history` still read it; a record written or changed by anyone else
// (`helm upgrade` by hand included) is refused as tampered.

// ReasonReleaseTampered is the condition reason of a composition whose release record
// failed its seal: nothing was installed or deleted.
const ReasonReleaseTampered = "ReleaseTampered"

// releaseSecretType is the Secret type Helm 3 stores releases as.
const releaseSecretType = "helm.sh/release.v1"

// maxReleaseJSON bounds what a release record may inflate to. A record is read only
// once its seal holds, so only Compositor's own records are inflated at all; the bound
// keeps even those from costing unbounded memory.
const maxReleaseJSON = 32 << 20

// sealVersion starts every seal; a new scheme gets a new one.
const sealVersion = "v1"

// ReleaseSeal is the key Compositor seals its release records with.
type ReleaseSeal struct {
	key []byte
}

// minSealKey is the shortest key accepted: 256 bits.
const minSealKey = 32

// NewReleaseSeal returns the seal of key, which must hold at least 32 bytes.
func NewReleaseSeal(key []byte) (*ReleaseSeal, error) {
	if len(key) < minSealKey {
		return nil, fmt.Errorf("the release seal key has %d bytes, fewer than the %d it needs", len(key), minSealKey)
	}
	return &ReleaseSeal{key: bytes.Clone(key)}, nil
}

// NewSealKey returns a new random key for NewReleaseSeal.
func NewSealKey() []byte {
	key := make([]byte, minSealKey)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return key
}

// sum is the seal of a record: everything Helm reads from the Secret (its namespace,
// name, type, labels and data), each field length-prefixed so that no two records
// share an input.
func (s *ReleaseSeal) sum(namespace string, secret *corev1.Secret) string {
	mac := hmac.New(sha256.New, s.key)
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		mac.Write(n[:])
		mac.Write(b)
	}
	field([]byte("compositor.dev/release-seal/" + sealVersion))
	field([]byte(namespace))
	field([]byte(secret.Name))
	field([]byte(secret.Type))
	keys := make([]string, 0, len(secret.Labels))
	for k := range secret.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	field([]byte(strconv.Itoa(len(keys))))
	for _, k := range keys {
		field([]byte(k))
		field([]byte(secret.Labels[k]))
	}
	names := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		names = append(names, k)
	}
	slices.Sort(names)
	field([]byte(strconv.Itoa(len(names))))
	for _, k := range names {
		field([]byte(k))
		field(secret.Data[k])
	}
	return sealVersion + ":" + hex.EncodeToString(mac.Sum(nil))
}

// TamperedError says that a release record is not as Compositor wrote it.
type TamperedError struct {
	Namespace, Secret string
	Reason            string
	// Unsealed: the record has no seal at all, and Owner is the composition UID its
	// label claims ("" for none): a record that claims no composition, or another one,
	// is another's release (a `helm install` by hand), left alone rather than tampered.
	Unsealed bool
	Owner    string
}

func (e *TamperedError) Error() string {
	return fmt.Sprintf("Helm release record %s/%s %s: Compositor acts on no release record it did not write, so nothing was installed or deleted; delete the record, or restore it, to go on",
		e.Namespace, e.Secret, e.Reason)
}

// sealedSecrets is a Helm storage driver over Secrets that writes every record sealed
// and reads only records whose seal holds (see the top of this file).
type sealedSecrets struct {
	secrets   corev1client.SecretInterface
	namespace string
	seal      *ReleaseSeal
}

var _ driver.Driver = (*sealedSecrets)(nil)

func (d *sealedSecrets) Name() string { return driver.SecretsDriverName }

// Get returns the record named key.
func (d *sealedSecrets) Get(key string) (ri.Releaser, error) {
	rel, err := d.get(key)
	if err != nil {
		return nil, err
	}
	return rel, nil
}

func (d *sealedSecrets) get(key string) (*release.Release, error) {
	secret, err := d.secrets.Get(context.Background(), key, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, driver.ErrReleaseNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading Helm release record %s/%s: %w", d.namespace, key, err)
	}
	return d.open(secret)
}

// List returns the records filter keeps; one that fails its seal fails the list.
func (d *sealedSecrets) List(filter func(ri.Releaser) bool) ([]ri.Releaser, error) {
	all, err := d.query(labels.Set{"owner": "helm"})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(r ri.Releaser) bool { return !filter(r) }), nil
}

// Query returns the records whose labels hold labels; one that fails its seal fails
// the query, since Helm decides from the whole history (the last revision, the one
// deployed) and a record left out would change that decision.
func (d *sealedSecrets) Query(set map[string]string) ([]ri.Releaser, error) {
	out, err := d.query(set)
	if err == nil && len(out) == 0 {
		return nil, driver.ErrReleaseNotFound
	}
	return out, err
}

func (d *sealedSecrets) query(set labels.Set) ([]ri.Releaser, error) {
	selector, err := labels.ValidatedSelectorFromSet(set)
	if err != nil {
		return nil, fmt.Errorf("querying Helm release records: %w", err)
	}
	list, err := d.secrets.List(context.Background(), metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, fmt.Errorf("listing Helm release records in %s: %w", d.namespace, err)
	}
	out := make([]ri.Releaser, 0, len(list.Items))
	for i := range list.Items {
		rel, err := d.open(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, rel)
	}
	return out, nil
}

// Create stores a new record; driver.ErrReleaseExists when one has key.
func (d *sealedSecrets) Create(key string, r ri.Releaser) error {
	rel, err := asRelease(r)
	if err != nil {
		return err
	}
	secret, err := d.record(key, rel, "createdAt")
	if err != nil {
		return err
	}
	if _, err := d.secrets.Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return driver.ErrReleaseExists
		}
		return fmt.Errorf("storing Helm release record %s/%s: %w", d.namespace, key, err)
	}
	return nil
}

// Update replaces the record named key.
func (d *sealedSecrets) Update(key string, r ri.Releaser) error {
	rel, err := asRelease(r)
	if err != nil {
		return err
	}
	secret, err := d.record(key, rel, "modifiedAt")
	if err != nil {
		return err
	}
	if _, err := d.secrets.Update(context.Background(), secret, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating Helm release record %s/%s: %w", d.namespace, key, err)
	}
	return nil
}

// Delete removes the record named key, once it is proven Compositor's.
func (d *sealedSecrets) Delete(key string) (ri.Releaser, error) {
	rel, err := d.get(key)
	if err != nil {
		return nil, err
	}
	if err := d.secrets.Delete(context.Background(), key, metav1.DeleteOptions{}); err != nil {
		return nil, fmt.Errorf("deleting Helm release record %s/%s: %w", d.namespace, key, err)
	}
	return rel, nil
}

// record is the sealed Secret holding rel, as Helm's own driver lays it out: the
// release's labels, Helm's (name, owner, status, version) and the time label stamp.
func (d *sealedSecrets) record(key string, rel *release.Release, stamp string) (*corev1.Secret, error) {
	data, err := encodeRelease(rel)
	if err != nil {
		return nil, fmt.Errorf("encoding Helm release %s/%s: %w", d.namespace, rel.Name, err)
	}
	lbs := map[string]string{}
	for k, v := range rel.Labels {
		if !isHelmLabel(k) {
			lbs[k] = v
		}
	}
	lbs[stamp] = strconv.FormatInt(time.Now().Unix(), 10)
	lbs["name"], lbs["owner"] = rel.Name, "helm"
	lbs["status"], lbs["version"] = rel.Info.Status.String(), strconv.Itoa(rel.Version)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: key, Namespace: d.namespace, Labels: lbs},
		Type:       releaseSecretType,
		Data:       map[string][]byte{"release": []byte(data)},
	}
	secret.Annotations = map[string]string{vocab.AnnotationReleaseSeal: d.seal.sum(d.namespace, secret)}
	return secret, nil
}

// open returns the release a record holds once its seal holds; it inflates nothing
// before that, and at most maxReleaseJSON after.
func (d *sealedSecrets) open(secret *corev1.Secret) (*release.Release, error) {
	tampered := func(reason string) error {
		return &TamperedError{Namespace: d.namespace, Secret: secret.Name, Reason: reason}
	}
	got, sealed := secret.Annotations[vocab.AnnotationReleaseSeal]
	if !sealed {
		return nil, &TamperedError{Namespace: d.namespace, Secret: secret.Name, Unsealed: true, Owner: secret.Labels[vocab.LabelCompositionUID],
			Reason: "has no seal (" + vocab.AnnotationReleaseSeal + "): Compositor did not write it"}
	}
	if !hmac.Equal([]byte(got), []byte(d.seal.sum(d.namespace, secret))) {
		return nil, tampered("was changed after Compositor wrote it: its seal does not match its contents")
	}
	rel, err := decodeRelease(secret.Data["release"])
	if err != nil {
		return nil, fmt.Errorf("reading Helm release record %s/%s: %w", d.namespace, secret.Name, err)
	}
	rel.Labels = map[string]string{}
	for k, v := range secret.Labels {
		if !isHelmLabel(k) {
			rel.Labels[k] = v
		}
	}
	return rel, nil
}

// isHelmLabel reports whether Helm's storage sets the label itself.
func isHelmLabel(key string) bool {
	switch key {
	case "name", "owner", "status", "version", "createdAt", "modifiedAt":
		return true
	}
	return false
}

// encodeRelease is Helm's storage encoding: base64 of the gzipped JSON.
func encodeRelease(rel *release.Release) (string, error) {
	raw, err := json.Marshal(rel)
	if err != nil {
		return "", err
	}
	if len(raw) > maxReleaseJSON {
		// Recorded, it could never be read back: the release would be stuck.
		return "", fmt.Errorf("the release is %d bytes as JSON, more than the %d MiB a record may hold: it is not recorded", len(raw), maxReleaseJSON>>20)
	}
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	if _, err := w.Write(raw); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// gzipMagic starts a gzip stream; Helm stored early releases uncompressed.
var gzipMagic = []byte{0x1f, 0x8b, 0x08}

// decodeRelease reads what encodeRelease wrote, inflating at most maxReleaseJSON.
func decodeRelease(data []byte) (*release.Release, error) {
	raw, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		return nil, fmt.Errorf("the record is not base64: %w", err)
	}
	if bytes.HasPrefix(raw, gzipMagic) {
		r, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("the record is not gzip: %w", err)
		}
		inflated, err := io.ReadAll(io.LimitReader(r, maxReleaseJSON+1))
		if err != nil {
			return nil, fmt.Errorf("inflating the record: %w", err)
		}
		if len(inflated) > maxReleaseJSON {
			return nil, fmt.Errorf("the record inflates past %d MiB", maxReleaseJSON>>20)
		}
		raw = inflated
	}
	rel := &release.Release{}
	if err := json.Unmarshal(raw, rel); err != nil {
		return nil, fmt.Errorf("the record is not a Helm release: %w", err)
	}
	return rel, nil
}

// errNoSeal is returned by Helm built without a seal: it acts on no release.
var errNoSeal = errors.New("Helm was built without a release seal, so it acts on no release")

// sealKeyField is the key of the seal Secret's data that holds the key.
const sealKeyField = "key"

// SealKeyFrom reads the seal key from a Secret's data.
func SealKeyFrom(secret *corev1.Secret) ([]byte, error) {
	key := secret.Data[sealKeyField]
	if len(key) == 0 {
		return nil, fmt.Errorf("Secret %s/%s has no %q", secret.Namespace, secret.Name, sealKeyField)
	}
	return key, nil
}

// SealSecret is the Secret that keeps key in namespace under name.
func SealSecret(namespace, name string, key []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{sealKeyField: key},
	}
}
