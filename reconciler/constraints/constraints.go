// Package constraints keeps the policy engine's Gatekeeper constraints in step with
// the cluster: ConstraintTemplates (templates.gatekeeper.sh) and the Constraints of
// each template's kind (constraints.gatekeeper.sh), applied unchanged.
//
// Compositor coexists with Gatekeeper. When the ConstraintTemplate CRD is absent,
// EnsureTemplateCRD creates it, labelled as Compositor's; then Compositor also creates
// each template's constraint CRD and writes the templates' status, as Gatekeeper
// would. When the CRD is Gatekeeper's, Gatekeeper keeps those, and Compositor only
// reads: both engines enforce the same constraints, Gatekeeper on the objects the API
// server receives and Compositor, earlier, on what a composition will render.
package constraints

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/compositor-dev/compositor/internal/event"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// TemplatesGVR is where ConstraintTemplates are read.
var TemplatesGVR = schema.GroupVersionResource{Group: gatekeeper.TemplatesGroup, Version: "v1", Resource: "constrainttemplates"}

// constraintVersion is the version constraints are read in; Gatekeeper serves it, and
// so do the CRDs Compositor makes.
const constraintVersion = "v1beta1"

// Events about templates.
const (
	EventTemplateRefused  = "ConstraintTemplateRefused"
	EventTemplateEnforced = "ConstraintTemplateEnforced"
	EventConstraintBad    = "ConstraintRefused"
)

// Controller loads templates and constraints into the engine. It runs on every
// replica: each replica's webhooks judge with its own engine. Writes (constraint CRDs,
// template status) are the same from every replica.
type Controller struct {
	Dynamic  dynamic.Interface
	Client   client.Client // CRDs, uncached
	Engine   *policies.Engine
	Recorder recorder.EventRecorder
	// Resync is how often kinds whose constraint CRD is not served yet are looked for
	// again (5s when zero).
	Resync time.Duration
	// ReadOnly only reads: no CRD, status, event or mirror is written.
	ReadOnly bool
	// MirrorNamespace, when set, is Compositor's namespace, where the templates and
	// constraints in force are written for the generated controllers (see Follower).
	MirrorNamespace string
	// MirrorOwner, when set, is the owner of the mirror ConfigMap (Compositor's
	// ServiceAccount, so that it goes when Compositor is uninstalled); nil when unknown.
	MirrorOwner func(context.Context) *metav1.OwnerReference

	ready atomic.Bool
	kick  chan struct{}
	// restored is the mirror's templates as this process found them, by name: a
	// template that does not compile when the process starts is enforced in the last
	// version that did, as it would have been had the process not restarted. An entry
	// goes once its template has compiled or been looked up.
	restored map[string]map[string]any
	factory  dynamicinformer.DynamicSharedInformerFactory
	// per template name: what was compiled last, and the last good version
	templates map[string]*templateState
	// constraint informers running, by kind: one for each kind a template in force
	// has, stopped when none has it any more
	informers map[string]*constraintWatch
	owned     bool // the ConstraintTemplate CRD is Compositor's
	// parsed is each constraint as last read, by UID: a sync parses and checks again
	// only the constraints that changed, or whose template did.
	parsed map[types.UID]*parsedConstraint
	// statuses are the status writes of the constraints the last sync parsed.
	statuses []func()
}

type templateState struct {
	// generation and inventory (its AnnotationInventory, which Compile reads) are
	// those of the version compiled last: a change of either compiles it again.
	generation int64
	inventory  string
	uid        types.UID
	good       *gatekeeper.Template
	goodObj    map[string]any // the source of good, trimmed, with uid and generation
	// goodGeneration is the generation good was compiled from.
	goodGeneration int64
	err            error
	// serveErr is why the constraints of good's kind cannot be served (its CRD was
	// refused): the template enforces nothing until that changes.
	serveErr error
	// schemaRefused is the spec hash of the constraint CRD with good's parameters
	// schema when the API server refused that CRD (ensureConstraintCRD).
	schemaRefused string
	// announce is the note of the event saying that the version compiled last is
	// enforced, until it is sent: once its constraints are served, so that a
	// template whose CRD is refused is not said to be enforced.
	announce string
}

// parsedConstraint is a constraint as read: parsed (which builds its parameters' Rego
// value) and its parameters checked with its template's schema (which builds a schema
// validator). Without it, every constraint was parsed and checked on every sync:
// every resync period, and on every change of any template or constraint.
type parsedConstraint struct {
	// resourceVersion is that of the object parsed: any change of the constraint,
	// annotations included (the mirror keeps them), is a new one.
	resourceVersion string
	// template is the compiled template the parameters were checked with: a template
	// that compiles again is a new one, so its constraints are checked again. Held
	// here, it is not collected, so no other template can have its address.
	template *gatekeeper.Template
	kind     string
	con      *gatekeeper.Constraint // nil when refused
	trimmed  map[string]any         // for the mirror
	// refusal is why the constraint is not enforced, "" when it is; what was reported
	// (each refusal is an event once).
	refusal string
}

// NeedLeaderElection: every replica enforces.
func (c *Controller) NeedLeaderElection() bool { return false }

// Ready is a readiness check: an error until templates and the constraints of every
// served kind have been read once, so that no request is judged without them.
func (c *Controller) Ready(_ any) error {
	if !c.ready.Load() {
		return errors.New("the Gatekeeper constraints have not been read yet")
	}
	return nil
}

// Start reads templates and constraints until ctx ends.
func (c *Controller) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("constraints")
	ctx = logr.NewContext(ctx, log)
	if c.Resync <= 0 {
		c.Resync = 5 * time.Second
	}
	c.kick = make(chan struct{}, 1)
	c.templates = map[string]*templateState{}
	c.informers = map[string]*constraintWatch{}
	c.parsed = map[types.UID]*parsedConstraint{}
	// Until templates are served (Gatekeeper's CRD, or the one serve creates), there
	// is nothing to enforce.
	for {
		_, err := c.Dynamic.Resource(TemplatesGVR).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			break
		}
		if apierrors.IsNotFound(err) {
			c.ready.Store(true)
			c.Engine.ConstraintsLoaded(policies.OriginObject)
		} else {
			log.Info("cannot list ConstraintTemplates yet", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.Resync):
		}
	}
	c.ready.Store(false)
	if !c.ReadOnly {
		owned, err := TemplateCRDOwned(ctx, c.Client)
		if err != nil {
			return err
		}
		c.owned = owned
	}
	c.restored = c.readMirrorTemplates(ctx)
	c.factory = dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
	templates := c.factory.ForResource(TemplatesGVR).Informer()
	if _, err := templates.AddEventHandler(c.handler()); err != nil {
		return err
	}
	c.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), templates.HasSynced) {
		return nil
	}
	tick := time.NewTicker(c.Resync)
	defer tick.Stop()
	for {
		complete := c.sync(ctx, templates)
		if complete && !c.ready.Load() {
			c.ready.Store(true)
			c.Engine.ConstraintsLoaded(policies.OriginObject)
			log.Info("Gatekeeper constraints loaded", "constraints", len(c.Engine.Constraints(policies.OriginObject).Constraints()))
		}
		// Statuses of the constraints parsed, written once they are in force: writing
		// them does not hold up readiness.
		for _, write := range c.statuses {
			write()
		}
		c.statuses = nil
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
			// Let a burst of changes (kubectl apply -f dir/) land as one rebuild.
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return nil
			}
		case <-tick.C:
		}
	}
}

func (c *Controller) handler() cache.ResourceEventHandler {
	kick := func() {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	}
}

// sync compiles the templates that changed, starts watching their constraints, and
// gives the engine the whole library. It reports whether every kind's constraints
// could be read.
func (c *Controller) sync(ctx context.Context, templates cache.SharedIndexInformer) bool {
	seen := map[string]bool{}
	var compiled []*gatekeeper.Template
	var mirror mirrorDoc
	complete := true
	// kinds whose constraints are not read this time: their cache entries stay
	unread := map[string]bool{}
	for _, obj := range templates.GetStore().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		seen[u.GetName()] = true
		t := c.compile(ctx, u)
		st := c.templates[u.GetName()]
		st.serveErr = nil
		if t != nil {
			served, err := c.watch(ctx, u, t)
			// Refused for good (until the template or the cluster changes): the
			// status says so, and the others go on.
			st.serveErr = err
			switch {
			case served:
				compiled = append(compiled, t)
				mirror.Templates = append(mirror.Templates, st.goodObj)
				if st.announce != "" && err == nil {
					c.event(u, corev1.EventTypeNormal, EventTemplateEnforced, st.announce)
					st.announce = ""
				}
			case err == nil:
				complete = false
				unread[t.Kind] = true
			}
		}
		c.writeStatus(ctx, u, st)
	}
	for name, st := range c.templates {
		if !seen[name] {
			delete(c.templates, name)
			if st.good != nil {
				c.deleteConstraintCRD(ctx, st.good.Kind, st.uid)
			}
		}
	}
	c.stopWatches(compiled, unread)
	var constraints []*gatekeeper.Constraint
	read := map[types.UID]bool{}
	for _, t := range compiled {
		inf, ok := c.informers[t.Kind]
		if !ok {
			continue // not served: no constraints
		}
		if !inf.HasSynced() {
			complete = false
			unread[t.Kind] = true
			continue
		}
		for _, obj := range inf.GetStore().List() {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			read[u.GetUID()] = true
			p := c.parse(ctx, u, t)
			if p.con == nil {
				continue
			}
			constraints = append(constraints, p.con)
			mirror.Constraints = append(mirror.Constraints, p.trimmed)
		}
	}
	// Constraints deleted, or of a template deleted, leave the cache.
	for uid, p := range c.parsed {
		if !read[uid] && !unread[p.kind] {
			delete(c.parsed, uid)
		}
	}
	c.Engine.SetConstraints(policies.OriginObject, gatekeeper.NewLibrary(compiled, constraints))
	c.restored = nil // every template there was has been compiled once
	if complete {
		c.writeMirror(ctx, mirror)
	}
	return complete
}

// stopWatches stops the informers of kinds no template in force has any more (the
// template deleted, its kind renamed, its CRD not Compositor's): kinds neither
// compiled nor waited for. A kind that comes back is watched again.
func (c *Controller) stopWatches(compiled []*gatekeeper.Template, unread map[string]bool) {
	kinds := map[string]bool{}
	for _, t := range compiled {
		kinds[t.Kind] = true
	}
	for kind, w := range c.informers {
		if !kinds[kind] && !unread[kind] {
			w.stop()
			delete(c.informers, kind)
		}
	}
}

// parse returns constraint u parsed and checked with t, from the cache when neither
// has changed since, and reports a new refusal.
func (c *Controller) parse(ctx context.Context, u *unstructured.Unstructured, t *gatekeeper.Template) *parsedConstraint {
	last := c.parsed[u.GetUID()]
	if last != nil && last.resourceVersion == u.GetResourceVersion() && last.template == t {
		return last
	}
	p := &parsedConstraint{resourceVersion: u.GetResourceVersion(), template: t, kind: t.Kind}
	con, err := gatekeeper.ParseConstraint(u.Object)
	if err == nil && con.Kind != t.Kind {
		// Its template's kind changed, and its CRD could not follow: the library
		// would drop it without a word.
		err = fmt.Errorf("its kind %s is not its template's, %s", con.Kind, t.Kind)
	}
	if err == nil {
		err = t.CheckParameters(u.Object)
	}
	if err != nil {
		p.refusal = fmt.Sprintf("not enforced by Compositor: %v", err)
		if last == nil || last.refusal != p.refusal {
			c.event(u, corev1.EventTypeWarning, EventConstraintBad, p.refusal)
			logr.FromContextOrDiscard(ctx).Info("constraint refused", "kind", u.GetKind(), "name", u.GetName(), "error", err.Error())
		}
	} else {
		p.con, p.trimmed = con, trimmed(u.Object)
	}
	c.parsed[u.GetUID()] = p
	c.statuses = append(c.statuses, func() { c.writeConstraintStatus(ctx, u, p.refusal) })
	return p
}

// compile compiles a template when its generation or its inventory annotation
// changed, reports the outcome, and returns the version to enforce: the last good one
// when the new one fails.
func (c *Controller) compile(ctx context.Context, u *unstructured.Unstructured) *gatekeeper.Template {
	st := c.templates[u.GetName()]
	inventory := u.GetAnnotations()[gatekeeper.AnnotationInventory]
	if st != nil && st.uid == u.GetUID() && st.generation == u.GetGeneration() && st.inventory == inventory {
		return st.good
	}
	if st == nil || st.uid != u.GetUID() {
		st = &templateState{uid: u.GetUID()}
		c.templates[u.GetName()] = st
	}
	sameSpec := st.good != nil && st.goodGeneration == u.GetGeneration()
	st.generation, st.inventory = u.GetGeneration(), inventory
	t, err := compileObject(ctx, u.Object)
	st.err = err
	if err == nil {
		st.good, st.goodObj, st.goodGeneration = t, goodObject(u.Object), u.GetGeneration()
		delete(c.restored, u.GetName())
		note := fmt.Sprintf("enforced on compositions and what they render (Rego %s)", t.RegoVersion)
		if t.HasCEL {
			note += "; its K8sNativeValidation (CEL) code is not run by Compositor, its Rego is"
		}
		st.announce = note // once its constraints can be served (sync)
		return st.good
	}
	if sameSpec {
		// Only the annotations changed, and the template is refused with them (the
		// inventory opt-in taken away): that is the administrator's decision, not a
		// regression of its code, so no earlier version stays in force.
		st.good, st.goodObj = nil, nil
	}
	if st.good == nil && !sameSpec {
		c.restore(ctx, u, st)
	}
	c.event(u, corev1.EventTypeWarning, EventTemplateRefused, "not enforced by Compositor: "+err.Error()+st.inForce())
	return st.good
}

// compileObject compiles a ConstraintTemplate held as an unstructured object.
func compileObject(ctx context.Context, obj map[string]any) (*gatekeeper.Template, error) {
	src, err := gatekeeper.TemplateFromObject(obj)
	if err != nil {
		return nil, err
	}
	return policies.CompileTemplate(ctx, src)
}

// goodObject is what the mirror keeps of a template that compiled: what compiling it
// reads, and its uid and generation, by which a process that starts again knows it
// for the last version of that very template that compiled (restore).
func goodObject(obj map[string]any) map[string]any {
	out := trimmed(obj)
	md := out["metadata"].(map[string]any)
	src, _ := obj["metadata"].(map[string]any)
	md["uid"], md["generation"] = src["uid"], src["generation"]
	return out
}

// restore makes the mirror's version of template u, when the mirror has one of the
// same uid and it compiles, the version st enforces: u does not compile now, and
// that version was in force when the process stopped.
func (c *Controller) restore(ctx context.Context, u *unstructured.Unstructured, st *templateState) {
	obj, ok := c.restored[u.GetName()]
	delete(c.restored, u.GetName())
	if !ok {
		return
	}
	md, _ := obj["metadata"].(map[string]any)
	if uid, _ := md["uid"].(string); uid == "" || types.UID(uid) != u.GetUID() {
		return
	}
	t, err := compileObject(ctx, obj)
	if err != nil {
		logr.FromContextOrDiscard(ctx).Info("the mirror's version of a template does not compile", "template", u.GetName(), "error", err.Error())
		return
	}
	generation, _ := md["generation"].(float64)
	if int64(generation) == u.GetGeneration() {
		// The same spec, refused now for its annotations (the inventory opt-in taken
		// away while the process was down): nothing stays in force.
		return
	}
	st.good, st.goodObj, st.goodGeneration = t, obj, int64(generation)
	logr.FromContextOrDiscard(ctx).Info("a template that does not compile is enforced in its last version that did, from the mirror", "template", u.GetName(), "generation", st.goodGeneration)
}

// inForce says, after why a template's version is refused, which version is enforced
// instead, if any. It is the same on every replica, however each got that version (in
// memory, or from the mirror at start: a log line says so), so that replicas writing
// the status agree.
func (st *templateState) inForce() string {
	if st.good == nil {
		return ""
	}
	return fmt.Sprintf(" (generation %d, the last version that compiled, stays in force)", st.goodGeneration)
}

// watch makes sure the constraints of t's kind are watched: with Compositor's CRD for
// them when the template CRD is Compositor's. It reports served false while they
// cannot be read yet (the API server did not answer: a later sync tries again); a
// kind not served yet (Gatekeeper has not made its CRD, or Compositor could not yet)
// has no constraints. refused says that the API server refused the kind's CRD, which
// no retry changes, and the other templates must not wait for it. A CRD that is not
// Compositor's, or whose names clash, serves nothing of t's (served false). A CRD of
// Compositor's that the API server refuses to update (the new version's schema is too
// large, say) still serves the constraints written for the version before: as
// Gatekeeper does, they stay enforced, with t's code and parameters check.
func (c *Controller) watch(ctx context.Context, u *unstructured.Unstructured, t *gatekeeper.Template) (served bool, refused error) {
	var why string
	if c.owned {
		if err := c.ensureConstraintCRD(ctx, u, t); err != nil {
			why = fmt.Sprintf("cannot serve its constraints: %v", err)
			c.event(u, corev1.EventTypeWarning, EventTemplateRefused, why)
			if errors.Is(err, errNotCompositors) || errors.Is(err, errNamesNotAccepted) {
				return false, errors.New(why)
			}
			if !crdRefused(err) {
				// A write that may pass later (a timeout, a server error) holds up
				// nothing either: the constraints of a CRD that is there are read as
				// they are, and a kind without one has none yet. Only constraints that
				// exist and cannot be read keep the library incomplete.
				why = ""
			}
		}
	}
	// kept says what a CRD that is there serves: the constraints of t's kind, or of
	// another (t's kind changed), which parse refuses one by one.
	kept := "; the constraints its CRD already serves stay enforced, with this version's code"
	if why != "" {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := c.Client.Get(ctx, client.ObjectKey{Name: constraintResource(t.Kind) + "." + gatekeeper.ConstraintsGroup}, crd)
		if err == nil && crd.Spec.Names.Kind != t.Kind {
			kept = fmt.Sprintf("; its CRD still serves kind %s, and constraints of that kind are not enforced", crd.Spec.Names.Kind)
		}
	}
	// refusedWith is refused, saying what stays enforced.
	refusedWith := func(served bool) error {
		switch {
		case why == "":
			return nil
		case served:
			return errors.New(why + kept)
		default:
			return errors.New(why)
		}
	}
	if _, ok := c.informers[t.Kind]; ok {
		return true, refusedWith(true)
	}
	gvr := schema.GroupVersionResource{Group: gatekeeper.ConstraintsGroup, Version: constraintVersion, Resource: constraintResource(t.Kind)}
	if _, err := c.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		if apierrors.IsNotFound(err) {
			return true, refusedWith(false)
		}
		return false, refusedWith(false)
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(c.Dynamic, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	if _, err := inf.AddEventHandler(c.handler()); err != nil {
		return false, refusedWith(false)
	}
	watchCtx, stop := context.WithCancel(ctx)
	go inf.Run(watchCtx.Done())
	c.informers[t.Kind] = &constraintWatch{inf, stop}
	return true, refusedWith(true)
}

// constraintWatch is the informer of one kind's constraints, and what stops it.
type constraintWatch struct {
	cache.SharedIndexInformer
	stop context.CancelFunc
}

// crdRefused tells a constraint CRD the API server refused, or one Compositor may not
// write, from a failure to reach it.
func crdRefused(err error) bool {
	if errors.Is(err, errNotCompositors) || errors.Is(err, errNamesNotAccepted) {
		return true
	}
	// Any answer of the API server that says the request itself is wrong (too large,
	// invalid, forbidden): asking again gets the same answer. A timeout, a conflict,
	// too many requests or a server error may pass.
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	switch code := status.Status().Code; code {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests:
		return false
	default:
		return code >= 400 && code < 500
	}
}

// constraintResource is the plural of a constraint kind, as Gatekeeper names it.
func constraintResource(kind string) string { return strings.ToLower(kind) }

func (c *Controller) event(u *unstructured.Unstructured, eventType, reason, msg string) {
	if c.Recorder == nil || c.ReadOnly {
		return
	}
	c.Recorder.Eventf(u, nil, eventType, reason, "Load", "%s", event.Note(msg))
}

// writeStatus records in the template's status, as Gatekeeper's does, whether it is
// enforced, and why not: the version does not compile (with the version enforced
// instead, if any), or its constraints cannot be served. Only when the CRD is
// Compositor's (Gatekeeper's status controller owns it otherwise), and only when the
// status read differs.
func (c *Controller) writeStatus(ctx context.Context, u *unstructured.Unstructured, st *templateState) {
	if !c.owned || c.ReadOnly {
		return
	}
	pod := map[string]any{
		"id":                 "compositor",
		"observedGeneration": u.GetGeneration(),
		"operations":         []any{"webhook"},
		"templateUID":        string(u.GetUID()),
	}
	var errs []any
	if st.err != nil {
		code := "compile_error"
		if errors.Is(st.err, gatekeeper.ErrUnsupported) {
			code = "unsupported"
		}
		errs = append(errs, map[string]any{"code": code, "message": st.err.Error() + st.inForce()})
	}
	if st.serveErr != nil {
		errs = append(errs, map[string]any{"code": "create_error", "message": st.serveErr.Error()})
	}
	if errs != nil {
		pod["errors"] = errs
	}
	status := map[string]any{"created": errs == nil, "byPod": []any{pod}}
	c.patchStatus(ctx, TemplatesGVR, u, status, "ConstraintTemplate")
}

// writeConstraintStatus records in a constraint's status whether Compositor enforces
// it, as Gatekeeper's does, and why not (refusal), when the CRDs are Compositor's: the
// refusal is then not only in an event, which expires.
func (c *Controller) writeConstraintStatus(ctx context.Context, u *unstructured.Unstructured, refusal string) {
	if !c.owned || c.ReadOnly {
		return
	}
	pod := map[string]any{
		"id":                 "compositor",
		"constraintUID":      string(u.GetUID()),
		"enforced":           refusal == "",
		"observedGeneration": u.GetGeneration(),
		"operations":         []any{"webhook"},
	}
	if refusal != "" {
		pod["errors"] = []any{map[string]any{"code": "invalid_constraint", "message": refusal}}
	}
	gvr := schema.GroupVersionResource{Group: gatekeeper.ConstraintsGroup, Version: constraintVersion, Resource: constraintResource(u.GetKind())}
	c.patchStatus(ctx, gvr, u, map[string]any{"byPod": []any{pod}}, u.GetKind())
}

// patchStatus makes u's status the one given, unless it is already.
func (c *Controller) patchStatus(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured, status map[string]any, what string) {
	if old, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status"); fmt.Sprint(old) == fmt.Sprint(status) {
		return
	}
	patch := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(),
		"metadata": map[string]any{"name": u.GetName()}, "status": status,
	}}
	raw, err := patch.MarshalJSON()
	if err == nil {
		_, err = c.Dynamic.Resource(gvr).Patch(ctx, u.GetName(), types.MergePatchType, raw, metav1.PatchOptions{}, "status")
	}
	if err != nil && !apierrors.IsNotFound(err) {
		logr.FromContextOrDiscard(ctx).Info("writing a status", "kind", what, "name", u.GetName(), "error", err.Error())
	}
}
