// Package audit evaluates the objects that exist against the policies in force, on the
// leader, and writes what it finds to each CompositionPolicy's status.
package audit

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/policies"
)

const (
	// auditHeartbeat is how stale status.audit.lastRunTime may get. A pass that finds
	// what the status already says writes nothing, so that an idle cluster does not
	// see one status write per policy per interval; lastRunTime is refreshed once it
	// is this old, to show that the audit still runs.
	auditHeartbeat = 10 * time.Minute
	// auditPageSize bounds the objects one list call of the audit returns.
	auditPageSize = 500
	// maxAuditMessage bounds the message of one audit example, in bytes.
	maxAuditMessage = 512
)

// DefinitionCharts gives the chart a CompositionDefinition serves and its digest.
type DefinitionCharts interface {
	Chart(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*chart.Chart, string, error)
}

// Auditor evaluates every existing CompositionDefinition and composition against every
// policy in force, at start and then every Interval, and writes what it found to the
// status.audit of each CompositionPolicy: the number of violations, whatever the
// policy's action (dryrun policies are what the audit is for), and at most
// MaxAuditExamples of them, ordered by namespace and name.
//
// Requests are built as the validating webhook builds them, with an empty operation
// so that every policy applies whatever its match.operations; a composition whose
// release is installed renders as its next upgrade would, the way Helm applied it. The
// chart's JSON Schema is not checked: the audit is about policies.
//
// A composition is judged in its namespace's lane (policies.CompositionsLane), as its
// writes are: the renders of one namespace's compositions never take more of the
// sandbox than that namespace's own writes may. And it is judged again only when
// something it is judged from changed since the last pass (the object, its namespace's
// labels, its definition's chart, the policies and constraints in force); otherwise
// the last verdict stands, and nothing renders. A verdict with a failure in it (a
// deadline, a chart that did not render) stands for failedVerdictTTL at most, since
// another try may answer. A policy that cannot be
// evaluated on an object (runtime error, deadline, a chart that does not render)
// counts as a violation carrying the engine's message: that object would be refused
// or warned about on its next write, and the audit says so rather than hiding it.
//
// Only the leader writes audit status. Policies that the engine does not enforce
// (never compiled, or not loaded yet) are left alone rather than reported clean.
type Auditor struct {
	// Client writes CompositionPolicy status.
	Client client.Client
	// Reader reads from the API server without caching, so that the audit does not
	// keep an informer for every generated kind.
	Reader client.Reader
	// Judge judges what exists with the policies in force, as admission judges a write.
	Judge *policies.Judge
	// Charts gives compositions their definition's chart, for rendered policies.
	Charts DefinitionCharts
	// Interval is the time between the end of one pass and the start of the next.
	Interval time.Duration
	// Capabilities are the cluster's, which compositions render with as their next
	// upgrade would; nil renders with Helm's defaults.
	Capabilities *policies.ClusterCapabilities

	// verdicts are what earlier passes found of each composition, and from what: a
	// composition whose inputs are unchanged is not judged again (see verdicts).
	verdicts verdicts
}

var _ manager.LeaderElectionRunnable = (*Auditor)(nil)

// NeedLeaderElection makes the audit run on the leader only.
func (a *Auditor) NeedLeaderElection() bool { return true }

// Start runs a pass at once and then every Interval until ctx is done. A failed pass
// is logged and the next one tries again.
func (a *Auditor) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("audit")
	ctx = log.IntoContext(ctx, logger)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if err := a.Audit(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Audit pass failed; the next pass tries again", "interval", a.Interval)
		}
		timer.Reset(a.Interval)
	}
}

// Audit runs one pass. Findings are written only when every object could be listed:
// a partial pass would report too few violations.
func (a *Auditor) Audit(ctx context.Context) error {
	if a.Judge == nil || a.Judge.Engine() == nil {
		return errors.New("the audit has no policies to judge with")
	}
	started := time.Now()
	enforced := map[string]bool{}
	for _, p := range a.Judge.Engine().Policies() {
		if p.Origin == policies.OriginObject {
			enforced[p.Name] = true
		}
	}
	pass := &auditPass{Auditor: a, findings: newAuditFindings(), charts: map[string]chartResult{}, seen: map[types.UID]bool{}, engine: a.Judge.Engine().Version()}
	if a.Capabilities != nil {
		caps, err := a.Capabilities.Get(ctx)
		if err != nil {
			return err
		}
		pass.capabilities, pass.capabilitiesDigest = caps, capabilitiesDigest(caps)
	}
	if err := pass.run(ctx); err != nil {
		return err
	}
	a.verdicts.forget(pass.seen)
	if err := a.writeStatus(ctx, enforced, pass.findings, metav1.Now()); err != nil {
		return err
	}
	log.FromContext(ctx).V(1).Info("Audit pass finished", "objects", pass.objects, "duration", time.Since(started).String())
	return nil
}

// auditPass is the state of one pass.
type auditPass struct {
	*Auditor
	// capabilities are the cluster's for this pass; capabilitiesDigest tells them
	// apart, so that a verdict found under others is judged again.
	capabilities       *chartcommon.Capabilities
	capabilitiesDigest string
	findings           *auditFindings
	namespaceLabels    map[string]map[string]string
	// definitions by namespace/name, as the API server has them.
	definitions []corev1alpha1.CompositionDefinition
	// charts by namespace/name@digest of the definition's version (chart).
	charts  map[string]chartResult
	objects int
	// seen are the compositions this pass looked at; engine is what the engine
	// enforced when it began. A verdict found under a later version is kept under
	// this one: the next pass then judges again, which errs on the side of work.
	seen   map[types.UID]bool
	engine policies.Version
}

type chartResult struct {
	chart  *chart.Chart
	digest string
}

func (p *auditPass) run(ctx context.Context) error {
	if err := p.readNamespaces(ctx); err != nil {
		return err
	}
	if err := p.auditDefinitions(ctx); err != nil {
		return err
	}
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := p.Reader.List(ctx, crds, client.MatchingLabels{vocab.LabelManaged: "true"}); err != nil {
		return fmt.Errorf("listing generated CRDs: %w", err)
	}
	for i := range crds.Items {
		if err := p.auditCompositions(ctx, &crds.Items[i]); err != nil {
			return err
		}
	}
	return nil
}

// readNamespaces keeps the labels of every namespace, for namespaceSelector.
func (p *auditPass) readNamespaces(ctx context.Context) error {
	p.namespaceLabels = map[string]map[string]string{}
	newList := func() *metav1.PartialObjectMetadataList {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
		return list
	}
	return listPages(ctx, p.Reader, newList, func(list *metav1.PartialObjectMetadataList) error {
		for _, ns := range list.Items {
			p.namespaceLabels[ns.Name] = ns.Labels
		}
		return nil
	}, "listing namespaces")
}

// auditDefinitions evaluates every CompositionDefinition, as the webhook would on its
// write: input.definition is the definition's own spec.chart.
func (p *auditPass) auditDefinitions(ctx context.Context) error {
	newList := func() *unstructured.UnstructuredList {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(corev1alpha1.GroupVersion.WithKind("CompositionDefinitionList"))
		return list
	}
	err := listPages(ctx, p.Reader, newList, func(list *unstructured.UnstructuredList) error {
		for i := range list.Items {
			obj := &list.Items[i]
			def := &corev1alpha1.CompositionDefinition{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, def); err != nil {
				return fmt.Errorf("reading CompositionDefinition %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
			}
			p.definitions = append(p.definitions, *def)
			p.evaluate(ctx, obj, policies.NewRequest(p.write(obj, "compositiondefinitions")))
		}
		return nil
	}, "listing CompositionDefinitions")
	slices.SortFunc(p.definitions, func(a, b corev1alpha1.CompositionDefinition) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return err
}

// auditCompositions evaluates every composition of a generated CRD. Each is read
// through the served version it is labelled with, so that it meets the definition
// and chart it was written for; those labelled with no served version are read
// through the first served one.
func (p *auditPass) auditCompositions(ctx context.Context, generated *apiextensionsv1.CustomResourceDefinition) error {
	var served []string
	for _, v := range generated.Spec.Versions {
		if v.Served && v.Name != crd.HubVersion {
			served = append(served, v.Name)
		}
	}
	if len(served) == 0 {
		return nil
	}
	for _, version := range served {
		selector := labels.SelectorFromSet(labels.Set{vocab.LabelCompositionVersion: version})
		if err := p.auditVersion(ctx, generated, version, selector); err != nil {
			return err
		}
	}
	unlabelled, err := labels.NewRequirement(vocab.LabelCompositionVersion, selection.NotIn, served)
	if err != nil {
		return fmt.Errorf("selecting compositions of %s outside its served versions: %w", generated.Name, err)
	}
	return p.auditVersion(ctx, generated, served[0], labels.NewSelector().Add(*unlabelled))
}

func (p *auditPass) auditVersion(ctx context.Context, generated *apiextensionsv1.CustomResourceDefinition, version string, selector labels.Selector) error {
	gv := metav1.GroupVersion{Group: generated.Spec.Group, Version: version}
	kind := generated.Spec.Names.Kind
	newList := func() *unstructured.UnstructuredList {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(gv.String())
		list.SetKind(kind + "List")
		return list
	}
	gvk := schema.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: kind}
	return listPages(ctx, p.Reader, newList, func(list *unstructured.UnstructuredList) error {
		for i := range list.Items {
			obj := &list.Items[i]
			w := p.write(obj, generated.Spec.Names.Plural)
			// The definition admission judges the composition with: the one serving
			// the kind in its namespace, else the owner.
			w.Definition = ownership.For(p.definitions, gvk, obj.GetNamespace())
			if w.Definition != nil {
				ch := p.chart(ctx, w.Definition)
				w.Chart, w.ChartDigest = ch.chart, ch.digest
			}
			w.Capabilities = p.capabilities
			p.evaluateComposition(ctx, obj, policies.NewRequest(w), w.Definition == nil || w.Chart != nil)
		}
		return nil
	}, "listing "+kind+" compositions of "+gv.String(), client.MatchingLabelsSelector{Selector: selector})
}

// chart loads the chart of the definition's version once per pass: def is a view of
// ownership.For, and one definition serves each version it retains (status.retained)
// from that version's own chart, so the chart is kept by definition and digest. When it
// is not available, the compositions are evaluated without it: rendered policies then
// skip them (as they skip a request without a chart) and the trouble is logged, not
// counted against a policy that is not at fault.
func (p *auditPass) chart(ctx context.Context, def *corev1alpha1.CompositionDefinition) chartResult {
	key := def.Namespace + "/" + def.Name + "@" + def.Status.Digest
	if res, ok := p.charts[key]; ok {
		return res
	}
	var res chartResult
	if p.Charts != nil {
		ch, digest, err := p.Charts.Chart(ctx, def)
		if err != nil {
			log.FromContext(ctx).Error(err, "The definition's chart is not available; rendered policies skip its compositions in this pass",
				"definition", def.Namespace+"/"+def.Name, "version", def.Status.APIVersion, "digest", def.Status.Digest)
		} else {
			res = chartResult{chart: ch, digest: digest}
		}
	}
	p.charts[key] = res
	return res
}

// write is what the policy request for an existing object is built from, as the
// webhook builds it for a write of the object, with an empty operation: every policy
// applies.
func (p *auditPass) write(obj *unstructured.Unstructured, resource string) policies.Write {
	w := policies.Write{Object: obj.Object, Resource: metav1.GroupVersionResource{Resource: resource}}
	if ns := obj.GetNamespace(); ns != "" {
		w.NamespaceLabels = p.namespaceLabels[ns]
	}
	return w
}

// evaluateComposition records every violation of a composition: the last pass's
// verdict when nothing it was judged from changed, else a new one, judged in the
// namespace's lane. A verdict is remembered only when complete: the definition's chart
// was at hand (keep).
func (p *auditPass) evaluateComposition(ctx context.Context, obj *unstructured.Unstructured, r *policies.Request, keep bool) {
	uid := obj.GetUID()
	p.seen[uid] = true
	inputs, digested := inputsOf(obj.Object, r.NamespaceLabels, r, p.capabilitiesDigest)
	now := time.Now()
	if digested {
		if found, ok := p.verdicts.recall(uid, inputs, p.engine, now); ok {
			compositionsAudited.WithLabelValues("unchanged").Inc()
			p.record(obj, found)
			return
		}
	}
	compositionsAudited.WithLabelValues("judged").Inc()
	found := p.Judge.Policies(policies.ForPurpose(policies.WithLane(ctx, policies.CompositionsLane(obj.GetNamespace())), policies.PurposeAudit), r)
	if digested && keep {
		v := verdict{inputs: inputs, engine: p.engine, found: found}
		if slices.ContainsFunc(found, func(v policies.Violation) bool { return v.Failed }) {
			v.expires = now.Add(failedVerdictTTL)
		}
		p.verdicts.keep(uid, v)
	}
	p.record(obj, found)
}

// capabilitiesDigest names caps: the Kubernetes version and every API served.
func capabilitiesDigest(caps *chartcommon.Capabilities) string {
	h := sha256.New()
	fmt.Fprintln(h, caps.KubeVersion.Version)
	for _, v := range caps.APIVersions {
		fmt.Fprintln(h, v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// evaluate records every violation of obj.
func (p *auditPass) evaluate(ctx context.Context, obj *unstructured.Unstructured, r *policies.Request) {
	p.record(obj, p.Judge.Policies(ctx, r))
}

// record counts obj and adds its violations to the findings.
func (p *auditPass) record(obj *unstructured.Unstructured, found []policies.Violation) {
	p.objects++
	for _, v := range found {
		p.findings.add(v.Policy, policyv1alpha1.AuditViolation{
			APIVersion: obj.GetAPIVersion(),
			Kind:       obj.GetKind(),
			Namespace:  obj.GetNamespace(),
			Name:       obj.GetName(),
			Message:    auditMessage(v),
		})
	}
}

// writeStatus records the findings in every enforced CompositionPolicy whose status
// does not already say them.
func (a *Auditor) writeStatus(ctx context.Context, enforced map[string]bool, findings *auditFindings, now metav1.Time) error {
	list := &policyv1alpha1.CompositionPolicyList{}
	if err := a.Reader.List(ctx, list); err != nil {
		return fmt.Errorf("listing CompositionPolicies: %w", err)
	}
	var errs []error
	for i := range list.Items {
		obj := &list.Items[i]
		if !enforced[obj.Name] || !obj.DeletionTimestamp.IsZero() {
			continue
		}
		desired, write := auditUpdate(obj.Status.Audit, findings.status(obj.Name), now)
		if !write {
			continue
		}
		before := obj.DeepCopy()
		obj.Status.Audit = desired
		if err := a.Client.Status().Patch(ctx, obj, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("writing the audit status of CompositionPolicy %s: %w", obj.Name, err))
		}
	}
	return errors.Join(errs...)
}

// auditUpdate returns the audit status to write and whether to write it: when the
// findings differ from current, or current's lastRunTime is older than
// auditHeartbeat (or was never set).
func auditUpdate(current, found policyv1alpha1.AuditStatus, now metav1.Time) (policyv1alpha1.AuditStatus, bool) {
	found.LastRunTime = &now
	if len(found.Examples) == 0 {
		found.Examples = nil
	}
	same := current.ViolationCount == found.ViolationCount &&
		len(current.Examples) == len(found.Examples) &&
		(len(found.Examples) == 0 || equality.Semantic.DeepEqual(current.Examples, found.Examples))
	fresh := current.LastRunTime != nil && now.Sub(current.LastRunTime.Time) < auditHeartbeat
	return found, !same || !fresh
}

// auditFindings collects, per policy, the number of violations and the first
// MaxAuditExamples of them in example order, in memory bounded by the examples.
type auditFindings struct {
	byPolicy map[string]*policyFindings
}

type policyFindings struct {
	count    int64
	examples []policyv1alpha1.AuditViolation // sorted, at most MaxAuditExamples
}

func newAuditFindings() *auditFindings {
	return &auditFindings{byPolicy: map[string]*policyFindings{}}
}

func (f *auditFindings) add(policy string, v policyv1alpha1.AuditViolation) {
	pf := f.byPolicy[policy]
	if pf == nil {
		pf = &policyFindings{}
		f.byPolicy[policy] = pf
	}
	pf.count++
	i, _ := slices.BinarySearchFunc(pf.examples, v, compareAuditViolations)
	if i >= policyv1alpha1.MaxAuditExamples {
		return
	}
	pf.examples = slices.Insert(pf.examples, i, v)
	if len(pf.examples) > policyv1alpha1.MaxAuditExamples {
		pf.examples = pf.examples[:policyv1alpha1.MaxAuditExamples]
	}
}

// status is what the audit found for policy: no violations is count 0 and no
// examples.
func (f *auditFindings) status(policy string) policyv1alpha1.AuditStatus {
	pf := f.byPolicy[policy]
	if pf == nil {
		return policyv1alpha1.AuditStatus{}
	}
	count := int32(min(pf.count, math.MaxInt32))
	return policyv1alpha1.AuditStatus{ViolationCount: count, Examples: slices.Clone(pf.examples)}
}

// compareAuditViolations orders examples by namespace and name, then by what else
// tells them apart, so that the examples kept never depend on listing order.
func compareAuditViolations(a, b policyv1alpha1.AuditViolation) int {
	return cmp.Or(
		strings.Compare(a.Namespace, b.Namespace),
		strings.Compare(a.Name, b.Name),
		strings.Compare(a.Kind, b.Kind),
		strings.Compare(a.APIVersion, b.APIVersion),
		strings.Compare(a.Message, b.Message),
	)
}

// auditMessage is the violation as the caller would see it, without the policy's
// name (the status is the policy's own), shortened to maxAuditMessage bytes.
func auditMessage(v policies.Violation) string {
	where := strings.TrimSpace(v.Object + " " + v.Path)
	msg := strings.Join(strings.Fields(v.Message), " ")
	if where != "" {
		msg = where + ": " + msg
	}
	if v.ID != "" && v.ID != v.Policy {
		msg += " [" + v.ID + "]"
	}
	if len(msg) <= maxAuditMessage {
		return msg
	}
	cut := maxAuditMessage - len("...")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "..."
}

// listPages lists page by page into a fresh list from newList, calling each after
// every page.
func listPages[L client.ObjectList](ctx context.Context, r client.Reader, newList func() L, each func(L) error, what string, opts ...client.ListOption) error {
	cont := ""
	for {
		list := newList()
		pageOpts := append(slices.Clip(opts), client.Limit(auditPageSize), client.Continue(cont))
		if err := r.List(ctx, list, pageOpts...); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := each(list); err != nil {
			return err
		}
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}
