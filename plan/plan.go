// Package plan computes, offline, what moving compositions from one version of their
// chart to another would do, before anything moves (the first slice of "a plan before
// anything moves"): for each composition, the values it would have under the new
// version (the declared conversions applied, as the move's relabelling write applies
// them), whether the new version refuses them (its values.schema.json and the
// policies, as `compositor validate` and the validating webhook judge them), and
// which rendered objects the upgraded release would add, delete or change; for the
// kind, which resource types the new version's controller gains and loses.
//
// Nothing here is new machinery: conversion is package conversion on the CRD
// generators/crd builds for both versions (as `compositor convert` builds it), the
// verdict is policies.Judge, rendering is policies.Render, and the resource types are
// rbac.ResourceTypes resolved with chartlint's offline RESTMapper.
//
// A Plan carries a Hash of its canonical JSON, so that an approval can name the exact
// plan it approves. Each composition's values are stood for by a digest, keyed
// (Options.DigestKey) where the plan is kept for others to read, so that the digest
// confirms no guessed value; a View of the plan shows one namespace its own
// compositions and the plan's counts, and nothing of the others.
package plan

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartlint"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/policies"
)

// conversionWebhookURL is the conversion webhook of the CRD built in memory: planning
// never calls it, but crd.Build needs one.
const conversionWebhookURL = "https://127.0.0.1" + crd.ConvertPath

// DefaultNamespace is the namespace of compositions that name none, unless
// Options.Namespace says otherwise.
const DefaultNamespace = "default"

// ErrBadChart means a chart of Options cannot be planned with: missing, not a version
// of the other chart, a version Compositor cannot serve, a schema that does not
// translate or conversions that do not compile, or types Compositor does not grant.
var ErrBadChart = errors.New("cannot plan with the charts")

// ErrAltered means a plan's content is not what its hash (or a view's digest) says: it
// was changed after it was written.
var ErrAltered = errors.New("the plan was changed after it was written")

// ErrStale means a plan is consistent but not the one the record names (Verify): it
// is an older or newer plan, being written again.
var ErrStale = errors.New("the plan is not the one the rollout follows")

// ErrUnrecorded means no digest of a view is recorded, so the view cannot be verified
// (Verify): its own digest proves nothing.
var ErrUnrecorded = errors.New("no digest of the view is recorded")

// Digest prefixes of a composition's ValuesDigest.
const (
	// KeyedDigest is an HMAC-SHA256 under Options.DigestKey: only the key's holder can
	// tell which values it stands for.
	KeyedDigest = "hmac-sha256:"
	// PlainDigest is a SHA-256, which anyone can compute from a guessed value: only for
	// plans that print the values beside it (offline).
	PlainDigest = "sha256:"
)

// Options say what is moved where.
type Options struct {
	// From is the chart version the compositions are pinned to now; To the version
	// they move to. Both are versions of the same chart.
	From, To *chart.Chart
	// Judge judges the moved values under To: its schema and, with an Engine, the
	// policies. nil checks the schema only.
	Judge *policies.Judge
	// Mapper resolves the types the charts create for the RBAC change; nil is
	// chartlint.RESTMapper(), the kinds of a default API server and any other kind
	// guessed as a namespaced resource.
	Mapper meta.RESTMapper
	// Namespace is the namespace of compositions that name none; "" is
	// DefaultNamespace.
	Namespace string
	// Workers is how many compositions are planned at once, each on a goroutine of
	// its own; 0 is runtime.GOMAXPROCS(0). A caller that shares the process with
	// admission (the definition reconciler) passes 1 to leave the other cores to it.
	// The plan is the same whatever the number.
	Workers int
	// RenderTimeout bounds each render of a chart, as admission bounds its renders (a
	// template may loop on a value); 0 is policies.DefaultTimeout. A render past it
	// refuses its composition. Renders run in the process's policies.Sandbox when it
	// has one.
	RenderTimeout time.Duration
	// FromDigest and ToDigest identify the charts' content for the sandbox, which
	// then loads each once; empty is unknown.
	FromDigest, ToDigest string
	// DigestKey keys each composition's ValuesDigest (KeyedDigest): a plan kept for
	// others to read must not confirm a guessed value. Equal values under one key give
	// equal digests, so the plan's hash stays the same while nothing changes. Empty
	// gives PlainDigest, for plans that show the values anyway.
	DigestKey []byte
}

// Plan is what moving the compositions from one chart version to another would do.
type Plan struct {
	// Chart is the chart's name, Kind the kind of its compositions.
	Chart string `json:"chart"`
	Kind  string `json:"kind"`
	// From and To are the chart versions, e.g. 1.1.5 and 2.0.0.
	From string `json:"from"`
	To   string `json:"to"`
	// FromVersion and ToVersion are their served versions, e.g. v1-1-5 and v2-0-0.
	FromVersion string `json:"fromVersion"`
	ToVersion   string `json:"toVersion"`
	// Compositions are sorted by namespace, then name.
	Compositions []Composition `json:"compositions"`
	// RBAC is what the controller of To may create that the controller of From may not,
	// and the reverse.
	RBAC    RBACChange `json:"rbac"`
	Summary Summary    `json:"summary"`
	// Hash is "sha256:<hex>" of the canonical JSON of the plan without its hash (see
	// Digest): the same plan has the same hash, any change to it another. A view keeps
	// the hash of the whole plan it shows part of.
	Hash string `json:"hash,omitempty"`
	// Scope is set on a view of the plan (View), and says what it shows.
	Scope *Scope `json:"scope,omitempty"`
}

// Scope is what a view of a plan shows: the compositions of one namespace, with the
// RBAC change and the counts of the whole plan (Plan.Summary).
type Scope struct {
	// Namespace is the namespace whose compositions the view lists.
	Namespace string `json:"namespace"`
	// Summary counts what the view lists.
	Summary Summary `json:"summary"`
	// Digest is "sha256:<hex>" of the view's canonical JSON without this digest. A
	// view is kept where its namespace's tenants may write, and whoever edits it can
	// compute this again: only the same digest recorded where they may not write (the
	// definition's status.rollout.plan.viewDigest) vouches for it (Verify).
	Digest string `json:"digest,omitempty"`
}

// Composition is what the move does to one composition.
type Composition struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// ReleaseName is its Helm release: krateo.io/release-name, else its name.
	ReleaseName string `json:"releaseName,omitempty"`
	// Values are its spec once moved: converted to To's version, as To's controller
	// reads it.
	Values map[string]any `json:"values,omitempty"`
	// ValuesDigest is "hmac-sha256:<hex>" of Values' JSON under Options.DigestKey, or
	// "sha256:<hex>" without a key: the plan's hash covers the values through it, so
	// that a plan without them (Redacted) keeps its hash.
	ValuesDigest string `json:"valuesDigest,omitempty"`
	// Refused holds why the move cannot go through: each violation of Values under To
	// (its schema, then the policies), one line each as `compositor validate` prints
	// them; or why the composition could not be planned (another kind or version, a
	// conversion or render that fails). Empty: To admits the move.
	Refused []string `json:"refused,omitempty"`
	// Warnings are the policies' warnings about the moved composition.
	Warnings []string `json:"warnings,omitempty"`
	// Added are objects only To renders, Deleted objects only From renders: the
	// upgrade creates and deletes them.
	Added   []ObjectRef `json:"added,omitempty"`
	Deleted []ObjectRef `json:"deleted,omitempty"`
	// Changed are objects both render, with different content.
	Changed []ObjectChange `json:"changed,omitempty"`
}

// ObjectRef names a rendered object. Two objects are the same when their API group,
// kind, namespace and name are.
type ObjectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Namespace is the object's, the release namespace when a namespaced object names
	// none; empty for cluster-scoped objects.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String is "Kind namespace/name (apiVersion)", or "Kind name (apiVersion)".
func (r ObjectRef) String() string {
	name := r.Name
	if r.Namespace != "" {
		name = r.Namespace + "/" + name
	}
	return r.Kind + " " + name + " (" + r.APIVersion + ")"
}

func (r ObjectRef) key() objectKey {
	gv, _ := schema.ParseGroupVersion(r.APIVersion)
	return objectKey{group: gv.Group, kind: r.Kind, namespace: r.Namespace, name: r.Name}
}

type objectKey struct{ group, kind, namespace, name string }

// ObjectChange is an object both versions render, differently.
type ObjectChange struct {
	ObjectRef
	// Fields are the dotted paths of the fields that differ (down to a value that is
	// not an object; a list counts as one value), sorted.
	Fields []string `json:"fields"`
}

// RBACChange lists resource types as group/resource ("ingresses.networking.k8s.io",
// "services" for the core group), sorted.
type RBACChange struct {
	// Gained are the types To's charts create and From's does not: its controller may
	// manage them, From's may not.
	Gained []string `json:"gained,omitempty"`
	// Lost are the types only From's chart creates.
	Lost []string `json:"lost,omitempty"`
}

// Summary counts what the plan holds.
type Summary struct {
	// ToMove is the number of compositions planned.
	ToMove int `json:"toMove"`
	// Refused is the number of compositions with a Refused line.
	Refused int `json:"refused"`
	// Additions, Deletions and Changed are the numbers of objects added, deleted and
	// changed over every composition.
	Additions int `json:"additions"`
	Deletions int `json:"deletions"`
	Changed   int `json:"changed"`
}

// Redacted is p without the compositions' values, which their ValuesDigest stands
// for: what a plan shows to those who may not read every composition it moves. Its
// Digest is p's.
func (p *Plan) Redacted() *Plan {
	c := *p
	c.Compositions = slices.Clone(p.Compositions)
	for i := range c.Compositions {
		c.Compositions[i].Values = nil
	}
	return &c
}

// Digest is "sha256:<hex>" of the canonical JSON of p without its Hash and its values
// (Redacted; each composition's ValuesDigest stands for them): encoding/json writes
// struct fields in order and map keys sorted, so equal plans give equal bytes. It is
// the hash of a whole plan; a view's is Scope.Digest (see Check).
func (p *Plan) Digest() (string, error) {
	c := p.Redacted()
	c.Hash = ""
	return jsonDigest(c)
}

// View is what p shows the namespace given: its compositions, without values, and
// p's hash, RBAC change and counts. Nothing of another namespace's compositions is in
// it (their names, objects, refusals or digests), apart from how many there are.
func (p *Plan) View(namespace string) (*Plan, error) {
	v := p.Redacted()
	v.Compositions = slices.DeleteFunc(v.Compositions, func(c Composition) bool { return c.Namespace != namespace })
	v.Scope = &Scope{Namespace: namespace, Summary: summarize(v.Compositions)}
	d, err := v.viewDigest()
	if err != nil {
		return nil, err
	}
	v.Scope.Digest = d
	return v, nil
}

// viewDigest is the digest of view v (its Scope set) without Scope.Digest.
func (p *Plan) viewDigest() (string, error) {
	c := p.Redacted()
	scope := *p.Scope
	scope.Digest = ""
	c.Scope = &scope
	return jsonDigest(c)
}

// Check returns ErrAltered when p's content is not what it says: a whole plan must
// hash to its Hash, a view to its Scope.Digest. It tells a damaged plan, not a forged
// one: whoever writes the content can write what it says too. Verify against a record
// kept apart from it for that.
func (p *Plan) Check() error {
	want, got, err := p.Hash, "", error(nil)
	if p.Scope != nil {
		want = p.Scope.Digest
		got, err = p.viewDigest()
	} else {
		got, err = p.Digest()
	}
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%w: its content hashes to %s, not to the %s it names", ErrAltered, got, want)
	}
	return nil
}

// Verify returns nil when p is the plan, or the view of it, that records kept where
// p's writers may not write name: hash the whole plan's hash, viewDigest the digest of
// the view (Scope.Digest) of p's namespace. A whole plan must hash to hash; a view
// must name hash and digest to viewDigest. Otherwise the error is ErrAltered (its
// content is not what it or the record says), ErrStale (it checks, and is another
// plan) or ErrUnrecorded (a view, and no viewDigest to verify it with).
func (p *Plan) Verify(hash, viewDigest string) error {
	if err := p.Check(); err != nil {
		return err
	}
	if p.Hash != hash {
		return fmt.Errorf("%w: it is plan %s, and the rollout follows %s", ErrStale, p.Hash, hash)
	}
	if p.Scope == nil {
		return nil
	}
	if viewDigest == "" {
		return fmt.Errorf("%w: the view of namespace %s cannot be verified", ErrUnrecorded, p.Scope.Namespace)
	}
	if p.Scope.Digest != viewDigest {
		return fmt.Errorf("%w: the view of namespace %s hashes to %s, and the record names %s", ErrAltered, p.Scope.Namespace, p.Scope.Digest, viewDigest)
	}
	return nil
}

func jsonDigest(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding the plan: %w", err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// summarize counts what compositions hold.
func summarize(compositions []Composition) Summary {
	var s Summary
	for _, c := range compositions {
		s.ToMove++
		if len(c.Refused) > 0 {
			s.Refused++
		}
		s.Additions += len(c.Added)
		s.Deletions += len(c.Deleted)
		s.Changed += len(c.Changed)
	}
	return s
}

// Compute plans moving compositions, objects of From's version of the chart's kind
// (as read from the cluster or written in files), to To. Each composition's problems
// (another kind or version, values To refuses, a render that fails) are its Refused
// lines; the error is for charts that cannot be planned with (ErrBadChart), a plan
// that cannot be encoded, or ctx's error when ctx is done before the plan is: no
// composition is started after that, and no plan is returned.
//
// The compositions are planned Options.Workers at a time; each is planned alone, so the
// plan, its order and its hash do not depend on how many run at once.
func Compute(ctx context.Context, opts Options, compositions []map[string]any) (*Plan, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := newPlanner(opts)
	if err != nil {
		return nil, err
	}
	out := &Plan{
		Chart: p.from.Name(), Kind: p.kind,
		From: p.from.Metadata.Version, To: p.to.Metadata.Version,
		FromVersion: p.fromName, ToVersion: p.toName,
		Compositions: make([]Composition, 0, len(compositions)),
	}
	if out.RBAC, err = p.rbacChange(); err != nil {
		return nil, err
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	out.Compositions = out.Compositions[:len(compositions)]
	err = forEach(ctx, workers, len(compositions), func(i int) {
		out.Compositions[i] = p.composition(ctx, compositions[i])
	})
	if err != nil {
		// A composition planned while ctx was ending may hold verdicts cut short by
		// it: the plan is not complete, nor right.
		return nil, err
	}
	slices.SortStableFunc(out.Compositions, func(a, b Composition) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	out.Summary = summarize(out.Compositions)
	if out.Hash, err = out.Digest(); err != nil {
		return nil, err
	}
	return out, nil
}

// forEach calls fn(0) to fn(n-1), workers calls at a time, and returns ctx's error
// when ctx is done before every call returned; no call starts after ctx is done. A
// panic in fn is raised again on the caller's goroutine, as if fn had run there.
func forEach(ctx context.Context, workers, n int, fn func(i int)) error {
	workers = min(workers, n)
	if workers <= 1 {
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			fn(i)
		}
		return ctx.Err()
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		panicked atomic.Pointer[any]
	)
	for range workers {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					panicked.CompareAndSwap(nil, &r)
				}
			}()
			for ctx.Err() == nil && panicked.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
	if r := panicked.Load(); r != nil {
		panic(*r)
	}
	return ctx.Err()
}

// planner holds what every composition of a plan shares.
type planner struct {
	from, to         *chart.Chart
	fromName, toName string
	kind, plural     string
	schemas          *conversion.Schemas
	judge            *policies.Judge
	mapper           meta.RESTMapper
	namespace        string
	fromDigest       string
	toDigest         string
	renderTimeout    time.Duration
	digestKey        []byte
}

func newPlanner(opts Options) (*planner, error) {
	from, to := opts.From, opts.To
	switch {
	case from == nil || from.Metadata == nil:
		return nil, fmt.Errorf("%w: no chart to move from", ErrBadChart)
	case to == nil || to.Metadata == nil:
		return nil, fmt.Errorf("%w: no chart to move to", ErrBadChart)
	case from.Name() != to.Name():
		return nil, fmt.Errorf("%w: moving from chart %s to chart %s: they must be versions of one chart", ErrBadChart, from.Name(), to.Name())
	}
	p := &planner{from: from, to: to, judge: opts.Judge, mapper: opts.Mapper, namespace: opts.Namespace,
		fromDigest: opts.FromDigest, toDigest: opts.ToDigest, renderTimeout: cmp.Or(opts.RenderTimeout, policies.DefaultTimeout),
		digestKey: opts.DigestKey}
	if p.judge == nil {
		p.judge = policies.NewJudge(policies.JudgeOptions{})
	}
	if p.mapper == nil {
		p.mapper = chartlint.RESTMapper()
	}
	if p.namespace == "" {
		p.namespace = DefaultNamespace
	}
	var err error
	if p.fromName, err = crd.VersionName(from.Metadata.Version); err != nil {
		return nil, fmt.Errorf("%w: chart %s to move from: %w", ErrBadChart, from.Name(), err)
	}
	if p.toName, err = crd.VersionName(to.Metadata.Version); err != nil {
		return nil, fmt.Errorf("%w: chart %s to move to: %w", ErrBadChart, to.Name(), err)
	}
	if p.fromName == p.toName {
		return nil, fmt.Errorf("%w: both charts are %s %s (served as %s): nothing moves", ErrBadChart, from.Name(), from.Metadata.Version, p.fromName)
	}
	if p.kind, err = crd.Kind(from.Name()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadChart, err)
	}
	if p.plural, err = crd.Plural(from.Name()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadChart, err)
	}
	// The CRD serving both versions, built as the reconciler (and `compositor
	// convert`) builds it: each version with its own declared conversions.
	var versions []crd.ServedVersion
	for _, ch := range []*chart.Chart{from, to} {
		served, _, err := crd.ServedVersionOf(ch)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadChart, err)
		}
		versions = append(versions, served)
	}
	built, _, err := crd.Build(crd.BuildOptions{ChartName: from.Name(), Versions: versions, Conversion: crd.ConversionWebhook{URL: conversionWebhookURL}})
	if err != nil {
		return nil, fmt.Errorf("%w: building the CRD of chart %s serving %s and %s: %w", ErrBadChart, from.Name(), from.Metadata.Version, to.Metadata.Version, err)
	}
	if p.schemas, err = conversion.SchemasFromCRD(built); err != nil {
		return nil, fmt.Errorf("%w: the CRD of chart %s: %w", ErrBadChart, from.Name(), err)
	}
	return p, nil
}

// rbacChange compares the resource types the two charts create.
func (p *planner) rbacChange() (RBACChange, error) {
	typesOf := func(ch *chart.Chart) (map[string]bool, error) {
		types, err := rbac.ResourceTypes(ch, p.mapper)
		if err != nil {
			return nil, fmt.Errorf("%w: resource types of chart %s %s: %w", ErrBadChart, ch.Name(), ch.Metadata.Version, err)
		}
		out := map[string]bool{}
		for _, t := range types {
			out[t.GroupResource().String()] = true
		}
		return out, nil
	}
	before, err := typesOf(p.from)
	if err != nil {
		return RBACChange{}, err
	}
	after, err := typesOf(p.to)
	if err != nil {
		return RBACChange{}, err
	}
	var c RBACChange
	for t := range after {
		if !before[t] {
			c.Gained = append(c.Gained, t)
		}
	}
	for t := range before {
		if !after[t] {
			c.Lost = append(c.Lost, t)
		}
	}
	slices.Sort(c.Gained)
	slices.Sort(c.Lost)
	return c, nil
}

// composition plans one composition; every problem is a Refused line.
func (p *planner) composition(ctx context.Context, given map[string]any) Composition {
	obj, err := copyObject(given)
	md, _ := obj["metadata"].(map[string]any)
	c := Composition{}
	c.Name, _ = md["name"].(string)
	c.Namespace, _ = md["namespace"].(string)
	if c.Namespace == "" {
		c.Namespace = p.namespace
	}
	c.ReleaseName = c.Name
	if ann, ok := md["annotations"].(map[string]any); ok {
		if rn, ok := ann[vocab.AnnotationReleaseName].(string); ok && rn != "" {
			c.ReleaseName = rn
		}
	}
	refuse := func(format string, args ...any) Composition {
		c.Refused = append(c.Refused, fmt.Sprintf(format, args...))
		return c
	}
	if err != nil {
		return refuse("cannot be planned: %v", err)
	}
	if err := p.identify(obj); err != nil {
		return refuse("cannot be planned: %v", err)
	}
	fromValues, err := plainSpec(obj)
	if err != nil {
		return refuse("cannot be planned: %v", err)
	}

	moved, before, err := p.move(obj)
	if err != nil {
		return refuse("cannot be converted from %s to %s: %v", p.fromName, p.toName, err)
	}
	if c.Values, err = plainSpec(moved); err != nil {
		return refuse("cannot be planned: %v", err)
	}
	if c.ValuesDigest, err = valuesDigest(p.digestKey, c.Values); err != nil {
		return refuse("cannot be planned: %v", err)
	}

	// To's release, rendered once: for the diff below and for the rendered policies
	// of the verdict, which would render the very same (To, these values, this
	// release and namespace, as an upgrade).
	cur, curErr := p.render(ctx, p.to, p.toDigest, c.Values, c)

	// The verdict: the move is a write through To (the relabelling), judged as the
	// validating webhook and `compositor validate` judge it.
	if err := p.verdict(ctx, &c, moved, before, cur, curErr); err != nil {
		c.Refused = append(c.Refused, fmt.Sprintf("cannot be checked against chart %s %s: %v", p.to.Name(), p.to.Metadata.Version, err))
	}

	// What the upgrade does to the release's objects.
	old, err := p.render(ctx, p.from, p.fromDigest, fromValues, c)
	if err != nil {
		return refuse("cannot be rendered with chart %s %s: %v", p.from.Name(), p.from.Metadata.Version, err)
	}
	if curErr != nil {
		return refuse("cannot be rendered with chart %s %s: %v", p.to.Name(), p.to.Metadata.Version, curErr)
	}
	c.Added, c.Deleted, c.Changed = diffObjects(old.byKey, cur.byKey)
	return c
}

// identify checks that obj is a composition of From's version and pins it to From
// when it names no version: the declared conversions run from the pinned version.
func (p *planner) identify(obj map[string]any) error {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	gv, err := schema.ParseGroupVersion(apiVersion)
	switch {
	case apiVersion == "":
		return errors.New("the object has no apiVersion")
	case err != nil || gv.Version == "":
		return fmt.Errorf("apiVersion %q is not %s/<version>", apiVersion, vocab.CompositionGroup)
	case gv.Group != vocab.CompositionGroup || kind != p.kind:
		return fmt.Errorf("%s %s is not a composition of chart %s (%s/%s %s)", apiVersion, kind, p.from.Name(), vocab.CompositionGroup, p.fromName, p.kind)
	case gv.Version != p.fromName:
		return fmt.Errorf("%s is of version %s, not %s (chart %s %s) that the plan moves from", kind, gv.Version, p.fromName, p.from.Name(), p.from.Metadata.Version)
	}
	md, err := objectField(obj, "metadata", "metadata")
	if err != nil {
		return err
	}
	labels, err := objectField(md, "labels", "metadata.labels")
	if err != nil {
		return err
	}
	switch pin, ok := labels[vocab.LabelCompositionVersion]; {
	case !ok || pin == "":
		labels[vocab.LabelCompositionVersion] = p.fromName
	case pin != p.fromName:
		return fmt.Errorf("pinned to %v (label %s), not %s that the plan moves from", pin, vocab.LabelCompositionVersion, p.fromName)
	}
	return nil
}

// move does to a copy of obj what moving it does: the relabelling is a write through
// To's version of the object as read through it (converted from the stored hub, where
// the declared conversions run from the pinned From), with the label set to To; the
// API server stores it (to the hub), and To's controller reads it back through To.
// The label must change only after the read: pinned to To already, the read would run
// no declared conversion and stash From's values instead. It returns the moved object
// and the object as read through To before the write.
func (p *planner) move(obj map[string]any) (moved, before map[string]any, err error) {
	moved = deepCopy(obj)
	hub := p.schemas.Hub()
	if err := p.schemas.Convert(moved, p.fromName, hub); err != nil {
		return nil, nil, err
	}
	if err := p.schemas.Convert(moved, hub, p.toName); err != nil {
		return nil, nil, err
	}
	before = deepCopy(moved)
	md, err := objectField(moved, "metadata", "metadata")
	if err != nil {
		return nil, nil, err
	}
	labels, err := objectField(md, "labels", "metadata.labels")
	if err != nil {
		return nil, nil, err
	}
	labels[vocab.LabelCompositionVersion] = p.toName
	if err := p.schemas.Convert(moved, p.toName, hub); err != nil {
		return nil, nil, err
	}
	if err := p.schemas.Convert(moved, hub, p.toName); err != nil {
		return nil, nil, err
	}
	return moved, before, nil
}

// verdict checks the moved object with the judge, as an update through To. cur is
// To's render of c.Values for c's release (curErr its error), which the rendered
// policies judge: the judge would render the same. Without it (the render failed,
// or c has no values, which the judge renders as nil rather than {}) the judge
// renders, and fails, itself.
func (p *planner) verdict(ctx context.Context, c *Composition, moved, before map[string]any, cur releaseObjects, curErr error) error {
	obj, err := plain(moved)
	if err != nil {
		return err
	}
	old, err := plain(before)
	if err != nil {
		return err
	}
	req := policies.NewRequest(policies.Write{Operation: "UPDATE", Object: obj, OldObject: old, Namespace: p.namespace,
		Resource: metav1.GroupVersionResource{Resource: p.plural}, Chart: p.to})
	req.NamespaceLabels = map[string]string{"kubernetes.io/metadata.name": req.Namespace}
	req.Revision = 0 // as render renders the moved values, so that both paths judge the same
	if curErr == nil && c.Values != nil && req.ReleaseName == c.ReleaseName && req.Namespace == c.Namespace {
		req.Rendered = cur.objs
		if req.Rendered == nil {
			req.Rendered = []policies.RenderedObject{} // nil would render again
		}
	}
	d, err := p.judge.Decide(ctx, req)
	if err != nil {
		return err
	}
	c.Warnings = d.Warnings()
	if d.Denied() {
		var deny []policies.Violation
		for _, v := range d.Violations {
			if v.Action == v1alpha1.EnforcementDeny {
				deny = append(deny, v)
			}
		}
		c.Refused = append(c.Refused, policies.FormatLines(deny)...)
	}
	return nil
}

// releaseObjects are the objects of one render of a release: as rendered, and by key.
type releaseObjects struct {
	objs  []policies.RenderedObject
	byKey map[objectKey]rendered
}

// render renders ch, whose content digest identifies, with values for c's release, as
// its controller installs it, within the render timeout.
func (p *planner) render(ctx context.Context, ch *chart.Chart, digest string, values map[string]any, c Composition) (releaseObjects, error) {
	if values == nil {
		values = map[string]any{}
	}
	ctx, cancel := context.WithTimeout(ctx, p.renderTimeout)
	defer cancel()
	objs, err := p.judge.Renderer().Render(policies.ForPurpose(ctx, policies.PurposePlan), ch, digest, deepCopy(values), policies.RenderOptions{ReleaseName: c.ReleaseName, Namespace: c.Namespace, IsUpgrade: true})
	if err != nil {
		return releaseObjects{}, err
	}
	out := make(map[objectKey]rendered, len(objs))
	for _, o := range objs {
		ref := p.refOf(o.Object, c.Namespace)
		k := ref.key()
		if _, dup := out[k]; !dup {
			out[k] = rendered{ref: ref, obj: o.Object}
		}
	}
	return releaseObjects{objs: objs, byKey: out}, nil
}

type rendered struct {
	ref ObjectRef
	obj map[string]any
}

// refOf names a rendered object; a namespaced object without a namespace goes to the
// release namespace, as Helm puts it there.
func (p *planner) refOf(obj map[string]any, namespace string) ObjectRef {
	r := ObjectRef{}
	r.APIVersion, _ = obj["apiVersion"].(string)
	r.Kind, _ = obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	r.Name, _ = md["name"].(string)
	r.Namespace, _ = md["namespace"].(string)
	gv, _ := schema.ParseGroupVersion(r.APIVersion)
	m, err := p.mapper.RESTMapping(gv.WithKind(r.Kind).GroupKind(), gv.Version)
	switch {
	case err == nil && m.Scope.Name() == meta.RESTScopeNameRoot:
		r.Namespace = ""
	case r.Namespace == "":
		r.Namespace = namespace
	}
	return r
}

// diffObjects compares the objects of the old and the new release.
func diffObjects(old, cur map[objectKey]rendered) (added, deleted []ObjectRef, changed []ObjectChange) {
	for k, n := range cur {
		o, ok := old[k]
		if !ok {
			added = append(added, n.ref)
			continue
		}
		var fields []string
		diffFields(o.obj, n.obj, "", &fields)
		if len(fields) > 0 {
			slices.Sort(fields)
			changed = append(changed, ObjectChange{ObjectRef: n.ref, Fields: fields})
		}
	}
	for k, o := range old {
		if _, ok := cur[k]; !ok {
			deleted = append(deleted, o.ref)
		}
	}
	sortRefs(added)
	sortRefs(deleted)
	slices.SortFunc(changed, func(a, b ObjectChange) int { return compareRefs(a.ObjectRef, b.ObjectRef) })
	return added, deleted, changed
}

func sortRefs(refs []ObjectRef) { slices.SortFunc(refs, compareRefs) }

func compareRefs(a, b ObjectRef) int {
	return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Namespace, b.Namespace),
		strings.Compare(a.Name, b.Name), strings.Compare(a.APIVersion, b.APIVersion))
}

// diffFields appends the dotted paths where a and b differ: objects key by key, any
// other value (lists included) as a whole.
func diffFields(a, b any, at string, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for k := range keys {
			p := k
			if at != "" {
				p = at + "." + k
			}
			av, ain := am[k]
			bv, bin := bm[k]
			if ain != bin {
				*out = append(*out, p)
				continue
			}
			diffFields(av, bv, p, out)
		}
		return
	}
	if !jsonEqual(a, b) {
		if at == "" {
			at = "."
		}
		*out = append(*out, at)
	}
}

func jsonEqual(a, b any) bool {
	x, errA := json.Marshal(a)
	y, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(x, y)
}

// copyObject copies obj as conversion decodes objects: numbers as json.Numbers, so
// conversion gives every number back as written.
func copyObject(obj map[string]any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", conversion.ErrMalformedObject, err)
	}
	return conversion.Decode(b)
}

func deepCopy(obj map[string]any) map[string]any {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(fmt.Sprintf("plan: copying a JSON object: %v", err)) // obj came from JSON
	}
	out, err := conversion.Decode(b)
	if err != nil {
		panic(fmt.Sprintf("plan: copying a JSON object: %v", err))
	}
	return out
}

// plain turns obj's json.Numbers into int64 and float64, as the API server hands
// objects to webhooks and the controller hands values to Helm.
func plain(obj map[string]any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := utiljson.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// plainSpec is obj's spec, plain; nil when it has none.
func plainSpec(obj map[string]any) (map[string]any, error) {
	switch spec := obj["spec"].(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return plain(spec)
	default:
		return nil, fmt.Errorf("%w: spec is not an object", conversion.ErrMalformedObject)
	}
}

// objectField is obj[key], an object, created when absent; path names it in errors.
func objectField(obj map[string]any, key, path string) (map[string]any, error) {
	switch v := obj[key].(type) {
	case nil:
		m := map[string]any{}
		obj[key] = m
		return m, nil
	case map[string]any:
		return v, nil
	default:
		return nil, fmt.Errorf("%w: %s is not an object", conversion.ErrMalformedObject, path)
	}
}

// valuesDigest is KeyedDigest of values' JSON under key, or PlainDigest without one.
func valuesDigest(key []byte, values map[string]any) (string, error) {
	b, err := json.Marshal(values)
	if err != nil {
		return "", fmt.Errorf("encoding the values: %w", err)
	}
	if len(key) == 0 {
		sum := sha256.Sum256(b)
		return PlainDigest + hex.EncodeToString(sum[:]), nil
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	return KeyedDigest + hex.EncodeToString(mac.Sum(nil)), nil
}
