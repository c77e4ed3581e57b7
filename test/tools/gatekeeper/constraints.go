package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	templatesv1 "github.com/open-policy-agent/frameworks/constraint/pkg/apis/templates/v1"
	"github.com/open-policy-agent/frameworks/constraint/pkg/types"
	expansionunversioned "github.com/open-policy-agent/gatekeeper/v3/apis/expansion/unversioned"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/expansion"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/match"
	mutationtypes "github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/types"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/target"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// With -constraints DIR the peer run compares the engines on a library of Gatekeeper
// ConstraintTemplates and Constraints (test/bench/constraints), on top of the five
// policies, as each engine meets a composition:
//
//   - Compositor judges the composition at its admission: Judge.Decide renders its
//     chart and runs every constraint that matches on the composition, on each
//     rendered object and on the Pod each rendered workload implies (and the chart's
//     schema, the five policies and the built-ins, as in the plain run).
//   - Gatekeeper judges each object as the API server sends it: the composition's
//     create, then, when Helm installs the release, the create of each rendered
//     object. Its webhook decodes each request, expands a Deployment into the Pod its
//     template implies (an ExpansionTemplate, as Gatekeeper documents for pod
//     policies), reviews the object and the Pod and aggregates the responses, as
//     pkg/webhook's reviewRequest does. The five policies are its templates too.
//
// Helm's render is Compositor's cost and not Gatekeeper's (Helm renders on the client),
// so Compositor is also timed with the objects handed to it already rendered, as its
// install gate does: that is the two engines' evaluation alone.

// helmUser is who creates a release's objects: the composition controller.
var helmUser = authenticationv1.UserInfo{Username: "system:serviceaccount:compositor-system:compositor", Groups: []string{"system:serviceaccounts", "system:authenticated"}}

// expansionTemplateName names the ExpansionTemplate of the Gatekeeper side, which
// prefixes the messages of violations on the Pods it implies.
const expansionTemplateName = "expand-workloads"

// constraintPeers are both engines with the five policies and the library, and the
// compositions they judge.
type constraintPeers struct {
	compositor *compositorSide
	gatekeeper *gatekeeperSide
	expander   *expansion.System
	objects    *objects
	// translated are the constraint kinds of the five policies: their findings are
	// named by policy, as Compositor names them.
	translated             map[string]bool
	policies               int
	templates, constraints int
	deserializer           runtime.Decoder
	admittedRendered       []policies.RenderedObject
	admittedRelease        []*admissionv1.AdmissionRequest
}

// setupConstraints builds both engines with the policies of cfg.policyDir and the
// library of cfg.constraintDir, and the compositions of this mode.
func setupConstraints(ctx context.Context, cfg config) (*constraintPeers, error) {
	dir, err := policies.LoadDir(cfg.policyDir)
	if err != nil {
		return nil, err
	}
	if err := dir.Err(); err != nil {
		return nil, err
	}
	p := &constraintPeers{translated: map[string]bool{}, policies: len(dir.Policies)}
	var ts []*translated
	for _, pol := range dir.Policies {
		t, err := translate(pol)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
		p.translated[t.Constraint.GetKind()] = true
	}
	tmpls, cons, err := readLibrary(cfg.constraintDir)
	if err != nil {
		return nil, err
	}
	p.templates, p.constraints = len(tmpls), len(cons)
	if p.compositor, err = newCompositorSide(ctx, dir.Policies, cfg.chartDir); err != nil {
		return nil, fmt.Errorf("compositor: %w", err)
	}
	lib, err := compileLibrary(ctx, tmpls, cons)
	if err != nil {
		return nil, fmt.Errorf("compositor: %w", err)
	}
	p.compositor.judge.Engine().SetConstraints(policies.OriginObject, lib)
	if p.gatekeeper, err = newGatekeeperSide(ctx, ts); err != nil {
		return nil, fmt.Errorf("gatekeeper: %w", err)
	}
	if err := p.gatekeeper.addLibrary(ctx, tmpls, cons); err != nil {
		return nil, fmt.Errorf("gatekeeper: %w", err)
	}
	if p.expander, err = workloadExpander(); err != nil {
		return nil, fmt.Errorf("gatekeeper: %w", err)
	}
	p.deserializer = serializer.NewCodecFactory(runtime.NewScheme()).UniversalDeserializer()
	if p.objects, err = loadConstraintObjects(cfg.values); err != nil {
		return nil, err
	}
	if p.admittedRendered, err = p.render(p.objects.Admitted); err != nil {
		return nil, err
	}
	if p.admittedRelease, err = p.release(p.objects.Admitted); err != nil {
		return nil, err
	}
	return p, nil
}

// readLibrary reads the templates and constraints of every *.yaml file of dir.
func readLibrary(dir string) (tmpls, cons []*unstructured.Unstructured, err error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, nil, err
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no *.yaml file in %s", dir)
	}
	slices.Sort(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		objs, err := gatekeeper.DecodeObjects(data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, obj := range objs {
			u := &unstructured.Unstructured{Object: obj}
			switch gvk := u.GroupVersionKind(); {
			case gvk.Group == gatekeeper.TemplatesGroup && gvk.Kind == "ConstraintTemplate":
				tmpls = append(tmpls, u)
			case gvk.Group == gatekeeper.ConstraintsGroup:
				cons = append(cons, u)
			default:
				return nil, nil, fmt.Errorf("%s: %s is neither a ConstraintTemplate nor a Constraint", f, gvk)
			}
		}
	}
	return tmpls, cons, nil
}

// compileLibrary compiles the library as Compositor's constraint controller does.
func compileLibrary(ctx context.Context, tmpls, cons []*unstructured.Unstructured) (*gatekeeper.Library, error) {
	var compiled []*gatekeeper.Template
	byKind := map[string]*gatekeeper.Template{}
	for _, u := range tmpls {
		src, err := gatekeeper.TemplateFromObject(u.Object)
		if err != nil {
			return nil, err
		}
		t, err := policies.CompileTemplate(ctx, src)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", u.GetName(), err)
		}
		compiled = append(compiled, t)
		byKind[t.Kind] = t
	}
	var parsed []*gatekeeper.Constraint
	for _, u := range cons {
		c, err := gatekeeper.ParseConstraint(u.Object)
		if err != nil {
			return nil, err
		}
		t := byKind[c.Kind]
		if t == nil {
			return nil, fmt.Errorf("constraint %s: no template of kind %s", c.Name, c.Kind)
		}
		if err := t.CheckParameters(u.Object); err != nil {
			return nil, err
		}
		parsed = append(parsed, c)
	}
	lib := gatekeeper.NewLibrary(compiled, parsed)
	if n := len(lib.Constraints()); n != len(cons) {
		return nil, fmt.Errorf("%d of %d constraints enforced", n, len(cons))
	}
	return lib, nil
}

// addLibrary adds the templates, converted to the version-independent form as gator
// reads them, and the constraints to the client.
func (g *gatekeeperSide) addLibrary(ctx context.Context, tmpls, cons []*unstructured.Unstructured) error {
	for _, u := range tmpls {
		raw, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		v1 := &templatesv1.ConstraintTemplate{}
		if err := json.Unmarshal(raw, v1); err != nil {
			return fmt.Errorf("template %s: %w", u.GetName(), err)
		}
		t, err := v1.ToVersionless()
		if err != nil {
			return fmt.Errorf("template %s: %w", u.GetName(), err)
		}
		if _, err := g.client.AddTemplate(ctx, t); err != nil {
			return fmt.Errorf("template %s: %w", u.GetName(), err)
		}
	}
	for _, u := range cons {
		if _, err := g.client.AddConstraint(ctx, u.DeepCopy()); err != nil {
			return fmt.Errorf("constraint %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// workloadExpander is Gatekeeper's expansion system with one ExpansionTemplate: the
// Pod of a workload's spec.template, for the pod policies of the library.
func workloadExpander() (*expansion.System, error) {
	s := expansion.NewSystem(mutation.NewSystem(mutation.SystemOpts{}))
	err := s.UpsertTemplate(&expansionunversioned.ExpansionTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: expansionTemplateName},
		Spec: expansionunversioned.ExpansionTemplateSpec{
			ApplyTo: []match.ApplyTo{{
				Groups: []string{"apps"}, Kinds: []string{"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"}, Versions: []string{"v1"},
			}},
			TemplateSource: "spec.template",
			GeneratedGVK:   expansionunversioned.GeneratedGVK{Version: "v1", Kind: "Pod"},
		},
	})
	return s, err
}

// loadConstraintObjects are this mode's compositions: the admitted one of the plain
// run, and one whose values break as many constraints as values can (every value
// within the chart's schema, so that the chart renders): an unapproved registry, tag
// latest, pullPolicy Never, 9 replicas, a LoadBalancer on port 22, 500Gi of storage,
// a 4Gi cache, a team label out of form and a pause annotation neither true nor false.
func loadConstraintObjects(values string) (*objects, error) {
	objs, err := loadObjects(values)
	if err != nil {
		return nil, err
	}
	denied := runtime.DeepCopyJSON(objs.Admitted)
	spec := denied["spec"].(map[string]any)
	spec["replicaCount"] = int64(9)
	spec["image"] = map[string]any{"repository": "quay.io/acme/nginx", "tag": "latest", "pullPolicy": "Never"}
	spec["service"] = map[string]any{"type": "LoadBalancer", "port": int64(22)}
	spec["storage"] = map[string]any{"size": "500Gi"}
	spec["cache"] = map[string]any{"enabled": true, "maxMemory": "4Gi"}
	md := denied["metadata"].(map[string]any)
	md["labels"] = map[string]any{"team": "Payments", "tier": "web"}
	md["annotations"] = map[string]any{"krateo.io/paused": "yes"}
	objs.Denied = denied
	return objs, nil
}

// render renders the chart for composition obj as Compositor does at its admission.
func (p *constraintPeers) render(obj map[string]any) ([]policies.RenderedObject, error) {
	r := p.compositor.request(obj)
	return policies.Render(r.Chart, r.Spec(), policies.RenderOptions{ReleaseName: r.ReleaseName, Namespace: r.Namespace})
}

// release is what Gatekeeper's webhook receives for composition obj: its create, then
// the create of each object Helm installs for it, each in the release's namespace as
// the API server sets it before admission.
func (p *constraintPeers) release(obj map[string]any) ([]*admissionv1.AdmissionRequest, error) {
	first, err := p.gatekeeper.review(obj)
	if err != nil {
		return nil, err
	}
	out := []*admissionv1.AdmissionRequest{first.AdmissionRequest}
	rendered, err := p.render(obj)
	if err != nil {
		return nil, err
	}
	for _, o := range rendered {
		u := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(o.Object)}
		u.SetNamespace(namespace)
		raw, err := u.MarshalJSON()
		if err != nil {
			return nil, err
		}
		gvk := u.GroupVersionKind()
		out = append(out, &admissionv1.AdmissionRequest{
			UID:       "peer-run",
			Kind:      metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
			Resource:  metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: strings.ToLower(gvk.Kind) + "s"},
			Name:      u.GetName(),
			Namespace: namespace,
			Operation: admissionv1.Create,
			UserInfo:  helmUser,
			Object:    runtime.RawExtension{Raw: raw},
		})
	}
	return out, nil
}

// reviewRelease is Gatekeeper's webhook on each request of a release, as
// pkg/webhook's reviewRequest: decode the object for expansion, expand it, review the
// request, review each resultant as Generated and aggregate its responses into the
// request's. It returns every request's responses.
func (p *constraintPeers) reviewRelease(ctx context.Context, reqs []*admissionv1.AdmissionRequest) ([]*types.Responses, error) {
	out := make([]*types.Responses, 0, len(reqs))
	for _, req := range reqs {
		obj := &unstructured.Unstructured{}
		if _, _, err := p.deserializer.Decode(req.Object.Raw, nil, obj); err != nil {
			return nil, fmt.Errorf("decoding %s %s: %w", req.Kind.Kind, req.Name, err)
		}
		obj.SetNamespace(req.Namespace)
		obj.SetGroupVersionKind(schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind})
		resultants, err := p.expander.Expand(&mutationtypes.Mutable{Object: obj, Namespace: p.gatekeeper.namespace, Username: req.UserInfo.Username})
		if err != nil {
			return nil, err
		}
		resp, err := p.gatekeeper.check(ctx, &target.AugmentedReview{
			AdmissionRequest: req, Namespace: p.gatekeeper.namespace, Source: mutationtypes.SourceTypeOriginal, IsAdmission: true,
		})
		if err != nil {
			return nil, err
		}
		for _, res := range resultants {
			rr, err := p.gatekeeper.reviewAny(ctx, &target.AugmentedUnstructured{
				Object: *res.Obj, Namespace: p.gatekeeper.namespace, Operation: req.Operation, Source: mutationtypes.SourceTypeGenerated,
			})
			if err != nil {
				return nil, err
			}
			expansion.OverrideEnforcementAction(res.EnforcementAction, rr)
			expansion.AggregateResponses(res.TemplateName, resp, rr)
		}
		out = append(out, resp)
	}
	return out, nil
}

// gatekeeperVerdict is Gatekeeper's verdict on a composition's whole release: a
// constraint named Kind/name as Compositor names constraints (a translated policy by
// its name), the prefix the expansion puts on a Pod's messages taken off.
func (p *constraintPeers) gatekeeperVerdict(ctx context.Context, obj map[string]any) (verdict, error) {
	reqs, err := p.release(obj)
	if err != nil {
		return verdict{}, err
	}
	resps, err := p.reviewRelease(ctx, reqs)
	if err != nil {
		return verdict{}, err
	}
	prefix := fmt.Sprintf("[Implied by %s] ", expansionTemplateName)
	var v verdict
	for _, resp := range resps {
		for _, res := range resp.Results() {
			name := res.Constraint.GetName()
			if !p.translated[res.Constraint.GetKind()] {
				name = res.Constraint.GetKind() + "/" + name
			}
			f := finding{Policy: name, Message: strings.TrimPrefix(res.Msg, prefix)}
			switch res.EnforcementAction {
			case "deny":
				v.Deny = append(v.Deny, f)
			case "warn":
				v.Warn = append(v.Warn, f)
			}
		}
		v.Denied = v.Denied || denies(resp)
	}
	return v.sorted(), nil
}

// checkConstraintVerdicts compares the engines' verdicts on both compositions: the
// admitted one admitted without a finding, the denied one denied for the same
// findings. It returns how many findings they agree on for the denied one.
func (p *constraintPeers) checkConstraintVerdicts(ctx context.Context) (int, error) {
	for _, tc := range []struct {
		name       string
		obj        map[string]any
		wantDenied bool
	}{
		{"admitted composition", p.objects.Admitted, false},
		{"denied composition", p.objects.Denied, true},
	} {
		cv, err := p.compositor.verdict(ctx, tc.obj)
		if err != nil {
			return 0, fmt.Errorf("%s: compositor: %w", tc.name, err)
		}
		gv, err := p.gatekeeperVerdict(ctx, tc.obj)
		if err != nil {
			return 0, fmt.Errorf("%s: gatekeeper: %w", tc.name, err)
		}
		if cv.Denied != tc.wantDenied || gv.Denied != tc.wantDenied {
			return 0, fmt.Errorf("%s: want denied=%t, compositor says %t, gatekeeper says %t\n%s",
				tc.name, tc.wantDenied, cv.Denied, gv.Denied, compare(cv, gv))
		}
		if !slices.Equal(cv.Deny, gv.Deny) || !slices.Equal(cv.Warn, gv.Warn) {
			return 0, fmt.Errorf("%s: the engines' findings differ\n%s", tc.name, compare(cv, gv))
		}
		if !tc.wantDenied && len(cv.Deny)+len(cv.Warn) > 0 {
			return 0, fmt.Errorf("%s: findings on the admitted composition\n%s", tc.name, compare(cv, gv))
		}
		if tc.wantDenied {
			return len(cv.Deny), nil
		}
	}
	return 0, nil
}

// engines are the timed reviews of the admitted composition: Compositor's with its
// render, Compositor's with the objects already rendered, and Gatekeeper's of the
// whole release. Each fails if its engine stops admitting the composition.
func (p *constraintPeers) engines() []engine {
	rendered := p.compositor.request(p.objects.Admitted)
	prerendered := p.compositor.request(p.objects.Admitted)
	prerendered.Rendered = p.admittedRendered
	compositorReview := func(r *policies.Request) reviewFunc {
		return func(ctx context.Context) error {
			d, err := p.compositor.check(ctx, r)
			if err == nil && d.Denied() {
				err = fmt.Errorf("denied the admitted composition: %v", d.Violations)
			}
			return err
		}
	}
	return []engine{
		{"compositor", compositorReview(rendered)},
		{"compositor-prerendered", compositorReview(prerendered)},
		{"gatekeeper", func(ctx context.Context) error {
			resps, err := p.reviewRelease(ctx, p.admittedRelease)
			if err != nil {
				return err
			}
			for _, r := range resps {
				if denies(r) {
					return errors.New("denied the admitted composition")
				}
			}
			return nil
		}},
	}
}

// reviewAny is one review of any object the target handles, with the webhook's options.
func (g *gatekeeperSide) reviewAny(ctx context.Context, obj any) (*types.Responses, error) {
	return g.client.Review(ctx, obj, g.reviewOpts()...)
}

// constraintsReport is the outcome of a -constraints run; its JSON form is what -json
// prints, and what test/bench's -constraints mode reads.
type constraintsReport struct {
	Compositor            engineResult `json:"compositor"`
	CompositorPrerendered engineResult `json:"compositor_prerendered"`
	Gatekeeper            engineResult `json:"gatekeeper"`
	// Ratio is Compositor's reviews per second (render included) over Gatekeeper's.
	Ratio float64 `json:"ratio"`
	// PrerenderedRatio is the same with the objects already rendered.
	PrerenderedRatio  float64 `json:"prerendered_ratio"`
	Rounds            int     `json:"rounds"`
	DurationSeconds   float64 `json:"duration_seconds"`
	Parallel          int     `json:"parallel"`
	FrameworksVersion string  `json:"frameworks_version"`
	OPAVersion        string  `json:"opa_version"`
	GatekeeperVersion string  `json:"gatekeeper_version"`
	GoVersion         string  `json:"go_version"`
	GOMAXPROCS        int     `json:"gomaxprocs"`
	Policies          int     `json:"policies"`
	Templates         int     `json:"templates"`
	Constraints       int     `json:"constraints"`
	// Requests is how many admission requests Gatekeeper reviews per composition (the
	// composition's and each rendered object's), Expanded how many Pods it expands.
	Requests int `json:"requests"`
	Expanded int `json:"expanded"`
	// DeniedFindings is how many deny findings both engines agree on for the denied
	// composition (the admitted one has none on either).
	DeniedFindings int `json:"denied_findings"`
}

// runConstraints is the -constraints run: verdicts, then timing, then the report.
func runConstraints(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	p, err := setupConstraints(ctx, cfg)
	if err != nil {
		return err
	}
	findings, err := p.checkConstraintVerdicts(ctx)
	if err != nil {
		return fmt.Errorf("verdicts differ, nothing timed: %w", err)
	}
	expanded := 0
	for _, req := range p.admittedRelease {
		if req.Kind.Group == "apps" {
			expanded++
		}
	}
	fmt.Fprintf(stderr, "verdicts agree on %d policies and %d constraints (%d deny findings on the denied composition); timing %d rounds of %s per engine, %d goroutine(s)\n",
		p.policies, p.constraints, findings, cfg.rounds, cfg.duration, max(cfg.parallel, 1))
	engines := p.engines()
	phases, err := timeRounds(ctx, engines, cfg.rounds, cfg.duration, cfg.parallel)
	if err != nil {
		return err
	}
	base := newReport(cfg, p.policies, summarise(phases["compositor"]), summarise(phases["gatekeeper"]))
	r := constraintsReport{
		Compositor:            base.Compositor,
		CompositorPrerendered: summarise(phases["compositor-prerendered"]),
		Gatekeeper:            base.Gatekeeper,
		Ratio:                 base.Ratio,
		Rounds:                base.Rounds,
		DurationSeconds:       base.DurationSeconds,
		Parallel:              base.Parallel,
		FrameworksVersion:     base.FrameworksVersion,
		OPAVersion:            base.OPAVersion,
		GatekeeperVersion:     base.GatekeeperVersion,
		GoVersion:             base.GoVersion,
		GOMAXPROCS:            base.GOMAXPROCS,
		Policies:              p.policies,
		Templates:             p.templates,
		Constraints:           p.constraints,
		Requests:              len(p.admittedRelease),
		Expanded:              expanded,
		DeniedFindings:        findings,
	}
	r.PrerenderedRatio = round3(r.CompositorPrerendered.ReviewsPerSecond / r.Gatekeeper.ReviewsPerSecond)
	printTable(stderr, base)
	fmt.Fprintf(stderr, "compositor with the objects rendered: %.0f ns/review, %.1f reviews/s, %.1f allocs/review (%.3f× gatekeeper)\n",
		r.CompositorPrerendered.NsPerReview, r.CompositorPrerendered.ReviewsPerSecond, r.CompositorPrerendered.AllocsPerReview, r.PrerenderedRatio)
	if cfg.cpuProfile != "" {
		if err := profileEngine(ctx, engines[0], cfg.cpuProfile, cfg.profileDuration); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "CPU profile of Compositor's review alone (%s): %s\n", cfg.profileDuration, cfg.cpuProfile)
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return nil
}
