package policies

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// SetConstraints makes lib the Gatekeeper constraints of origin in force (OriginObject:
// the cluster's ConstraintTemplates and Constraints; OriginDir: --policy-dir files), in
// place of that origin's previous ones, in one swap. nil removes them. A library the
// same as the one in force (gatekeeper.Library.Same: rebuilt from what was parsed and
// compiled before, as the constraints controller does every resync) changes nothing,
// the engine's Version included: verdicts found under it still hold.
func (e *Engine) SetConstraints(origin Origin, lib *gatekeeper.Library) {
	e.mu.Lock()
	defer e.mu.Unlock()
	next := map[Origin]*gatekeeper.Library{}
	if cur := e.constraints.Load(); cur != nil {
		if (*cur)[origin].Same(lib) {
			return
		}
		maps.Copy(next, *cur)
	} else if lib.Empty() {
		return
	}
	if lib.Empty() {
		delete(next, origin)
	} else {
		next[origin] = lib
	}
	e.constraints.Store(&next)
}

// ExpectConstraints says that the constraints of origin are being read: until
// ConstraintsLoaded, the writes of compositions are refused (they would be judged
// without them) and ConstraintsPending is true, so that controllers wait to install.
func (e *Engine) ExpectConstraints(origin Origin) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pending = append(e.pending, origin)
	e.hasPending.Store(true)
}

// ConstraintsLoaded says that the constraints of origin have been read once.
func (e *Engine) ConstraintsLoaded(origin Origin) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pending = slices.DeleteFunc(e.pending, func(o Origin) bool { return o == origin })
	e.hasPending.Store(len(e.pending) > 0)
}

// ConstraintsPending reports whether some constraints have not been read yet.
func (e *Engine) ConstraintsPending() bool { return e.hasPending.Load() }

// pendingViolation refuses a composition's write while constraints are being read.
func (e *Engine) pendingViolation() Violation {
	action := v1alpha1.EnforcementDeny
	msg := "Compositor has not read the Gatekeeper constraints yet: try again in a moment"
	if e.opts.FailOpen {
		action, msg = v1alpha1.EnforcementWarn, msg+" (admitted: policies fail open)"
	}
	return Violation{Message: msg, Source: "constraints", Policy: "constraints", Action: action, Failed: true}
}

// Constraints returns the Gatekeeper constraints of origin in force.
func (e *Engine) Constraints(origin Origin) *gatekeeper.Library {
	if cur := e.constraints.Load(); cur != nil {
		return (*cur)[origin]
	}
	return nil
}

// constraintLibraries are the libraries in force, by origin.
func (e *Engine) constraintLibraries() []*gatekeeper.Library {
	cur := e.constraints.Load()
	if cur == nil || len(*cur) == 0 {
		return nil
	}
	origins := slices.Sorted(maps.Keys(*cur))
	out := make([]*gatekeeper.Library, 0, len(origins))
	for _, o := range origins {
		out = append(out, (*cur)[o])
	}
	return out
}

// CompileTemplate compiles a ConstraintTemplate with the capabilities policies have.
func CompileTemplate(ctx context.Context, t *gatekeeper.TemplateSource) (*gatekeeper.Template, error) {
	return gatekeeper.Compile(ctx, t, gatekeeper.Options{Capabilities: Capabilities()})
}

// reviewConstraints runs the Gatekeeper constraints on the request's own object and,
// for a composition, on each object its chart renders and on the Pod each rendered
// workload implies. render renders once, on demand. When the chart does not render,
// lib's constraints are returned as unrendered, with render's error, rather than
// judged: the caller stands for those of every library at once (renderFailures).
func (e *Engine) reviewConstraints(ctx context.Context, lib *gatekeeper.Library, r *Request, rr *Renderer, render func() ([]RenderedObject, error)) (out []Violation, unrendered []*gatekeeper.Constraint, renderErr error) {
	if r.Operation == "DELETE" {
		// As Gatekeeper by default: a deletion is not judged, so that an object
		// written before a constraint can always go.
		return nil, nil, nil
	}
	req := &gatekeeper.Request{Operation: r.Operation, UserInfo: userInfoDoc(r)}
	var nsObject map[string]any
	if r.Namespace != "" {
		labels := make(map[string]any, len(r.NamespaceLabels))
		for k, v := range r.NamespaceLabels {
			labels[k] = v
		}
		nsObject = map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": r.Namespace, "labels": labels}}
	}
	self := &gatekeeper.Subject{
		Object: r.Object, OldObject: r.OldObject, Name: r.Name,
		Group: r.Kind.Group, Version: r.Kind.Version, Kind: r.Kind.Kind,
		Namespace: r.Namespace, NamespaceObject: nsObject,
	}
	if self.Object == nil {
		self.Object = r.OldObject
	}
	if self.Object != nil && !r.Uninstall {
		out = append(out, e.constraintViolations(ctx, lib.Review(ctx, self, req), "")...)
	}
	if (r.Chart == nil && r.Rendered == nil) || r.Object == nil || r.schemaFailed {
		return out, nil, nil
	}
	if ctx.Err() != nil {
		return append(out, e.notReached(ctx, r, lib)...), nil, nil
	}
	objs, err := render()
	if err != nil {
		return out, lib.Constraints(), renderError(err)
	}
	subjects := make([]*gatekeeper.Subject, 0, len(objs))
	refs := make([]string, 0, len(objs))
	for _, o := range objs {
		s := r.placed(o.Object)
		s.NamespaceObject = nsObject
		if s.Namespace != r.Namespace {
			s.NamespaceObject = nil
		}
		subjects, refs = append(subjects, s), append(refs, o.Ref())
	}
	// A referential template that opted in sees the release's own objects.
	req.Inventory = gatekeeper.Inventory(subjects)
	// On an update, an object that was there is an UPDATE with its old version, a new
	// one a CREATE, when a template can tell (and the old objects can be known).
	var previous map[objectID]map[string]any
	if r.Operation == "UPDATE" && lib.ReadsHistory() {
		previous = previousObjects(ctx, r, objs, e.renders, rr)
	}
	for i, s := range subjects {
		if ctx.Err() != nil {
			break
		}
		objReq := req
		if previous != nil {
			objReq = &gatekeeper.Request{Operation: "CREATE", UserInfo: req.UserInfo, Inventory: req.Inventory}
			if old, ok := previous[idOf(s)]; ok {
				objReq.Operation, s.OldObject = "UPDATE", old
			}
		}
		out = append(out, e.constraintViolations(ctx, lib.Review(ctx, s, objReq), refs[i])...)
		if pod := gatekeeper.Expand(s); pod != nil {
			// Pods are never updated through their workload: they are created from its
			// template, on a rollout, a scale-up or a reschedule. So the Pod a workload
			// implies is a CREATE, whatever the write; as an UPDATE, a template that
			// leaves updates alone (the pod-security library's is_update) would let a
			// composition's update make its pods privileged, with nothing judging the
			// Pods the workload's controller then creates.
			podReq := &gatekeeper.Request{Operation: "CREATE", UserInfo: req.UserInfo, Inventory: req.Inventory}
			out = append(out, e.constraintViolations(ctx, lib.Review(ctx, pod, podReq), refs[i]+" (its pod template)")...)
		}
	}
	if ctx.Err() != nil {
		out = append(out, e.notReached(ctx, r, lib)...)
	}
	return out, nil, nil
}

// objectID identifies an object across two renderings: group, kind, namespace, name.
type objectID struct{ group, kind, namespace, name string }

func idOf(s *gatekeeper.Subject) objectID {
	md, _ := s.Object["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	return objectID{s.Group, s.Kind, s.Namespace, name}
}

// previousObjects are the release's objects before an update, by identity: those the
// request carries (the install gate's release), else the same rendering when the spec
// did not change, else the old spec's render (oldRender). nil when they
// cannot be known: the objects are then reviewed as UPDATEs without old versions.
func previousObjects(ctx context.Context, r *Request, current []RenderedObject, memo *renderMemo, rr *Renderer) map[objectID]map[string]any {
	prev := r.Previous
	if prev == nil && r.OldObject != nil {
		oldSpec, _ := r.OldObject["spec"].(map[string]any)
		if reflect.DeepEqual(oldSpec, r.Spec()) {
			prev = current
		} else if r.Chart != nil {
			prev = oldRender(ctx, r, oldSpec, memo, rr)
		}
	}
	if prev == nil {
		return nil
	}
	out := make(map[objectID]map[string]any, len(prev))
	for _, o := range prev {
		s := r.placed(o.Object)
		out[idOf(s)] = s.Object
	}
	return out
}

// oldRender is what r's old spec rendered: remembered, or rendered again; nil when it
// does not render. It renders as the release was last installed or upgraded (at the
// revision the old status says is installed, with this write's capabilities): an old
// version of generation 1 is the spec the composition was created with, which Helm
// installed; a later one came with an update, which Helm upgraded to. The memo only
// spares the render: what it gives is what rendering gives, whatever it holds.
func oldRender(ctx context.Context, r *Request, oldSpec map[string]any, memo *renderMemo, rr *Renderer) []RenderedObject {
	opts := RenderOptions{ReleaseName: cmp.Or(r.ReleaseName, r.Name), Namespace: r.Namespace, IsUpgrade: true,
		Revision: InstalledRevision(r.OldObject), Capabilities: r.Capabilities}
	if md, _ := r.OldObject["metadata"].(map[string]any); generationOf(md) == 1 {
		opts.IsUpgrade = false
	}
	if key, ok := keyOf(r.ChartDigest, oldSpec, boundedBy(opts, rr)); ok {
		if objs, ok := memo.recall(key); ok {
			return objs
		}
	}
	objs, err := rr.Render(ctx, r.Chart, r.ChartDigest, oldSpec, opts)
	if err != nil {
		return nil
	}
	return objs
}

// generationOf is metadata.generation, 0 when it is not a number.
func generationOf(md map[string]any) int64 {
	switch g := md["generation"].(type) {
	case int64:
		return g
	case float64:
		return int64(g)
	case json.Number:
		n, _ := g.Int64()
		return n
	}
	return 0
}

// notReached stands for every constraint of lib the deadline came before: each
// denies (or warns) as a constraint that could not be evaluated does. Those that
// cannot judge an object in r's namespace are counted, by action, not named: a writer
// who makes its review run long learns no other namespace's constraints.
func (e *Engine) notReached(ctx context.Context, r *Request, lib *gatekeeper.Library) []Violation {
	var out []Violation
	elsewhere := map[v1alpha1.EnforcementAction]int{}
	for _, c := range lib.Constraints() {
		if r.Namespace == "" || c.JudgesNamespace(r.Namespace, r.NamespaceLabels) {
			out = append(out, e.constraintFailure(ctx, c, errNotReached))
			continue
		}
		elsewhere[v1alpha1.EnforcementAction(c.Action)]++
	}
	for _, declared := range []v1alpha1.EnforcementAction{v1alpha1.EnforcementDeny, v1alpha1.EnforcementWarn, v1alpha1.EnforcementDryRun} {
		n := elsewhere[declared]
		if n == 0 {
			continue
		}
		action, msg := e.failureOf(ctx, declared, errNotReached)
		what := "1 constraint"
		if n > 1 {
			what = fmt.Sprintf("%d constraints", n)
		}
		out = append(out, Violation{Message: what + " scoped to other namespaces " + msg, Source: "constraints", Policy: "constraints", Action: action, Failed: true})
	}
	return out
}

// withNamespace is obj with metadata.namespace set, copied where it changes.
func withNamespace(obj map[string]any, namespace string) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	md := map[string]any{}
	if m, ok := obj["metadata"].(map[string]any); ok {
		for k, v := range m {
			md[k] = v
		}
	}
	md["namespace"] = namespace
	if namespace == "" {
		delete(md, "namespace")
	}
	out["metadata"] = md
	return out
}

// placed is rendered object obj as the API server will hold it, and as a template
// sees it: an object of a cluster-scoped kind has no namespace (the API server drops
// one the chart wrote), any other without one is in the release's namespace (where
// Helm's kube client puts it).
func (r *Request) placed(obj map[string]any) *gatekeeper.Subject {
	s := gatekeeper.SubjectOf(obj)
	if ns := r.namespaceOf(s); ns != s.Namespace {
		s.Namespace, s.Object = ns, withNamespace(obj, ns)
	}
	return s
}

// namespaceOf is the namespace the API server will hold s's object in (see placed).
func (r *Request) namespaceOf(s *gatekeeper.Subject) string {
	switch {
	case r.clusterScoped(s):
		return ""
	case s.Namespace == "":
		return r.Namespace
	}
	return s.Namespace
}

// keepToNamespace splits objs into those that stay in r's namespace (or are of a
// cluster-scoped kind) and a denial for each of the others, which the install gate
// never installs. Those are judged by no policy or constraint: what is in force in
// another namespace is not the writer's to learn, and nothing of it would be applied.
func (r *Request) keepToNamespace(objs []RenderedObject) ([]RenderedObject, []Violation) {
	if r.Namespace == "" {
		return objs, nil
	}
	var kept []RenderedObject
	var refused []Violation
	for i, o := range objs {
		ns := r.namespaceOf(gatekeeper.SubjectOf(o.Object))
		if ns == "" || ns == r.Namespace {
			if refused != nil {
				kept = append(kept, o)
			}
			continue
		}
		if refused == nil {
			kept = append(make([]RenderedObject, 0, len(objs)), objs[:i]...)
		}
		refused = append(refused, Violation{
			Object: o.Ref(), Source: SourceInstallGate, Policy: SourceInstallGate, Action: v1alpha1.EnforcementDeny,
			Message: fmt.Sprintf("rendered into namespace %s, outside the composition's namespace %s: nothing is installed outside it", ns, r.Namespace),
		})
	}
	if refused == nil {
		return objs, nil
	}
	return kept, refused
}

// SourceInstallGate is the Source of a violation of the install gate's own rules,
// found before installing.
const SourceInstallGate = "install gate"

// clusterScoped tells a rendered object Helm creates without a namespace: one of a
// built-in cluster-scoped kind or of a kind the definition allows cluster-wide.
func (r *Request) clusterScoped(s *gatekeeper.Subject) bool {
	return clusterScoped[[2]string{s.Group, s.Kind}] || r.ClusterScoped[schema.GroupKind{Group: s.Group, Kind: s.Kind}]
}

// clusterScoped are the built-in kinds with no namespace, which Helm creates without
// one; every other rendered object without a namespace lands in the release's.
var clusterScoped = map[[2]string]bool{
	{"", "Namespace"}: true, {"", "Node"}: true, {"", "PersistentVolume"}: true,
	{"rbac.authorization.k8s.io", "ClusterRole"}: true, {"rbac.authorization.k8s.io", "ClusterRoleBinding"}: true,
	{"apiextensions.k8s.io", "CustomResourceDefinition"}: true, {"storage.k8s.io", "StorageClass"}: true,
	{"scheduling.k8s.io", "PriorityClass"}: true, {"networking.k8s.io", "IngressClass"}: true,
	{"admissionregistration.k8s.io", "ValidatingWebhookConfiguration"}: true,
	{"admissionregistration.k8s.io", "MutatingWebhookConfiguration"}:   true,
}

// constraintViolations turns a review's results into violations, naming the
// constraint ("constraint K8sRequiredLabels/must-have-owner") and the rendered object.
func (e *Engine) constraintViolations(ctx context.Context, results []gatekeeper.Result, object string) []Violation {
	out := make([]Violation, 0, len(results))
	for _, res := range results {
		if res.Err != nil {
			v := e.constraintFailure(ctx, res.Constraint, res.Err)
			v.Object = object
			out = append(out, v)
			continue
		}
		id := constraintID(res.Constraint)
		out = append(out, Violation{
			Message: res.Msg, Source: "constraint " + id, Policy: id, Object: object,
			Action: v1alpha1.EnforcementAction(res.Constraint.Action),
		})
	}
	return out
}

func constraintID(c *gatekeeper.Constraint) string { return c.Kind + "/" + c.Name }

// constraintFailure is the violation standing for a constraint that could not be
// evaluated: it denies unless the engine fails open or the constraint only warns.
func (e *Engine) constraintFailure(ctx context.Context, c *gatekeeper.Constraint, err error) Violation {
	action, msg := e.failureOf(ctx, v1alpha1.EnforcementAction(c.Action), err)
	id := constraintID(c)
	logr.FromContextOrDiscard(ctx).Info("constraint evaluation failed", "constraint", id, "error", err.Error())
	return Violation{Message: msg, Source: "constraint " + id, Policy: id, Action: action, Failed: true}
}

// renderFailures stands for the constraints that a chart that does not render (err)
// kept from the objects it would create: one violation per outcome naming them, rather
// than the same error once per constraint. Each constraint fails as constraintFailure
// has it (a deny constraint denies, or warns when policies fail open; a warn or dryrun
// one keeps its action), so the request is denied, warned about or admitted as with
// one violation per constraint, and a dryrun constraint is never named to the caller.
func (e *Engine) renderFailures(ctx context.Context, r *Request, cs []*gatekeeper.Constraint, err error) []Violation {
	if len(cs) == 0 {
		return nil
	}
	type outcome struct {
		action v1alpha1.EnforcementAction
		note   string
	}
	var outcomes []outcome
	ids := map[outcome][]string{}
	// Constraints scoped to other namespaces are counted, not named: the writer
	// learns of no constraint that could not judge an object in its own namespace.
	elsewhere := map[outcome]map[string]bool{}
	var all []string
	for _, c := range cs {
		declared := v1alpha1.EnforcementAction(c.Action)
		action := e.failureAction(declared)
		o := outcome{action, failureNote(declared, action)}
		if _, seen := elsewhere[o]; !seen {
			outcomes = append(outcomes, o)
			elsewhere[o] = map[string]bool{}
		}
		if r.Namespace == "" || c.JudgesNamespace(r.Namespace, r.NamespaceLabels) {
			ids[o] = append(ids[o], constraintID(c))
		} else {
			elsewhere[o][constraintID(c)] = true
		}
		all = append(all, constraintID(c))
	}
	logr.FromContextOrDiscard(ctx).Info("constraints not evaluated: the chart does not render", "constraints", all, "error", err.Error())
	out := make([]Violation, 0, len(outcomes))
	for _, o := range outcomes {
		names := ids[o]
		slices.Sort(names)
		names = slices.Compact(names) // one constraint may come from two origins
		for _, id := range names {
			delete(elsewhere[o], id)
		}
		var what string
		switch n := len(elsewhere[o]); {
		case len(names) == 0 && n == 1:
			what = "1 constraint scoped to other namespaces was"
		case len(names) == 0:
			what = fmt.Sprintf("%d constraints scoped to other namespaces were", n)
		case n > 0:
			what = fmt.Sprintf("constraints %s and %d more scoped to other namespaces were", strings.Join(names, ", "), n)
		case len(names) == 1:
			what = "constraint " + names[0] + " was"
		default:
			what = "constraints " + strings.Join(names, ", ") + " were"
		}
		out = append(out, Violation{
			Message: fmt.Sprintf("%s not evaluated: %v%s", what, err, o.note),
			Source:  "constraints", Policy: "constraints", Action: o.action, Failed: true,
		})
	}
	return out
}

// userInfoDoc is input.review.userInfo: who made the request or, at the install
// gate, the composition's author.
func userInfoDoc(r *Request) map[string]any {
	groups := make([]any, len(r.UserInfo.Groups))
	for i, g := range r.UserInfo.Groups {
		groups[i] = g
	}
	extra := make(map[string]any, len(r.UserInfo.Extra))
	for k, vs := range r.UserInfo.Extra {
		l := make([]any, len(vs))
		for i, v := range vs {
			l[i] = v
		}
		extra[k] = l
	}
	return map[string]any{"username": r.UserInfo.Username, "uid": r.UserInfo.UID, "groups": groups, "extra": extra}
}
