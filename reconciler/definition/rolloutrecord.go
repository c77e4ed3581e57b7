// Where a rollout keeps which compositions it moves, and who may read it.
//
// A definition in a team's namespace may serve compositions of many namespaces, and
// that team's tenants read the definition, its status and its events. The rollout's
// own state names compositions of every namespace: those still to move, those moved,
// failed and stayed, with the reasons (a failure quotes the release's error, a refusal
// the schema's or a policy's words). So it is kept as the plan is (plankeeper.go):
//
//   - whole, in the ConfigMap compositor-rollout.<definition's UID> of Compositor's
//     namespace, which only the platform reads: the record. Compositor reads the
//     rollout back from it alone, live, at every step;
//   - in the definition's status (status.rollout), counts over every namespace and
//     only the entries of the definition's own namespace; its events and messages
//     name only those, and count the others.
//
// The record is Compositor's, in a namespace no tenant writes; one that is not
// labelled as this definition's, or records another rollout, is never taken.

package definition

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

const (
	// rolloutRecordPrefix names the rollout records in Compositor's namespace.
	rolloutRecordPrefix = "compositor-rollout."
	// RolloutRecordKey is the gzipped JSON RolloutRecord in a record's BinaryData.
	RolloutRecordKey = "rollout.json.gz"
	// maxRecordBytes bounds the record a ConfigMap may inflate to.
	maxRecordBytes = 16 << 20
	// EventRolloutRecordLost: the record a rollout's status names is gone.
	EventRolloutRecordLost = "RolloutRecordLost"
)

// RolloutRecordName is the ConfigMap, in Compositor's namespace, that keeps the rollout
// of the definition of that UID (RolloutRecord, gzipped JSON under RolloutRecordKey).
func RolloutRecordName(uid types.UID) string { return rolloutRecordPrefix + string(uid) }

// RolloutRecord is a rollout's every composition, of every namespace: what
// status.rollout lists for the definition's namespace only.
type RolloutRecord struct {
	// Definition is the definition's "namespace/name".
	Definition string `json:"definition"`
	// The move it records: the rollout's versions, the digest moved to and the hash of
	// the plan it follows.
	From        string `json:"from"`
	To          string `json:"to"`
	FromVersion string `json:"fromVersion"`
	ToVersion   string `json:"toVersion"`
	ToDigest    string `json:"toDigest"`
	Plan        string `json:"plan"`
	// Pending are "namespace/name" of the compositions still to move, in their order.
	Pending []string `json:"pending,omitempty"`
	// Moved are the compositions the rollout moved.
	Moved []corev1alpha1.MovedComposition `json:"moved,omitempty"`
	// Failed are "namespace/name: why" of moved compositions that failed.
	Failed []string `json:"failed,omitempty"`
	// Stayed are "namespace/name: why" of compositions that stay on the old version.
	Stayed []string `json:"stayed,omitempty"`
	// NotMovedBack are "namespace/name: why" of moved compositions a rollback could not
	// move back (admission refused it).
	NotMovedBack []string `json:"notMovedBack,omitempty"`

	cm *corev1.ConfigMap // as read or last written; nil: none yet
}

// Follows tells whether rec records ro: the same move and plan.
func (rec *RolloutRecord) Follows(ro *corev1alpha1.Rollout) bool {
	return ro != nil && rec.FromVersion == ro.FromVersion && rec.ToVersion == ro.ToVersion &&
		rec.ToDigest == ro.ToDigest && rec.Plan == ro.Plan.Hash
}

// recordFor is an empty record of def's rollout.
func recordFor(def *corev1alpha1.CompositionDefinition) *RolloutRecord {
	ro := def.Status.Rollout
	return &RolloutRecord{Definition: def.Namespace + "/" + def.Name, From: ro.From, To: ro.To,
		FromVersion: ro.FromVersion, ToVersion: ro.ToVersion, ToDigest: ro.ToDigest, Plan: ro.Plan.Hash}
}

// hasLists tells whether ro lists compositions.
func hasLists(ro *corev1alpha1.Rollout) bool {
	return len(ro.Pending)+len(ro.Moved)+len(ro.Failed)+len(ro.Stayed) > 0
}

// recordKey is where def's rollout record is kept; an empty Namespace when Compositor
// has none.
func (r *Reconciler) recordKey(def *corev1alpha1.CompositionDefinition) client.ObjectKey {
	return client.ObjectKey{Namespace: r.compositorNamespace(), Name: RolloutRecordName(def.UID)}
}

// errNoRecordNamespace: without a namespace of its own, Compositor keeps no record, and
// no rollout moves.
var errNoRecordNamespace = errors.New("no namespace of Compositor's to keep the rollout's record in")

// readRecord reads def's rollout record, live; nil when there is none.
func (r *Reconciler) readRecord(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*RolloutRecord, error) {
	key := r.recordKey(def)
	if key.Namespace == "" {
		return nil, errNoRecordNamespace
	}
	cm := &corev1.ConfigMap{}
	if err := r.Live.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the rollout's record %s: %w", key, err)
	}
	if !ownedPlan(cm, def, false) {
		return nil, fmt.Errorf("ConfigMap %s exists and is not Compositor's rollout record of %s/%s: it is left alone", key, def.Namespace, def.Name)
	}
	rec, err := DecodeRolloutRecord(cm)
	if err != nil {
		// Written again from what the rollout knows.
		ctrl.LoggerFrom(ctx).Error(err, "Ignoring the rollout's record", "configmap", key)
		rec = &RolloutRecord{}
	}
	rec.cm = cm
	return rec, nil
}

// newRecord is the record of def's rollout as it starts, to be written over any record
// of an earlier rollout of def.
func (r *Reconciler) newRecord(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*RolloutRecord, error) {
	earlier, err := r.readRecord(ctx, def)
	if err != nil {
		return nil, err
	}
	rec := recordFor(def)
	if earlier != nil {
		rec.cm = earlier.cm
	}
	return rec, nil
}

// loadRollout is the record of def's rollout, past its plan: read from Compositor's
// namespace, never from the status. A status an earlier Compositor wrote, which names no
// record and lists every namespace's compositions (only Compositor writes the status),
// becomes the record, and is narrowed when the record is written. Nil, with a message,
// when the record the status names is gone or records another rollout: then nothing
// moves, since what moved is not known.
func (r *Reconciler) loadRollout(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*RolloutRecord, error) {
	ro := def.Status.Rollout
	if !active(ro) && (ro.Record != "" || !hasLists(ro)) {
		return nil, nil // nothing more to do: the status stays as it was written
	}
	rec, err := r.readRecord(ctx, def)
	if err != nil {
		return nil, err
	}
	switch {
	case rec != nil && rec.Follows(ro):
		return rec, nil
	case ro.Record == "":
		legacy := recordFor(def).fromStatus(ro)
		if rec != nil {
			legacy.cm = rec.cm
		}
		return legacy, nil
	}
	message := fmt.Sprintf("the rollout's record, ConfigMap %s, is gone or records another rollout: what moved is not known, so nothing more moves; change the chart version to start another rollout", ro.Record)
	if ro.Message != message {
		r.event(def, corev1.EventTypeWarning, EventRolloutRecordLost, message)
	}
	ro.Message = message
	return nil, nil
}

// narrowLegacyRollout keeps, as the record, the lists a status an earlier Compositor
// wrote names for a rollout of another move than the one served now, and narrows them.
func (r *Reconciler) narrowLegacyRollout(ctx context.Context, def *corev1alpha1.CompositionDefinition) error {
	rec, err := r.newRecord(ctx, def)
	if err != nil {
		return err
	}
	return r.commitRollout(ctx, def, rec.fromStatus(def.Status.Rollout))
}

// saveRecord writes rec to Compositor's namespace when it changed, and names it in def's
// status.
func (r *Reconciler) saveRecord(ctx context.Context, def *corev1alpha1.CompositionDefinition, rec *RolloutRecord) error {
	key := r.recordKey(def)
	if key.Namespace == "" {
		return errNoRecordNamespace
	}
	gz, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	if rec.cm == nil || !bytes.Equal(rec.cm.BinaryData[RolloutRecordKey], gz) {
		var cm *corev1.ConfigMap
		if rec.cm == nil {
			cm = newPlanConfigMap(key, def)
		} else {
			cm = rec.cm.DeepCopy()
		}
		cm.Data = nil
		cm.BinaryData = map[string][]byte{RolloutRecordKey: gz}
		if cm.ResourceVersion == "" {
			err = r.Client.Create(ctx, cm)
		} else {
			err = r.Client.Update(ctx, cm) // on the version read: two writers do not both win
		}
		if err != nil {
			return fmt.Errorf("writing the rollout's record %s: %w", key, err)
		}
		rec.cm = cm
	}
	def.Status.Rollout.Record = key.String()
	return nil
}

// commitRollout writes rec, then publishes it in def's status: counts, and the entries
// of def's namespace.
func (r *Reconciler) commitRollout(ctx context.Context, def *corev1alpha1.CompositionDefinition, rec *RolloutRecord) error {
	err := r.saveRecord(ctx, def, rec)
	publishRollout(def.Status.Rollout, rec, def.Namespace)
	return err
}

// publishRollout sets ro's lists to rec's entries of namespace, and its counts to rec's.
func publishRollout(ro *corev1alpha1.Rollout, rec *RolloutRecord, namespace string) {
	ro.Pending, ro.PendingCount = ofNamespace(rec.Pending, namespace), int32(len(rec.Pending))
	ro.Failed, ro.FailedCount = ofNamespace(rec.Failed, namespace), int32(len(rec.Failed))
	ro.Stayed, ro.StayedCount = ofNamespace(rec.Stayed, namespace), int32(len(rec.Stayed))
	ro.Moved, ro.MovedCount = nil, int32(len(rec.Moved))
	for _, m := range rec.Moved {
		if inNamespace(m.Name, namespace) {
			ro.Moved = append(ro.Moved, m)
		}
	}
}

// inNamespace tells whether entry, "namespace/name" and perhaps ": why", is of namespace.
func inNamespace(entry, namespace string) bool {
	ns, _, _ := strings.Cut(entry, "/")
	return ns == namespace
}

// ofNamespace are the entries of namespace; nil when none is.
func ofNamespace(entries []string, namespace string) []string {
	var out []string
	for _, e := range entries {
		if inNamespace(e, namespace) {
			out = append(out, e)
		}
	}
	return out
}

// told is what namespace's tenants may read of entries: its own, and how many others
// there are, joined with sep ("team-a/web, 2 compositions of other namespaces").
func told(entries []string, namespace, sep string) string {
	own := ofNamespace(entries, namespace)
	switch others := len(entries) - len(own); others {
	case 0:
	case 1:
		own = append(own, "1 composition of another namespace")
	default:
		own = append(own, fmt.Sprintf("%d compositions of other namespaces", others))
	}
	return strings.Join(own, sep)
}

// forgetRollout deletes def's rollout record: def, in another namespace, cannot own it.
func (r *Reconciler) forgetRollout(ctx context.Context, def *corev1alpha1.CompositionDefinition) error {
	if r.compositorNamespace() == "" {
		return nil
	}
	rec, err := r.readRecord(ctx, def)
	if err != nil || rec == nil {
		return client.IgnoreNotFound(err)
	}
	if err := r.Client.Delete(ctx, rec.cm, client.Preconditions{UID: &rec.cm.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the rollout's record %s: %w", r.recordKey(def), err)
	}
	return nil
}

func encodeRecord(rec *RolloutRecord) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(rec); err != nil {
		return nil, fmt.Errorf("encoding the rollout's record: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("encoding the rollout's record: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeRolloutRecord decodes the rollout record a ConfigMap keeps.
func DecodeRolloutRecord(cm *corev1.ConfigMap) (*RolloutRecord, error) {
	key := client.ObjectKeyFromObject(cm)
	zr, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[RolloutRecordKey]))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %s is not a gzipped rollout record: %w", key, RolloutRecordKey, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxRecordBytes+1))
	if err != nil || len(raw) > maxRecordBytes {
		return nil, fmt.Errorf("ConfigMap %s: %s is not a gzipped rollout record of at most %d bytes (%v)", key, RolloutRecordKey, maxRecordBytes, err)
	}
	rec := &RolloutRecord{}
	if err := json.Unmarshal(raw, rec); err != nil {
		return nil, fmt.Errorf("ConfigMap %s: decoding the rollout's record: %w", key, err)
	}
	return rec, nil
}

// fromStatus fills rec with the lists of ro, a status an earlier Compositor wrote, which
// listed every namespace's compositions.
func (rec *RolloutRecord) fromStatus(ro *corev1alpha1.Rollout) *RolloutRecord {
	rec.Pending, rec.Moved, rec.Failed, rec.Stayed = slices.Clone(ro.Pending), slices.Clone(ro.Moved), slices.Clone(ro.Failed), slices.Clone(ro.Stayed)
	return rec
}
