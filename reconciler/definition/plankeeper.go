// Where a rollout's plan is kept, and who may read it.
//
// The whole plan names every composition it moves, in every namespace the definition
// serves: their names, releases, the objects each gains and loses (whose names often
// carry values) and a keyed digest of each one's values. It is kept in Compositor's
// own namespace, which only the platform reads. The definition's namespace, whose
// tenants read its ConfigMaps, gets a view (plan.Plan.View): the whole plan's counts,
// hash and RBAC change, and only the compositions of that namespace.
//
// Two ConfigMaps per plan, whatever the number of namespaces: a view in each
// composition namespace would be a write in hundreds of namespaces every time the plan
// changes (it is computed again at each reconciliation while it waits for approval,
// and any composition's change changes it), and left behind in namespaces Compositor
// otherwise does not write. A tenant of another namespace sees its own compositions,
// and asks the platform for the plan.

package definition

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/plan"
)

const (
	// planDigestPurpose labels the key the plan's digests are keyed with, derived from
	// the master key so that no other use of it shares the key.
	planDigestPurpose = "compositor.dev/plan-digest/v1"
	// wholePlanPrefix names the whole plans in Compositor's namespace; the dot keeps
	// them apart from the views (planConfigMapPrefix and a definition's name).
	wholePlanPrefix = "compositor-plan."
	// planScopeKey, in a view's data, is the namespace it shows; a plan ConfigMap of
	// a definition's namespace without it holds a whole plan, as Compositor kept it
	// before views.
	planScopeKey = "scope"
	// planHashKey is the hash of the (whole) plan, in the data of both.
	planHashKey = "hash"
	// maxKeptPlanBytes bounds the plan a kept ConfigMap may inflate to.
	maxKeptPlanBytes = 64 << 20
)

// WholePlanConfigMapName is the ConfigMap, in Compositor's namespace, that keeps the
// whole plan of the definition of that UID, as gzipped JSON under PlanConfigMapKey. A
// UID, as the name of a definition in any namespace would not fit.
func WholePlanConfigMapName(uid types.UID) string { return wholePlanPrefix + string(uid) }

// PlanDigestKey derives, from Compositor's master key (the release seal key), the key
// of the plans' per-composition digests.
func PlanDigestKey(master []byte) ([]byte, error) {
	if len(master) == 0 {
		return nil, errors.New("no master key to derive the plan's digest key from")
	}
	return hkdf.Key(sha256.New, master, nil, planDigestPurpose, sha256.Size)
}

// PlanKeeper keeps rollouts' plans for compositor plan DEFINITION (see the top of
// this file). It is for people to read: nothing of Compositor reads a plan back but to
// narrow what an earlier Compositor kept.
type PlanKeeper struct {
	// Client writes; Live reads, not through the cache, which would watch every
	// ConfigMap.
	Client client.Client
	Live   client.Reader
	// Namespace is Compositor's, where whole plans are kept; empty keeps none.
	Namespace string
}

// Keep writes the whole plan p of def, without values, to Compositor's namespace,
// then its view to def's namespace, and returns the view's digest: the caller records
// it in def's status.rollout.plan.viewDigest, which only Compositor writes, since the
// view is where def's namespace's tenants may write. A ConfigMap of either name that
// is not Compositor's plan of def is left alone, and reported.
//
// Without a Namespace the whole plan is not kept, and that is reported; the view is
// written all the same, so that no whole plan stays in def's namespace.
func (k *PlanKeeper) Keep(ctx context.Context, def *corev1alpha1.CompositionDefinition, p *plan.Plan) (string, error) {
	var wholeErr error
	if k.Namespace == "" {
		wholeErr = errors.New("no namespace of Compositor's to keep the whole plan in")
	} else {
		// The whole plan first: where there is a view, the whole plan is there too.
		if err := k.write(ctx, def, k.wholeKey(def), wholeOf(p), false); err != nil {
			return "", err
		}
	}
	digest, err := k.keepView(ctx, def, p)
	return digest, errors.Join(wholeErr, err)
}

// keepView writes the view of p for def's namespace, and returns its digest.
func (k *PlanKeeper) keepView(ctx context.Context, def *corev1alpha1.CompositionDefinition, p *plan.Plan) (string, error) {
	view, err := p.View(def.Namespace)
	if err != nil {
		return "", err
	}
	if err := k.write(ctx, def, client.ObjectKey{Namespace: def.Namespace, Name: PlanConfigMapName(def.Name)}, view, true); err != nil {
		return "", err
	}
	return view.Scope.Digest, nil
}

func (k *PlanKeeper) wholeKey(def *corev1alpha1.CompositionDefinition) client.ObjectKey {
	return client.ObjectKey{Namespace: k.Namespace, Name: WholePlanConfigMapName(def.UID)}
}

// wholeOf is p as the whole plan is kept: without values or scope.
func wholeOf(p *plan.Plan) *plan.Plan {
	whole := p.Redacted()
	whole.Scope = nil
	return whole
}

// Narrow makes the plan ConfigMap of def's namespace the view of the plan def's status
// names, and returns the view's digest for status.rollout.plan.viewDigest; it is for a
// rollout past its plan, which is not computed again.
//
// An earlier Compositor kept the whole plan there, where def's namespace's tenants
// may write, and so may have made one up (labels, owner and hash are theirs to set):
// such a plan is taken only when it hashes to status.rollout.plan.hash, which only
// Compositor writes, and is then moved to Compositor's namespace unless a whole plan
// is there already, which is never replaced by one read from def's namespace. The
// view is made from the whole plan of Compositor's namespace when it is the one the
// status names, else from that taken plan, else from the status's counts alone.
//
// Nothing is done when the ConfigMap is absent or not Compositor's, or is a view
// whose digest the status records already.
func (k *PlanKeeper) Narrow(ctx context.Context, def *corev1alpha1.CompositionDefinition) (string, error) {
	ro := def.Status.Rollout
	if ro == nil || ro.Plan.Hash == "" {
		return "", nil
	}
	recorded := ro.Plan.ViewDigest
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: def.Namespace, Name: PlanConfigMapName(def.Name)}
	if err := k.Live.Get(ctx, key, cm); err != nil {
		return recorded, client.IgnoreNotFound(err)
	}
	_, isView := cm.Data[planScopeKey]
	if !ownedPlan(cm, def, true) || (isView && recorded != "") {
		return recorded, nil
	}
	log := ctrl.LoggerFrom(ctx)
	var legacy *plan.Plan
	if !isView {
		p, err := DecodeKeptPlan(cm)
		if err == nil && p.Scope != nil {
			err = errors.New("it names a scope")
		}
		if err == nil {
			err = p.Verify(ro.Plan.Hash, "")
		}
		if err != nil {
			log.Info("Ignoring the plan kept in the definition's namespace: it is not the one the status names", "configmap", key, "error", err)
		} else {
			legacy = p
		}
	}
	whole, wholeExists, err := k.recordedWhole(ctx, def)
	if err != nil {
		return recorded, err
	}
	if legacy != nil && !wholeExists && k.Namespace != "" {
		if err := k.create(ctx, def, k.wholeKey(def), wholeOf(legacy)); err != nil {
			return recorded, err
		}
	}
	p := cmp.Or(whole, legacy, countsOnly(def))
	return k.keepView(ctx, def, p)
}

// recordedWhole is def's whole plan of Compositor's namespace when it is the one def's
// status names, and whether a ConfigMap of its name is there at all.
func (k *PlanKeeper) recordedWhole(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*plan.Plan, bool, error) {
	if k.Namespace == "" {
		return nil, false, nil
	}
	cm := &corev1.ConfigMap{}
	if err := k.Live.Get(ctx, k.wholeKey(def), cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("reading the whole plan %s: %w", k.wholeKey(def), err)
	}
	if !ownedPlan(cm, def, false) {
		return nil, true, nil
	}
	p, err := DecodeKeptPlan(cm)
	if err == nil && p.Scope == nil && p.Verify(def.Status.Rollout.Plan.Hash, "") == nil {
		return p, true, nil
	}
	return nil, true, nil
}

// countsOnly is a plan of the counts def's status has, which lists no composition.
func countsOnly(def *corev1alpha1.CompositionDefinition) *plan.Plan {
	ro := def.Status.Rollout
	s := ro.Plan
	return &plan.Plan{
		Kind: def.Status.Kind, From: ro.From, To: ro.To, FromVersion: ro.FromVersion, ToVersion: ro.ToVersion,
		RBAC: plan.RBACChange{Gained: s.RBACGained, Lost: s.RBACLost}, Hash: s.Hash,
		Summary: plan.Summary{ToMove: int(s.ToMove), Refused: int(s.Refused), Additions: int(s.Additions), Deletions: int(s.Deletions), Changed: int(s.Changes)},
	}
}

// Forget deletes def's whole plan from Compositor's namespace: it cannot be owned by
// def, which is in another namespace. def's view goes with def, its owner.
func (k *PlanKeeper) Forget(ctx context.Context, def *corev1alpha1.CompositionDefinition) error {
	if k.Namespace == "" {
		return nil
	}
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: k.Namespace, Name: WholePlanConfigMapName(def.UID)}
	if err := k.Live.Get(ctx, key, cm); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !ownedPlan(cm, def, false) {
		return nil
	}
	if err := k.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the whole plan %s: %w", key, err)
	}
	return nil
}

// ownedPlan tells whether cm is a plan Compositor kept for def: labelled as such and,
// in def's namespace (owned), controlled by def.
func ownedPlan(cm *corev1.ConfigMap, def *corev1alpha1.CompositionDefinition, owned bool) bool {
	l := cm.Labels
	if l[vocab.LabelManagedBy] != vocab.ManagedBy || l[vocab.LabelDefinitionName] != def.Name {
		return false
	}
	if owned {
		return metav1.IsControlledBy(cm, def)
	}
	return l[vocab.LabelDefinitionNamespace] == def.Namespace
}

// encodeKept is the data and gzipped plan of a plan ConfigMap keeping p.
func encodeKept(p *plan.Plan) (map[string]string, []byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(p); err != nil {
		return nil, nil, fmt.Errorf("encoding the plan: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, nil, fmt.Errorf("encoding the plan: %w", err)
	}
	data := map[string]string{planHashKey: p.Hash}
	if p.Scope != nil {
		data[planScopeKey] = p.Scope.Namespace
	}
	return data, buf.Bytes(), nil
}

// newPlanConfigMap is a ConfigMap of key, labelled as a plan of def, with no content.
func newPlanConfigMap(key client.ObjectKey, def *corev1alpha1.CompositionDefinition) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
		Labels: map[string]string{vocab.LabelManagedBy: vocab.ManagedBy, vocab.LabelDefinitionNamespace: def.Namespace, vocab.LabelDefinitionName: def.Name}}}
}

// create keeps p in a new ConfigMap of key, in Compositor's namespace, and leaves a
// ConfigMap already there as it is.
func (k *PlanKeeper) create(ctx context.Context, def *corev1alpha1.CompositionDefinition, key client.ObjectKey, p *plan.Plan) error {
	data, gz, err := encodeKept(p)
	if err != nil {
		return err
	}
	cm := newPlanConfigMap(key, def)
	cm.Data, cm.BinaryData = data, map[string][]byte{PlanConfigMapKey: gz}
	if err := k.Client.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("writing ConfigMap %s: %w", key, err)
	}
	return nil
}

// write keeps p in the ConfigMap of key, owned by def when owned (in def's namespace),
// else labelled with def's namespace and name.
func (k *PlanKeeper) write(ctx context.Context, def *corev1alpha1.CompositionDefinition, key client.ObjectKey, p *plan.Plan, owned bool) error {
	data, gz, err := encodeKept(p)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{}
	err = k.Live.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = newPlanConfigMap(key, def)
	case err != nil:
		return fmt.Errorf("reading ConfigMap %s: %w", key, err)
	case !ownedPlan(cm, def, owned):
		return fmt.Errorf("ConfigMap %s exists and is not Compositor's plan of %s/%s: it is left alone", key, def.Namespace, def.Name)
	case bytes.Equal(cm.BinaryData[PlanConfigMapKey], gz) && maps.Equal(cm.Data, data):
		return nil
	}
	cm.Data = data
	cm.BinaryData = map[string][]byte{PlanConfigMapKey: gz}
	if owned {
		if err := controllerutil.SetControllerReference(def, cm, k.Client.Scheme()); err != nil {
			return err
		}
	}
	if cm.ResourceVersion == "" {
		err = k.Client.Create(ctx, cm)
	} else {
		err = k.Client.Update(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("writing ConfigMap %s: %w", key, err)
	}
	return nil
}

// DecodeKeptPlan decodes the plan a ConfigMap keeps, numbers as written (a float64
// would change an integer past 2^53, and the hash). It does not Check it.
func DecodeKeptPlan(cm *corev1.ConfigMap) (*plan.Plan, error) {
	key := client.ObjectKeyFromObject(cm)
	zr, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[PlanConfigMapKey]))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %s is not a gzipped plan: %w", key, PlanConfigMapKey, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxKeptPlanBytes+1))
	if err != nil || len(raw) > maxKeptPlanBytes {
		return nil, fmt.Errorf("ConfigMap %s: %s is not a gzipped plan of at most %d bytes (%v)", key, PlanConfigMapKey, maxKeptPlanBytes, err)
	}
	p := &plan.Plan{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("ConfigMap %s: decoding the plan: %w", key, err)
	}
	return p, nil
}
