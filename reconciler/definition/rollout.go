// Rollouts: how a definition's compositions move to a new chart version.
//
// When a definition's chart version changes, its status names the new version at once
// (new compositions are served by it) and retains the old one (status.retained): the
// old version stays served, with its chart, its controller and its RBAC, for the
// compositions still pinned to it. Then, one reconciliation after another:
//
//  1. A plan (package plan) of moving every composition of the old version: values
//     after conversion, the new version's verdict, objects added, deleted and changed,
//     RBAC gained and lost. Its summary goes in status.rollout.plan, the whole plan in
//     a ConfigMap (compositor plan DEFINITION). A plan that needs approval (see
//     spec.upgrade.approval) waits until compositor.dev/approve-plan names its hash.
//  2. A canary batch moves (its pin label is patched through the new version, a write
//     the webhooks judge), then batch after batch once every moved composition is Ready
//     on the new chart. Compositions the plan refuses, or whose move admission refuses,
//     stay on the old version.
//  3. More failures than spec.upgrade.maxFailures stop the rollout and move every
//     composition it moved back to the old version.
//  4. A retained version no composition is pinned to any more is dropped, with its
//     controller and RBAC.
//
// Which compositions moved is kept in the rollout's record, in Compositor's namespace
// (rolloutrecord.go); the status, which the definition's namespace reads, counts them
// and lists that namespace's. A composition's own labels and status are read for where
// it is, never for what the rollout did.

package definition

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/internal/event"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/plan"
)

// Defaults of spec.upgrade.
const (
	defaultCanary        = 1
	defaultBatchSize     = 10
	defaultMaxFailures   = 0
	defaultDeadline      = 600 * time.Second
	rolloutPoll          = 2 * time.Second
	summaryEntries       = 20 // entries of the plan summary's lists
	PlanConfigMapKey     = "plan.json.gz"
	planConfigMapPrefix  = "compositor-plan-"
	EventRolloutStarted  = "RolloutStarted"
	EventRolloutBatch    = "RolloutBatch"
	EventRolloutComplete = "RolloutComplete"
	EventRolledBack      = "RolloutRolledBack"
	EventAwaitingApprove = "RolloutAwaitingApproval"
	EventPlanFailed      = "RolloutPlanFailed"
)

// PlanConfigMapName is the ConfigMap, in a definition's namespace, that keeps the view
// of its rollout's plan for that namespace (plan.Plan.View), as gzipped JSON under
// PlanConfigMapKey; the whole plan is in Compositor's namespace
// (WholePlanConfigMapName).
func PlanConfigMapName(definition string) string { return planConfigMapPrefix + definition }

// upgradeSettings is spec.upgrade with its defaults.
type upgradeSettings struct {
	approval              string
	canary, batch, failed int
	deadline              time.Duration
}

func settingsOf(def *corev1alpha1.CompositionDefinition) upgradeSettings {
	s := upgradeSettings{approval: corev1alpha1.ApprovalOnRisk, canary: defaultCanary, batch: defaultBatchSize, failed: defaultMaxFailures, deadline: defaultDeadline}
	u := def.Spec.Upgrade
	if u == nil {
		return s
	}
	s.approval = cmp.Or(u.Approval, s.approval)
	if u.Canary != nil && *u.Canary > 0 {
		s.canary = int(*u.Canary)
	}
	if u.BatchSize != nil && *u.BatchSize > 0 {
		s.batch = int(*u.BatchSize)
	}
	if u.MaxFailures != nil && *u.MaxFailures >= 0 {
		s.failed = int(*u.MaxFailures)
	}
	if u.ProgressDeadlineSeconds != nil && *u.ProgressDeadlineSeconds > 0 {
		s.deadline = time.Duration(*u.ProgressDeadlineSeconds) * time.Second
	}
	return s
}

// servedChart is the version and chart def's status serves, before it moves on.
func servedChart(def *corev1alpha1.CompositionDefinition) (corev1alpha1.ServedChart, bool) {
	gvk, ok := ownership.Served(def)
	if !ok || def.Status.Digest == "" {
		return corev1alpha1.ServedChart{}, false
	}
	out := corev1alpha1.ServedChart{APIVersion: gvk.GroupVersion().String(), Digest: def.Status.Digest, PackageURL: def.Status.PackageURL}
	if v := def.Status.Verification; v != nil && v.Digest == def.Status.Digest {
		out.Verification = v.DeepCopy()
	}
	for _, v := range def.Status.Managed.VersionInfo {
		if v.Version == gvk.Version {
			out.Chart = v.Chart
		}
	}
	return out, out.Chart != ""
}

// beginRollout, when the definition moves from the version its status serves to
// api's, retains the old version and starts a rollout from it. Called before the
// status names the new version, so both are written together.
func beginRollout(def *corev1alpha1.CompositionDefinition, api *generatedAPI, fetched *chartfetch.Result, claimed map[string]bool) {
	old, ok := servedChart(def)
	previous := previousVersion(def)
	// The version moved back to is served again, not retained.
	def.Status.Retained = slices.DeleteFunc(def.Status.Retained, func(r corev1alpha1.ServedChart) bool { return r.APIVersion == api.APIVersion() })
	if !ok || previous == api.Version || claimed[previous] {
		return // nothing served before, the same version, or another definition keeps it
	}
	if !slices.ContainsFunc(def.Status.Retained, func(r corev1alpha1.ServedChart) bool { return r.APIVersion == old.APIVersion }) {
		def.Status.Retained = append(def.Status.Retained, old)
	}
	def.Status.Rollout = &corev1alpha1.Rollout{
		From: old.Chart, To: api.ChartVersion, FromVersion: previous, ToVersion: api.Version, ToDigest: fetched.Digest,
	}
}

// advanceRollout takes the definition's rollout one step further (see the top of this
// file), then drops the retained versions no composition is pinned to any more; it
// returns when to look again: soon after a version was dropped, so that the CRD drops
// it too. A plan that cannot be computed (the old chart gone, say) is reported in the
// rollout and tried again at the next poll: it stops nothing else.
func (r *Reconciler) advanceRollout(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, fetched *chartfetch.Result) (time.Duration, error) {
	next, err := r.Poll, error(nil)
	if ro := def.Status.Rollout; ro != nil && ro.ToVersion == api.Version && ro.ToDigest == fetched.Digest {
		if active(ro) {
			// A step moves compositions before its status is written: it must not
			// start from a status the cache has not caught up with, or it would
			// plan and move again what the last step moved.
			if stale, err := r.stale(ctx, def); err != nil || stale {
				return time.Second, err
			}
		}
		var rec *RolloutRecord
		switch ro.Phase {
		case "", corev1alpha1.RolloutAwaitingApproval:
			next, rec, err = r.planRollout(ctx, def, api, fetched)
		default:
			r.narrowKeptPlan(ctx, def)
			rec, err = r.loadRollout(ctx, def)
		}
		if rec != nil {
			publishRollout(ro, rec, def.Namespace)
			switch ro.Phase {
			case corev1alpha1.RolloutProgressing, corev1alpha1.RolloutPaused:
				next, err = r.progress(ctx, def, api, rec)
			case corev1alpha1.RolloutRollingBack:
				err = r.rollBack(ctx, def, api, rec)
			}
			err = errors.Join(err, r.commitRollout(ctx, def, rec))
		}
	} else if ro != nil && ro.Record == "" && hasLists(ro) {
		// Of another move, written by an earlier Compositor: only its lists change.
		err = r.narrowLegacyRollout(ctx, def)
	}
	changed, removal, dropErr := r.dropUnusedRetained(ctx, def, api, time.Now())
	if changed && (next == 0 || next > time.Second) {
		next = time.Second
	}
	if removal > 0 && (next == 0 || next > removal) {
		next = removal
	}
	return next, errors.Join(err, dropErr)
}

// active tells whether ro has steps left.
func active(ro *corev1alpha1.Rollout) bool {
	return ro.Phase != corev1alpha1.RolloutComplete && ro.Phase != corev1alpha1.RolloutRolledBack
}

// stale tells whether the API server holds a newer def than the one reconciled, read
// from the cache (or written by this reconciliation).
func (r *Reconciler) stale(ctx context.Context, def *corev1alpha1.CompositionDefinition) (bool, error) {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(corev1alpha1.GroupVersion.WithKind("CompositionDefinition"))
	if err := r.Live.Get(ctx, client.ObjectKeyFromObject(def), live); err != nil {
		return false, fmt.Errorf("reading the definition before its rollout's next step: %w", err)
	}
	return live.ResourceVersion != def.ResourceVersion, nil
}

// planRollout computes the plan and, once it needs no approval or is approved, freezes
// it into the rollout's record, which it returns, written: the caller moves the first
// compositions.
func (r *Reconciler) planRollout(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, fetched *chartfetch.Result) (time.Duration, *RolloutRecord, error) {
	ro := def.Status.Rollout
	p, err := r.computePlan(ctx, def, api, fetched)
	if err != nil {
		message := "the plan could not be computed, nothing moves: " + err.Error()
		if ro.Message != message {
			r.event(def, corev1.EventTypeWarning, EventPlanFailed, message)
		}
		ro.Message = message
		return r.Poll, nil, nil
	}
	ro.Plan = summarize(p, def.Namespace)
	var kept error
	ro.Plan.ViewDigest, kept = r.keepPlan(ctx, def, p)
	settings := settingsOf(def)
	risky := p.Summary.Refused > 0 || p.Summary.Deletions > 0
	// Nothing to move needs no approval: the rollout completes at once.
	needsApproval := p.Summary.ToMove > 0 &&
		(settings.approval == corev1alpha1.ApprovalAlways || (settings.approval == corev1alpha1.ApprovalOnRisk && risky))
	if approved := def.Annotations[vocab.AnnotationApprovePlan]; needsApproval && approved != p.Hash {
		was := ro.Phase
		ro.Phase = corev1alpha1.RolloutAwaitingApproval
		ro.Message = fmt.Sprintf("%d compositions to move from %s to %s: %d refused, %d objects deleted; nothing moves until approved: kubectl annotate --overwrite compositiondefinition %s -n %s %s=%s",
			p.Summary.ToMove, ro.From, ro.To, p.Summary.Refused, p.Summary.Deletions, def.Name, def.Namespace, vocab.AnnotationApprovePlan, p.Hash)
		if kept == nil {
			ro.Message += fmt.Sprintf(" (compositor plan %s -n %s shows the plan)", def.Name, def.Namespace)
		} else {
			ro.Message += "; the whole plan could not be kept for compositor plan: " + kept.Error()
		}
		if approved != "" {
			ro.Message = fmt.Sprintf("%s names %s, which is not the plan now (%s): ", vocab.AnnotationApprovePlan, approved, p.Hash) + ro.Message
		}
		if was != ro.Phase {
			r.event(def, corev1.EventTypeNormal, EventAwaitingApprove, ro.Message)
		}
		return r.Poll, nil, nil
	}
	// The plan is frozen here: what moves is what it planned, in its order, written to
	// the record before anything moves.
	rec, err := r.newRecord(ctx, def)
	if err == nil {
		for _, c := range p.Compositions {
			name := c.Namespace + "/" + c.Name
			if len(c.Refused) > 0 {
				// The record is read by the platform alone, as the whole plan.
				rec.Stayed = append(rec.Stayed, clip(name+": "+c.Refused[0]))
			} else {
				rec.Pending = append(rec.Pending, name)
			}
		}
		err = r.saveRecord(ctx, def, rec)
	}
	if err != nil {
		ro.Message = "the rollout's record could not be kept in Compositor's namespace, nothing moves: " + err.Error()
		return 0, nil, err
	}
	ro.Phase = corev1alpha1.RolloutProgressing
	ro.StartTime = ptr.To(metav1.Now())
	ro.Message = fmt.Sprintf("moving %d compositions from %s to %s, %d first", len(rec.Pending), ro.From, ro.To, settings.canary)
	r.event(def, corev1.EventTypeNormal, EventRolloutStarted, ro.Message+" (plan "+p.Hash+")")
	return r.Poll, rec, nil
}

// computePlan plans moving every composition of the rollout's old version to api's.
func (r *Reconciler) computePlan(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, fetched *chartfetch.Result) (*plan.Plan, error) {
	ro := def.Status.Rollout
	fromGVK := schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: ro.FromVersion, Kind: api.Kind}
	from := ownership.At(def, fromGVK)
	if from == nil {
		return nil, fmt.Errorf("the definition no longer retains %s", ro.FromVersion)
	}
	fromChart, _, err := r.Charts.Chart(ctx, from)
	if err != nil {
		return nil, fmt.Errorf("reading chart %s of %s: %w", ro.From, ro.FromVersion, err)
	}
	items, err := r.compositionObjects(ctx, api.Kind, ro.FromVersion, ro.FromVersion)
	if err != nil {
		return nil, err
	}
	// Only this definition's: another definition of the kind, in another namespace,
	// may serve the same version to the compositions of its own namespace.
	definitions := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, definitions, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing CompositionDefinitions: %w", err)
	}
	compositions := make([]map[string]any, 0, len(items))
	for i := range items {
		if owner := ownership.For(definitions.Items, fromGVK, items[i].GetNamespace()); owner != nil && owner.UID == def.UID {
			compositions = append(compositions, items[i].Object)
		}
	}
	// The digests of the values are keyed: the plan is kept where others read it.
	key, err := PlanDigestKey(r.MasterKey)
	if err != nil {
		return nil, err
	}
	// One worker: planning a thousand compositions takes seconds of CPU, and the
	// webhooks in this process keep the other cores.
	return plan.Compute(ctx, plan.Options{
		From: fromChart, To: fetched.Chart, FromDigest: from.Status.Digest, ToDigest: fetched.Digest,
		Judge: r.Judge, Workers: 1, DigestKey: key,
	}, compositions)
}

// summarize is the status's summary of p: its counts, and the refusals and deletions
// of the compositions of namespace, the definition's, which reads the status.
func summarize(p *plan.Plan, namespace string) corev1alpha1.PlanSummary {
	s := corev1alpha1.PlanSummary{
		Hash: p.Hash, ToMove: int32(p.Summary.ToMove), Refused: int32(p.Summary.Refused),
		Additions: int32(p.Summary.Additions), Deletions: int32(p.Summary.Deletions), Changes: int32(p.Summary.Changed),
		RBACGained: p.RBAC.Gained, RBACLost: p.RBAC.Lost,
	}
	for _, c := range p.Compositions {
		if c.Namespace != namespace {
			continue
		}
		name := c.Namespace + "/" + c.Name
		if len(c.Refused) > 0 {
			if len(s.RefusedCompositions) == summaryEntries {
				s.Truncated = true
			} else {
				s.RefusedCompositions = append(s.RefusedCompositions, name+": "+strings.Join(c.Refused, "; "))
			}
		}
		for _, d := range c.Deleted {
			if len(s.DeletedObjects) == summaryEntries {
				s.Truncated = true
				break
			}
			s.DeletedObjects = append(s.DeletedObjects, name+": "+d.String())
		}
	}
	return s
}

// keepPlan keeps p for compositor plan DEFINITION (see plankeeper.go): whole in
// Compositor's namespace, and the view of def's namespace there, whose digest it
// returns for the status.
func (r *Reconciler) keepPlan(ctx context.Context, def *corev1alpha1.CompositionDefinition, p *plan.Plan) (string, error) {
	digest, err := r.plans().Keep(ctx, def, p)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Keeping the plan")
	}
	return digest, err
}

// plans is where the reconciler keeps plans.
func (r *Reconciler) plans() *PlanKeeper {
	return &PlanKeeper{Client: r.Client, Live: r.Live, Namespace: r.compositorNamespace()}
}

// narrowKeptPlan replaces, once per definition, plan and recorded view in this
// process, a whole plan an earlier Compositor kept in def's namespace with its view
// (PlanKeeper.Narrow), and records the view's digest in the status: a rollout past its
// plan does not keep its plan again. It is tried again at the next reconciliation when
// it fails, or when the status did not take the digest.
func (r *Reconciler) narrowKeptPlan(ctx context.Context, def *corev1alpha1.CompositionDefinition) {
	ro := def.Status.Rollout
	if ro == nil || ro.Plan.Hash == "" {
		return
	}
	done := func() string { return string(def.UID) + " " + ro.Plan.Hash + " " + ro.Plan.ViewDigest }
	if _, ok := r.narrowed.Load(done()); ok {
		return
	}
	digest, err := r.plans().Narrow(ctx, def)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Narrowing the plan an earlier Compositor kept in the definition's namespace")
		return
	}
	ro.Plan.ViewDigest = digest
	r.narrowed.Store(done(), true)
}

// progress checks the moved compositions of rec, rolls back when too many failed, moves
// the next batch when every moved one is settled, and completes when none is left.
// Messages and events, which the definition's namespace reads, name only its
// compositions, and count the others.
func (r *Reconciler) progress(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, rec *RolloutRecord) (next time.Duration, err error) {
	ro := def.Status.Rollout
	settings := settingsOf(def)
	if def.Annotations[vocab.AnnotationRolloutPaused] == "true" {
		if ro.Phase != corev1alpha1.RolloutPaused {
			ro.Phase = corev1alpha1.RolloutPaused
			ro.Message = fmt.Sprintf("%s is \"true\": %d moved, %d to move, nothing more moves until it is removed", vocab.AnnotationRolloutPaused, len(rec.Moved), len(rec.Pending))
			r.event(def, corev1.EventTypeNormal, corev1alpha1.RolloutPaused, ro.Message)
		}
		return r.Poll, nil
	}
	ro.Phase = corev1alpha1.RolloutProgressing

	onTo, err := r.compositionObjects(ctx, api.Kind, ro.ToVersion, ro.ToVersion)
	if err != nil {
		return 0, err
	}
	byName := make(map[string]*unstructured.Unstructured, len(onTo))
	for i := range onTo {
		byName[onTo[i].GetNamespace()+"/"+onTo[i].GetName()] = &onTo[i]
	}
	ready, waiting, counted := 0, 0, 0
	rec.Failed = nil
	for _, m := range rec.Moved {
		obj, ok := byName[m.Name]
		if !ok {
			continue // deleted, or moved elsewhere by hand: nothing to wait for
		}
		if obj.GetAnnotations()[vocab.AnnotationPaused] == "true" {
			continue // its owner stopped it: neither a success nor a failure of the chart
		}
		state, why := movedState(obj, ro.To, ro.ToDigest, m.At.Time, settings.deadline)
		switch {
		case state == stateReady:
			ready++
		case state == stateFailed && obj.GetGeneration() != m.Generation:
			rec.Failed = append(rec.Failed, clip(m.Name+": "+why+" (its spec changed since it moved: not counted)"))
		case state == stateFailed:
			counted++
			rec.Failed = append(rec.Failed, clip(m.Name+": "+why))
		default:
			waiting++
		}
	}
	ro.Ready = int32(ready)
	if counted > settings.failed {
		ro.Phase = corev1alpha1.RolloutRollingBack
		return r.Poll, r.rollBack(ctx, def, api, rec)
	}
	if waiting > 0 {
		ro.Message = fmt.Sprintf("%d of %d moved compositions Ready on %s; waiting for %d before the next batch", ready, len(rec.Moved), ro.To, waiting)
		return rolloutPoll, nil
	}

	// The next batch: the plan's compositions still pinned to the old version.
	onFrom, err := r.compositions(ctx, api, ro.ToVersion, ro.FromVersion)
	if err != nil {
		return 0, err
	}
	there := make(map[string]bool, len(onFrom))
	for _, item := range onFrom {
		there[item.Namespace+"/"+item.Name] = true
	}
	rec.Pending = slices.DeleteFunc(rec.Pending, func(name string) bool { return !there[name] })
	if len(rec.Pending) == 0 {
		ro.Phase = corev1alpha1.RolloutComplete
		ro.CompletionTime = ptr.To(metav1.Now())
		ro.Message = fmt.Sprintf("%d compositions moved to %s", len(rec.Moved), ro.To)
		if len(rec.Failed) > 0 {
			ro.Message += fmt.Sprintf(", %d of them not Ready", len(rec.Failed))
		}
		if len(rec.Stayed) > 0 {
			ro.Message += fmt.Sprintf("; %d stay on %s, refused by %s", len(rec.Stayed), ro.From, ro.To)
		}
		r.event(def, corev1.EventTypeNormal, EventRolloutComplete, ro.Message)
		return r.Poll, nil
	}
	size := settings.batch
	if len(rec.Moved) == 0 {
		size = settings.canary
	}
	// The record is written before the batch moves and as soon as it moved, and then
	// the status, apart from the rest of the reconciliation: a composition moved and
	// not recorded would be neither watched nor moved back.
	if err := r.saveRecord(ctx, def, rec); err != nil {
		return 0, err
	}
	beforeBatch := def.DeepCopy()
	defer func() {
		if recErr := r.commitRollout(ctx, def, rec); recErr != nil {
			ctrl.LoggerFrom(ctx).Error(recErr, "Recording the compositions a rollout moved")
			err = errors.Join(err, recErr)
		}
		// A copy: the patch reads the object back, whose rollout the API server knows
		// only as far as the status was written (without the plan, in the
		// reconciliation that plans), and the rest of the reconciliation writes def as
		// it is here, from the version written now.
		patched := def.DeepCopy()
		if err := r.Client.Status().Patch(ctx, patched, client.MergeFrom(beforeBatch)); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Recording the compositions a rollout moved in the status")
		} else {
			def.ResourceVersion = patched.ResourceVersion
		}
	}()
	var movedNow, retry []string
	var lastErr error
	for len(movedNow)+len(retry) < size && len(rec.Pending) > 0 {
		name := rec.Pending[0]
		rec.Pending = rec.Pending[1:]
		namespace, n, _ := strings.Cut(name, "/")
		obj, err := r.relabel(ctx, api.Kind, namespace, n, ro.ToVersion, ro.ToVersion)
		switch {
		case err == nil:
			rec.Moved = append(rec.Moved, corev1alpha1.MovedComposition{Name: name, Generation: obj.GetGeneration(), At: metav1.Now()})
			movedNow = append(movedNow, name)
		case apierrors.IsNotFound(err):
		case refusedByAdmission(err):
			rec.Stayed = append(rec.Stayed, clip(name+": "+err.Error()))
		default:
			// Tried again after the others: one composition the API server cannot
			// write now does not hold up the rest.
			retry = append(retry, name)
			if namespace == def.Namespace {
				lastErr = err
			} else {
				ctrl.LoggerFrom(ctx).Error(err, "Moving a composition", "composition", name)
			}
		}
	}
	rec.Pending = append(rec.Pending, retry...)
	ro.Message = fmt.Sprintf("moved %s to %s; %d moved, %d to move, waiting for them to be Ready", cmp.Or(told(movedNow, def.Namespace, ", "), "none"), ro.To, len(rec.Moved), len(rec.Pending))
	if len(retry) > 0 {
		ro.Message += fmt.Sprintf("; %d could not be moved now and wait their turn again", len(retry))
		if lastErr != nil {
			ro.Message += fmt.Sprintf(": %v", lastErr)
		}
	}
	r.event(def, corev1.EventTypeNormal, EventRolloutBatch, ro.Message)
	return rolloutPoll, nil
}

// rollBack moves every composition the rollout moved back to the old version, and ends
// the rollout: it starts again only for another chart version. Its phase, RollingBack,
// is written before the first move, so a rollback cut short by an error goes on at the
// next reconciliation instead of the rollout.
func (r *Reconciler) rollBack(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, rec *RolloutRecord) error {
	ro := def.Status.Rollout
	rec.NotMovedBack = nil
	for _, m := range rec.Moved {
		namespace, n, _ := strings.Cut(m.Name, "/")
		if _, err := r.relabel(ctx, api.Kind, namespace, n, ro.FromVersion, ro.FromVersion); err != nil && !apierrors.IsNotFound(err) {
			if !refusedByAdmission(err) {
				if namespace != def.Namespace {
					// The error names the composition: the platform's log says which.
					ctrl.LoggerFrom(ctx).Error(err, "Moving a composition back", "composition", m.Name)
					err = fmt.Errorf("a composition of another namespace: %s", cmp.Or(string(apierrors.ReasonForError(err)), "the API server did not take the write"))
				}
				ro.Message = fmt.Sprintf("moving the compositions back to %s: %v", ro.From, err)
				return fmt.Errorf("moving %s compositions back to %s: %w", api.Kind, ro.FromVersion, err)
			}
			rec.NotMovedBack = append(rec.NotMovedBack, clip(m.Name+": "+err.Error()))
		}
	}
	ro.Phase = corev1alpha1.RolloutRolledBack
	ro.CompletionTime = ptr.To(metav1.Now())
	rec.Pending = nil
	ro.Message = fmt.Sprintf("%d moved compositions failed on %s (%d tolerated): %s; the %d moved were moved back to %s",
		len(rec.Failed), ro.To, settingsOf(def).failed, told(rec.Failed, def.Namespace, "; "), len(rec.Moved), ro.From)
	if len(rec.NotMovedBack) > 0 {
		ro.Message += fmt.Sprintf("; %d could not be moved back: %s", len(rec.NotMovedBack), told(rec.NotMovedBack, def.Namespace, "; "))
	}
	ro.Message = clipTo(ro.Message, maxMessage)
	r.event(def, corev1.EventTypeWarning, EventRolledBack, ro.Message)
	return nil
}

type movedStateKind int

const (
	stateWaiting movedStateKind = iota
	stateReady
	stateFailed
)

// failureGrace is how long a moved composition stays not Ready, for a reason other than
// waiting, before it counts as failed: the new version's controller retries what
// fails for a moment, such as its release role not yet bound in a namespace it has
// just been given.
const failureGrace = 15 * time.Second

// waitingReasons are the reasons of a Ready=False composition that is on its way.
var waitingReasons = []string{"", "Installing", "DefinitionNotFound", condition.ReasonPaused}

// movedState is whether a composition moved at movedAt is Ready on chartVersion of
// digest, failed, or on its way. Its status is Compositor's alone (see the status
// webhook).
func movedState(obj *unstructured.Unstructured, chartVersion, digest string, movedAt time.Time, deadline time.Duration) (movedStateKind, string) {
	ready := readyCondition(obj)
	switch {
	case ready != nil && ready.Status == metav1.ConditionTrue && installedAt(obj, chartVersion, digest):
		return stateReady, ""
	case ready != nil && ready.Status == metav1.ConditionFalse && !slices.Contains(waitingReasons, ready.Reason) &&
		!ready.LastTransitionTime.Time.Before(movedAt.Add(-time.Second)) && time.Since(ready.LastTransitionTime.Time) >= failureGrace:
		return stateFailed, ready.Reason + ": " + ready.Message
	case time.Since(movedAt) > deadline:
		return stateFailed, fmt.Sprintf("not Ready on %s within %s", chartVersion, deadline)
	}
	return stateWaiting, ""
}

// maxEntry and maxMessage bound what one composition adds to the status and a
// message: a thousand compositions with long refusals must still fit in an object.
const (
	maxEntry   = 256
	maxMessage = 1000
)

// clip is s cut to maxEntry bytes.
func clip(s string) string { return clipTo(s, maxEntry) }

// clipTo is s cut to n bytes, at a rune boundary, marked when cut.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// installedAt tells whether obj's status says its release runs chartVersion of digest:
// in the local cluster (status.helmChartVersion and status.digest), or, placed on
// target clusters, on every one of them (status.clusters, whose entries name the chart
// version alone).
func installedAt(obj *unstructured.Unstructured, chartVersion, digest string) bool {
	if clusters, found, _ := unstructured.NestedSlice(obj.Object, "status", "clusters"); found && len(clusters) > 0 {
		for _, c := range clusters {
			entry, _ := c.(map[string]any)
			if version, _ := entry["chartVersion"].(string); version != chartVersion || entry["ready"] != true {
				return false
			}
		}
		return true
	}
	installed, _, _ := unstructured.NestedString(obj.Object, "status", "helmChartVersion")
	installedDigest, _, _ := unstructured.NestedString(obj.Object, "status", "digest")
	return installed == chartVersion && installedDigest == digest
}

func readyCondition(obj *unstructured.Unstructured) *metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var conditions []metav1.Condition
	for _, c := range raw {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			continue
		}
		var cond metav1.Condition
		if json.Unmarshal(b, &cond) == nil {
			conditions = append(conditions, cond)
		}
	}
	return meta.FindStatusCondition(conditions, corev1alpha1.ConditionReady)
}

// refusedByAdmission tells whether err is a write refused for the object's content
// (a webhook's denial, a schema's), not a failure to reach the API server.
func refusedByAdmission(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)
}

// relabel pins a composition to version, written through via: an explicit move of its
// pin, which the webhooks judge like any write. It returns the composition as written.
func (r *Reconciler) relabel(ctx context.Context, kind, namespace, name, version, via string) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: via, Kind: kind})
	obj.SetNamespace(namespace)
	obj.SetName(name)
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, vocab.LabelCompositionVersion, version)
	return obj, r.Client.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", patch))
}

// compositionObjects lists the compositions of kind pinned to version, whole, read
// through via.
func (r *Reconciler) compositionObjects(ctx context.Context, kind, via, version string) ([]unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: via, Kind: kind + "List"})
	if err := r.Live.List(ctx, list, client.MatchingLabels{vocab.LabelCompositionVersion: version}); err != nil {
		return nil, fmt.Errorf("listing %s compositions of version %s: %w", kind, version, err)
	}
	return list.Items, nil
}

// dropUnusedRetained deprecates the retained versions no composition is pinned to any
// more, and removes their controllers and RBAC: such a version stays served, deprecated,
// until its RemoveAfter (the definition's DeprecatedVersionGracePeriod from now), so
// that clients still speaking it keep working while they move; then it stops retaining
// it, and the CRD drops it at the next reconciliation (pruneVersions). A deprecated
// version that compositions are pinned to again is retained again, as any other.
// changed reports whether the retained versions changed; removal is how long until the
// next deprecated version is to be removed, 0 when none is.
func (r *Reconciler) dropUnusedRetained(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, now time.Time) (changed bool, removal time.Duration, err error) {
	var kept []corev1alpha1.ServedChart
	for _, ret := range def.Status.Retained {
		gv, err := schema.ParseGroupVersion(ret.APIVersion)
		if err != nil || gv.Version == api.Version {
			changed = true
			continue
		}
		items, err := r.compositions(ctx, api, api.Version, gv.Version)
		if err != nil {
			return false, 0, err
		}
		if len(items) > 0 {
			if ret.Deprecated() {
				ret.DeprecatedSince, ret.RemoveAfter, changed = nil, nil, true
			}
			kept = append(kept, ret)
			// Its release role may delete what the version served now creates, so
			// that a composition moved back removes it.
			if err := r.applyRetainedRBAC(ctx, def, api, ret); err != nil {
				return false, 0, fmt.Errorf("the RBAC of retained %s: %w", ret.APIVersion, err)
			}
			if r.Kinds != nil {
				// Served again after a restart of the leader.
				if err := r.serveVersion(ctx, def, &generatedAPI{Kind: api.Kind, Plural: api.Plural, Version: gv.Version}); err != nil {
					return false, 0, err
				}
			}
			continue
		}
		grace := def.DeprecatedVersionGracePeriod()
		if !ret.Deprecated() {
			// Its last composition moved: nothing runs its chart any more.
			if err := r.deleteWorkloads(ctx, def, def.Status.Resource, gv.Version); err != nil {
				return false, 0, err
			}
			changed = true
			if grace == 0 {
				continue
			}
			ret.DeprecatedSince = &metav1.Time{Time: now.Truncate(time.Second)}
			r.event(def, corev1.EventTypeNormal, "VersionDeprecated", fmt.Sprintf(
				"%s is deprecated: no composition runs it any more; it stays served for the clients that still speak it until %s, and writes through it land on %s",
				ret.APIVersion, ret.DeprecatedSince.Add(grace).UTC().Format(time.RFC3339), api.APIVersion()))
		}
		// The grace period is the definition's as it is now: shortening it takes
		// effect at once.
		if removeAfter := ret.DeprecatedSince.Add(grace).Truncate(time.Second); ret.RemoveAfter == nil || !ret.RemoveAfter.Time.Equal(removeAfter) {
			ret.RemoveAfter, changed = &metav1.Time{Time: removeAfter}, true
		}
		if left := ret.RemoveAfter.Sub(now); left > 0 {
			kept = append(kept, ret)
			if removal == 0 || left < removal {
				removal = left
			}
			continue
		}
		changed = true
		r.event(def, corev1.EventTypeNormal, "VersionRemoved", fmt.Sprintf("%s is no longer served: its grace period as a deprecated version ended", ret.APIVersion))
	}
	def.Status.Retained = kept
	return changed, removal, nil
}

// event records an event on the definition, its message within what an event holds.
func (r *Reconciler) event(def *corev1alpha1.CompositionDefinition, eventType, reason, message string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(def, nil, eventType, reason, "Rollout", "%s", event.Note(message))
	}
}
