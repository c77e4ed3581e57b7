// Revisions: each install or upgrade of a composition's release in the local cluster
// leaves a CompositionRevision in the composition's namespace, the spec as written, the
// chart it ran, the values' fingerprint, when and who. `compositor rollback` restores
// one through admission (webhooks/rollback.go). The namespace is the tenant's, so a
// revision is sealed like a release record, with the same key (its definition's,
// sealkeys.go) and another domain: one whose seal does not hold is never restored, and
// is reported.

package composition

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
)

// DefaultRevisionHistoryLimit is how many revisions a composition keeps when its
// definition's spec.upgrade.revisionHistoryLimit is not set.
const DefaultRevisionHistoryLimit = 10

// Events about revisions.
const (
	// EventRevisionRecorded: a CompositionRevision was written.
	EventRevisionRecorded = "RevisionRecorded"
	// EventRevisionNotRecorded: the CompositionRevision of an install could not be
	// written; the install stands.
	EventRevisionNotRecorded = "RevisionNotRecorded"
	// EventRevisionsNotDeleted: a composition went, and some of its
	// CompositionRevisions could not be deleted with it.
	EventRevisionsNotDeleted = "RevisionsNotDeleted"
	// EventRevisionTampered: a CompositionRevision of the composition failed its seal;
	// it is never restored, nor counted among those kept.
	EventRevisionTampered = "RevisionTampered"
)

// revisionSealDomain starts the input of every revision seal, so that no revision
// seal is ever a release record's seal, nor the reverse.
const revisionSealDomain = "compositor.dev/revision-seal/" + sealVersion

// RevisionError says why a CompositionRevision may not be restored onto a composition:
// it is not as Compositor wrote it, or it is another composition's.
type RevisionError struct {
	Namespace, Name string
	Reason          string
	// Tampered: the seal failed (missing, or not matching the contents).
	Tampered bool
}

func (e *RevisionError) Error() string {
	return fmt.Sprintf("CompositionRevision %s/%s %s", e.Namespace, e.Name, e.Reason)
}

// SealRevision sets rev.Seal to the seal of its contents.
func (s *ReleaseSeal) SealRevision(rev *corev1alpha1.CompositionRevision) error {
	sum, err := s.revisionSum(rev)
	if err != nil {
		return err
	}
	rev.Seal = sum
	return nil
}

// VerifyRevision returns nil when rev is as Compositor wrote it and a revision of the
// composition whose UID is uid; else a *RevisionError saying which it is not.
func (s *ReleaseSeal) VerifyRevision(rev *corev1alpha1.CompositionRevision, uid types.UID) error {
	refused := func(tampered bool, reason string) error {
		return &RevisionError{Namespace: rev.Namespace, Name: rev.Name, Reason: reason, Tampered: tampered}
	}
	if rev.Seal == "" {
		return refused(true, "has no seal: Compositor did not write it")
	}
	sum, err := s.revisionSum(rev)
	if err != nil || !hmac.Equal([]byte(rev.Seal), []byte(sum)) {
		return refused(true, "was changed after Compositor wrote it: its seal does not match its contents")
	}
	if rev.Composition.UID != uid {
		return refused(false, fmt.Sprintf("is a revision of %s %s (uid %s), not of this composition (uid %s)",
			rev.Composition.Kind, rev.Composition.Name, rev.Composition.UID, uid))
	}
	return nil
}

// revisionSum is the seal of rev: every field but the seal, its namespace and name,
// each length-prefixed; the spec in canonical JSON, so that the API server's re-encoding
// of the object does not change it.
func (s *ReleaseSeal) revisionSum(rev *corev1alpha1.CompositionRevision) (string, error) {
	spec, err := canonicalJSON(rev.Spec.Raw)
	if err != nil {
		return "", fmt.Errorf("the spec of CompositionRevision %s/%s: %w", rev.Namespace, rev.Name, err)
	}
	mac := hmac.New(sha256.New, s.key)
	field := func(v string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(v)))
		mac.Write(n[:])
		mac.Write([]byte(v))
	}
	for _, v := range []string{
		revisionSealDomain, rev.Namespace, rev.Name,
		rev.Composition.APIVersion, rev.Composition.Kind, rev.Composition.Name, string(rev.Composition.UID),
		strconv.FormatInt(rev.Revision, 10), rev.Release, rev.ServedVersion, rev.ChartVersion, rev.ChartDigest,
		string(spec), rev.Fingerprint, strconv.FormatInt(rev.Time.Unix(), 10), rev.Author,
	} {
		field(v)
	}
	return sealVersion + ":" + hex.EncodeToString(mac.Sum(nil)), nil
}

// canonicalJSON is raw, a JSON object, with its keys sorted and no spaces; numbers
// keep their text. Absent is the empty object.
func canonicalJSON(raw []byte) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not a JSON object: data after it")
	}
	if v == nil {
		v = map[string]any{}
	}
	return json.Marshal(v)
}

// RevisionName is the name of revision n of the composition of kind named name: kind
// and name, so that two kinds' compositions of one name do not meet, and the number.
// A name too long for that gives the composition's UID in its place.
func RevisionName(kind, name string, uid types.UID, n int64) string {
	full := fmt.Sprintf("%s.%s.%d", strings.ToLower(kind), name, n)
	if len(validation.IsDNS1123Subdomain(full)) == 0 {
		return full
	}
	return fmt.Sprintf("%s.%s.%d", strings.ToLower(kind), uid, n)
}

// RevisionLabels select the revisions of obj: its UID, and its name and kind for
// people (the name made a valid label value).
func RevisionLabels(obj client.Object, kind string) map[string]string {
	return map[string]string{
		vocab.LabelCompositionUID:  string(obj.GetUID()),
		vocab.LabelCompositionName: rbac.LabelValue(obj.GetName()),
		vocab.LabelCompositionKind: kind,
		vocab.LabelManagedBy:       vocab.ManagedBy,
	}
}

// revisionHistoryLimit is how many revisions the compositions of def keep.
func revisionHistoryLimit(def *corev1alpha1.CompositionDefinition) int {
	if def != nil && def.Spec.Upgrade != nil && def.Spec.Upgrade.RevisionHistoryLimit != nil && *def.Spec.Upgrade.RevisionHistoryLimit > 0 {
		return int(*def.Spec.Upgrade.RevisionHistoryLimit)
	}
	return DefaultRevisionHistoryLimit
}

// newRevision is the sealed revision n of obj, installed from w by the controller of
// version at now.
func (r *Reconciler) newRevision(seal *ReleaseSeal, obj *unstructured.Unstructured, w work, n int64, now time.Time) (*corev1alpha1.CompositionRevision, error) {
	raw, err := json.Marshal(w.values)
	if err != nil {
		return nil, fmt.Errorf("encoding the spec: %w", err)
	}
	rev := &corev1alpha1.CompositionRevision{
		TypeMeta: metav1.TypeMeta{APIVersion: corev1alpha1.GroupVersion.String(), Kind: "CompositionRevision"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      RevisionName(r.GVK.Kind, obj.GetName(), obj.GetUID(), n),
			Namespace: obj.GetNamespace(),
			Labels:    RevisionLabels(obj, r.GVK.Kind),
			// Deleted with the composition, where a garbage collector runs.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: r.GVK.GroupVersion().String(), Kind: r.GVK.Kind, Name: obj.GetName(), UID: obj.GetUID()}},
		},
		Composition: corev1alpha1.CompositionReference{
			APIVersion: r.GVK.GroupVersion().String(), Kind: r.GVK.Kind, Name: obj.GetName(), UID: obj.GetUID(),
		},
		Revision:      n,
		Release:       w.release,
		ServedVersion: r.GVK.Version,
		ChartVersion:  w.chart.Metadata.Version,
		ChartDigest:   w.digest,
		Spec:          apiextensionsv1.JSON{Raw: raw},
		Fingerprint:   w.fingerprint,
		Time:          metav1.NewTime(now.UTC().Truncate(time.Second)),
		Author:        obj.GetAnnotations()[vocab.AnnotationSpecAuthor],
	}
	if err := seal.SealRevision(rev); err != nil {
		return nil, err
	}
	return rev, nil
}

// recordRevision writes the CompositionRevision of release revision n, which the
// controller just installed from w, and deletes the oldest of obj's revisions beyond
// the definition's limit. An object of the revision's name that is not this record (a
// tenant's, or one a deleted composition of the same name left) is replaced. Revisions
// whose seal fails are reported, never counted nor deleted.
func (r *Reconciler) recordRevision(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, w work, n int) error {
	seal := sealFrom(ctx)
	if seal == nil && r.Helm != nil {
		seal = r.Helm.seal
	}
	if seal == nil || r.Live == nil {
		return nil
	}
	rev, err := r.newRevision(seal, obj, w, int64(n), time.Now())
	if err != nil {
		return err
	}
	existing := &corev1alpha1.CompositionRevision{}
	switch err := r.Live.Get(ctx, client.ObjectKeyFromObject(rev), existing); {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, rev); err != nil {
			return fmt.Errorf("creating CompositionRevision %s/%s: %w", rev.Namespace, rev.Name, err)
		}
	case err != nil:
		return fmt.Errorf("reading CompositionRevision %s/%s: %w", rev.Namespace, rev.Name, err)
	case seal.VerifyRevision(existing, obj.GetUID()) == nil && existing.Fingerprint == rev.Fingerprint && existing.Revision == rev.Revision:
		// Recorded already (a reconcile whose status write failed).
	default:
		rev.ResourceVersion = existing.ResourceVersion
		if err := r.Client.Update(ctx, rev); err != nil {
			return fmt.Errorf("replacing CompositionRevision %s/%s: %w", rev.Namespace, rev.Name, err)
		}
	}
	r.eventf(obj, nil, corev1.EventTypeNormal, EventRevisionRecorded, "Install", "revision %d: chart %s, recorded as CompositionRevision %s", n, rev.ChartVersion, rev.Name)
	return r.pruneRevisions(ctx, seal, obj, revisionHistoryLimit(def))
}

// pruneRevisions deletes obj's oldest sealed revisions beyond keep.
func (r *Reconciler) pruneRevisions(ctx context.Context, seal *ReleaseSeal, obj *unstructured.Unstructured, keep int) error {
	list := &corev1alpha1.CompositionRevisionList{}
	if err := r.Live.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingLabels{vocab.LabelCompositionUID: string(obj.GetUID())}); err != nil {
		return fmt.Errorf("listing the CompositionRevisions of %s: %w", obj.GetName(), err)
	}
	sealed, tampered := SortRevisions(seal, list.Items, obj.GetUID())
	for _, bad := range tampered {
		r.eventf(obj, nil, corev1.EventTypeWarning, EventRevisionTampered, "Install", "%s: it is never restored; delete it", bad.Error())
	}
	for _, old := range Prunable(sealed, keep) {
		if err := r.Client.Delete(ctx, old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting CompositionRevision %s/%s: %w", old.Namespace, old.Name, err)
		}
	}
	return nil
}

// deleteRevisions deletes every revision of obj, sealed or not, as obj goes: their
// owner reference names the served version they were written through, which the
// garbage collector cannot follow once the CRD no longer serves it.
func (r *Reconciler) deleteRevisions(ctx context.Context, obj *unstructured.Unstructured) error {
	list := &corev1alpha1.CompositionRevisionList{}
	if err := r.Live.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingLabels{vocab.LabelCompositionUID: string(obj.GetUID())}); err != nil {
		return fmt.Errorf("listing the CompositionRevisions of %s: %w", obj.GetName(), err)
	}
	for i := range list.Items {
		rev := &list.Items[i]
		if err := r.Client.Delete(ctx, rev, client.Preconditions{UID: &rev.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting CompositionRevision %s/%s: %w", rev.Namespace, rev.Name, err)
		}
	}
	return nil
}

// RevisionVerifier proves CompositionRevisions; *ReleaseSeal is one.
type RevisionVerifier interface {
	VerifyRevision(rev *corev1alpha1.CompositionRevision, uid types.UID) error
}

// SortRevisions splits revs into those of the composition uid whose seal holds, newest
// (highest revision) first, and the errors of the others that claim uid (seal failed,
// or a record of another composition under uid's label).
func SortRevisions(seal RevisionVerifier, revs []corev1alpha1.CompositionRevision, uid types.UID) (sealed []*corev1alpha1.CompositionRevision, refused []error) {
	for i := range revs {
		if err := seal.VerifyRevision(&revs[i], uid); err != nil {
			refused = append(refused, err)
			continue
		}
		sealed = append(sealed, &revs[i])
	}
	slices.SortFunc(sealed, func(a, b *corev1alpha1.CompositionRevision) int {
		if a.Revision != b.Revision {
			return int(b.Revision - a.Revision)
		}
		return b.Time.Compare(a.Time.Time)
	})
	return sealed, refused
}

// Prunable are the revisions of sorted (newest first, SortRevisions) beyond the keep
// newest.
func Prunable(sorted []*corev1alpha1.CompositionRevision, keep int) []*corev1alpha1.CompositionRevision {
	if keep < 1 {
		keep = 1
	}
	if len(sorted) <= keep {
		return nil
	}
	return sorted[keep:]
}

// recordedRevision is the release revision whose CompositionRevision the composition's
// status says was written (status.revision); 0 for none. It only spares a read of the
// API server: a wrong value makes the controller write the record again.
func recordedRevision(obj *unstructured.Unstructured) int64 {
	n, _, _ := unstructured.NestedInt64(obj.Object, "status", "revision")
	return n
}
