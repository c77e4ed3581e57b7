package policies

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// echoTemplate reports what a template sees of every object its constraints select.
const echoTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: testecho}
spec:
  crd: {spec: {names: {kind: TestEcho}}}
  targets:
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package testecho
      violation[{"msg": msg}] {
        msg := sprintf("%v %v/%v op=%v user=%v", [input.review.kind.kind, object.get(input.review.object.metadata, "namespace", "-"), input.review.name, input.review.operation, input.review.userInfo.username])
      }
`

// slowTemplate takes seconds on an object with thousands of annotations.
const slowTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: testslow}
spec:
  crd: {spec: {names: {kind: TestSlow}}}
  targets:
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package testslow
      violation[{"msg": "never"}] {
        count([1 | walk(input.review.object, [p1, v1]); walk(input.review.object, [p2, v2]); p1 != p2; v1 == v2]) > 1000000000
      }
`

func testTemplate(t *testing.T, doc string) *gatekeeper.Template {
	t.Helper()
	src, err := gatekeeper.ParseTemplate([]byte(doc))
	require.NoError(t, err)
	tmpl, err := CompileTemplate(context.Background(), src)
	require.NoError(t, err)
	return tmpl
}

func testConstraint(t *testing.T, kind, name, spec string) *gatekeeper.Constraint {
	t.Helper()
	var obj map[string]any
	require.NoError(t, yaml.Unmarshal([]byte("apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: "+kind+"\nmetadata: {name: "+name+"}\nspec: "+spec+"\n"), &obj))
	c, err := gatekeeper.ParseConstraint(obj)
	require.NoError(t, err)
	return c
}

func messages(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, string(v.Action)+" "+v.String())
	}
	return out
}

// What a constraint sees of a composition's write: the composition itself, each
// rendered object in the composition's namespace (as Helm creates it), the Pod its
// Deployment implies; the writer as userInfo.
func TestConstraintsSeeTheCompositionAndWhatItRenders(t *testing.T) {
	e := newTestEngine(t, Options{})
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, echoTemplate)},
		[]*gatekeeper.Constraint{testConstraint(t, "TestEcho", "all", "{}")}))
	r := compositionRequest(map[string]any{"replicaCount": 1})
	r.Chart = loadChart(t, "1.1.5")
	r.UserInfo.Username = "alice"
	got := messages(e.Evaluate(context.Background(), r))
	want := []string{
		"deny FireworksApp team-a/x op=CREATE user=alice [constraint TestEcho/all]",
		"deny Deployment/x-fireworks-app: Deployment team-a/x-fireworks-app op=CREATE user=alice [constraint TestEcho/all]",
		"deny Deployment/x-fireworks-app (its pod template): Pod team-a/x-fireworks-app-pod op=CREATE user=alice [constraint TestEcho/all]",
		"deny Service/x-fireworks-app: Service team-a/x-fireworks-app op=CREATE user=alice [constraint TestEcho/all]",
	}
	for _, w := range want {
		assert.Contains(t, got, w)
	}
}

// The constraints controller rebuilds the library from what it parsed and compiled
// before at every resync: the same library changes nothing the engine enforces, so
// verdicts found under its Version still hold (the audit judges nothing again); a
// constraint parsed anew, an empty library after none, or the last one removed do.
func TestTheSameConstraintsKeepTheEnginesVersion(t *testing.T) {
	e := newTestEngine(t, Options{})
	start := e.Version()
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary(nil, nil))
	e.SetConstraints(OriginObject, nil)
	assert.True(t, start == e.Version(), "no constraints, then none again")

	tmpl := testTemplate(t, echoTemplate)
	all := testConstraint(t, "TestEcho", "all", "{}")
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, []*gatekeeper.Constraint{all}))
	enforced := e.Version()
	assert.True(t, start != enforced, "a constraint enforced")
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, []*gatekeeper.Constraint{all}))
	assert.True(t, enforced == e.Version(), "the same constraint and template, rebuilt")

	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, []*gatekeeper.Constraint{testConstraint(t, "TestEcho", "all", "{}")}))
	reparsed := e.Version()
	assert.True(t, enforced != reparsed, "a constraint parsed anew")
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, echoTemplate)}, e.Constraints(OriginObject).Constraints()))
	assert.True(t, reparsed != e.Version(), "its template compiled anew")
	e.SetConstraints(OriginObject, nil)
	assert.True(t, reparsed != e.Version(), "the constraints removed")
	assert.Empty(t, e.Constraints(OriginObject).Constraints())
}

// A deletion is not judged (Gatekeeper's default), and the delete hooks of an
// uninstall are judged without the composition that goes.
func TestConstraintsLeaveDeletionsAlone(t *testing.T) {
	e := newTestEngine(t, Options{})
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, echoTemplate)},
		[]*gatekeeper.Constraint{testConstraint(t, "TestEcho", "compositions", "{match: {kinds: [{apiGroups: [composition.krateo.io], kinds: [FireworksApp]}]}}")}))
	r := compositionRequest(map[string]any{"replicaCount": 1})
	r.Operation, r.OldObject, r.Object = "DELETE", r.Object, nil
	assert.Empty(t, e.Evaluate(context.Background(), r))

	r = compositionRequest(map[string]any{"replicaCount": 1})
	r.Uninstall, r.Rendered = true, []RenderedObject{}
	assert.Empty(t, e.Evaluate(context.Background(), r))
}

// A constraint the deadline comes before is a denial that says so, never a silent
// pass: here a dryrun constraint on the composition takes the whole deadline, and the
// deny constraint on its Pods is not reached.
func TestConstraintsNotReachedDeny(t *testing.T) {
	e := newTestEngine(t, Options{Timeout: 300 * time.Millisecond})
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary(
		[]*gatekeeper.Template{testTemplate(t, slowTemplate), testTemplate(t, echoTemplate)},
		[]*gatekeeper.Constraint{
			testConstraint(t, "TestSlow", "rollout", "{enforcementAction: dryrun, match: {kinds: [{apiGroups: [composition.krateo.io], kinds: [FireworksApp]}]}}"),
			testConstraint(t, "TestEcho", "pods", "{match: {kinds: [{apiGroups: [''], kinds: [Pod]}]}}"),
			testConstraint(t, "TestEcho", "team-b-secret", "{match: {namespaces: [team-b]}}"),
			testConstraint(t, "TestEcho", "team-c-secret", "{match: {namespaces: [team-c]}}"),
			testConstraint(t, "TestEcho", "cluster-secret", "{enforcementAction: warn, match: {scope: Cluster}}"),
		}))
	r := compositionRequest(map[string]any{"replicaCount": 1})
	annotations := map[string]any{}
	for i := range 3000 {
		annotations["example.com/"+strconv.Itoa(i)] = "v"
	}
	r.Object["metadata"].(map[string]any)["annotations"] = annotations
	r.Chart = loadChart(t, "1.1.5")
	vs := e.Evaluate(context.Background(), r)
	require.True(t, Decision{Violations: vs}.Denied(), "%v", messages(vs))
	notReached := slices.ContainsFunc(vs, func(v Violation) bool {
		return v.Policy == "TestEcho/pods" && v.Action == v1alpha1.EnforcementDeny && strings.Contains(v.Message, "not evaluated")
	})
	assert.True(t, notReached, "%v", messages(vs))
	// Constraints that cannot judge an object in team-a are counted, by action, not
	// named: a writer who makes its own review run long learns none of them.
	d := Decision{Violations: vs}
	for _, secret := range []string{"team-b-secret", "team-c-secret", "cluster-secret"} {
		assert.NotContains(t, d.Message()+strings.Join(d.Warnings(), "\n"), secret)
	}
	assert.Contains(t, messages(vs), "deny 2 constraints scoped to other namespaces not evaluated: the request's evaluation deadline of 300ms passed while other policies ran (denied: policies fail closed) [constraints]")
	assert.Contains(t, messages(vs), "warn 1 constraint scoped to other namespaces not evaluated: the request's evaluation deadline of 300ms passed while other policies ran [constraints]")
}

// The constraints of each origin are enforced side by side, and replacing one origin's
// leaves the other's.
func TestConstraintsByOrigin(t *testing.T) {
	e := newTestEngine(t, Options{})
	lib := func(name string) *gatekeeper.Library {
		return gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, echoTemplate)},
			[]*gatekeeper.Constraint{testConstraint(t, "TestEcho", name, "{match: {kinds: [{apiGroups: [composition.krateo.io], kinds: [FireworksApp]}]}}")})
	}
	e.SetConstraints(OriginObject, lib("from-cluster"))
	e.SetConstraints(OriginDir, lib("from-dir"))
	got := messages(e.Evaluate(context.Background(), compositionRequest(map[string]any{})))
	assert.Len(t, got, 2)
	e.SetConstraints(OriginObject, nil)
	got = messages(e.Evaluate(context.Background(), compositionRequest(map[string]any{})))
	assert.Equal(t, []string{"deny FireworksApp team-a/x op=CREATE user= [constraint TestEcho/from-dir]"}, got)
}

// Until the constraints are read, a composition's write is refused, saying why, and
// other writes (a definition's) are judged as usual.
func TestConstraintsPendingRefuseCompositions(t *testing.T) {
	e := newTestEngine(t, Options{})
	e.ExpectConstraints(OriginObject)
	require.True(t, e.ConstraintsPending())
	r := compositionRequest(map[string]any{"replicaCount": 1})
	r.Chart = loadChart(t, "1.1.5")
	vs := e.Evaluate(context.Background(), r)
	assert.Equal(t, []string{"deny Compositor has not read the Gatekeeper constraints yet: try again in a moment [constraints]"}, messages(vs))

	definition := compositionRequest(nil)
	definition.Kind = gvk("core.krateo.io", "v1alpha1", "CompositionDefinition")
	assert.Empty(t, e.Evaluate(context.Background(), definition))

	e.ConstraintsLoaded(OriginObject)
	assert.False(t, e.ConstraintsPending())
	assert.Empty(t, e.Evaluate(context.Background(), r))
}

// historyTemplate reads the operation and the old object.
const historyTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: testhistory}
spec:
  crd: {spec: {names: {kind: TestHistory}}}
  targets:
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package testhistory
      violation[{"msg": msg}] {
        old := object.get(input.review, ["oldObject", "spec", "replicas"], "none")
        msg := sprintf("op=%v replicas=%v old=%v", [input.review.operation, input.review.object.spec.replicas, old])
      }
`

// On a composition's update, a rendered object that was there is an UPDATE with its
// old version, and one that was not is a CREATE: from the old spec at admission, from
// the release's objects at the install gate.
func TestConstraintsTellUpdatesFromCreates(t *testing.T) {
	tmpl := testTemplate(t, historyTemplate)
	require.True(t, tmpl.ReadsHistory)
	e := newTestEngine(t, Options{})
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl},
		[]*gatekeeper.Constraint{testConstraint(t, "TestHistory", "deployments", "{match: {kinds: [{apiGroups: [apps], kinds: [Deployment]}]}}")}))
	update := func() *Request {
		r := compositionRequest(map[string]any{"replicaCount": 3})
		r.Operation = "UPDATE"
		r.OldObject = compositionRequest(map[string]any{"replicaCount": 2}).Object
		r.Chart = loadChart(t, "1.1.5")
		return r
	}
	assert.Equal(t, []string{"deny Deployment/x-fireworks-app: op=UPDATE replicas=3 old=2 [constraint TestHistory/deployments]"},
		messages(e.Evaluate(context.Background(), update())), "rendered from the old spec")

	r := update()
	r.Previous = []RenderedObject{}
	assert.Equal(t, []string{"deny Deployment/x-fireworks-app: op=CREATE replicas=3 old=none [constraint TestHistory/deployments]"},
		messages(e.Evaluate(context.Background(), r)), "not in the release before")

	r = update()
	r.OldObject = r.Object
	assert.Equal(t, []string{"deny Deployment/x-fireworks-app: op=UPDATE replicas=3 old=3 [constraint TestHistory/deployments]"},
		messages(e.Evaluate(context.Background(), r)), "the same spec: the same objects")
}

// skipUpdatesTemplate is the pod-security library's shape: it leaves updates alone
// (pods are immutable where it looks) and denies a container it finds.
const skipUpdatesTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: testskipupdates}
spec:
  crd: {spec: {names: {kind: TestSkipUpdates}}}
  targets:
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package testskipupdates
      violation[{"msg": msg}] {
        not input.review.operation == "UPDATE"
        c := input.review.object.spec.containers[_]
        msg := sprintf("container %v op=%v old=%v", [c.name, input.review.operation, object.get(input.review, "oldObject", "none")])
      }
`

// The Pod a workload implies is a CREATE on a composition's update too, without an old
// version: pods are created from the workload's template, never updated through it, so
// a template that leaves updates alone still judges the Pods an update brings.
func TestImpliedPodsAreCreations(t *testing.T) {
	e := newTestEngine(t, Options{})
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, skipUpdatesTemplate)},
		[]*gatekeeper.Constraint{testConstraint(t, "TestSkipUpdates", "pods", "{match: {kinds: [{apiGroups: [\"\"], kinds: [Pod]}]}}")}))
	r := compositionRequest(map[string]any{"replicaCount": 3})
	r.Operation = "UPDATE"
	r.OldObject = compositionRequest(map[string]any{"replicaCount": 2}).Object
	r.Chart = loadChart(t, "1.1.5")
	got := messages(e.Evaluate(context.Background(), r))
	require.NotEmpty(t, got, "the update's pods are judged")
	for _, m := range got {
		assert.Contains(t, m, "(its pod template)")
		assert.Contains(t, m, "op=CREATE old=none")
	}

	// At the install gate too, with the release's objects as they were.
	previous, err := Render(r.Chart, map[string]any{"replicaCount": 2}, RenderOptions{ReleaseName: "x", Namespace: "team-a"})
	require.NoError(t, err)
	r.Previous = previous
	assert.Equal(t, got, messages(e.Evaluate(context.Background(), r)))
}

// A kind the definition allows cluster-wide is reviewed without a namespace, as Helm
// creates it: a constraint limited to namespaces does not skip it, and scope Cluster
// selects it.
func TestConstraintsClusterScopedKindsOfTheDefinition(t *testing.T) {
	e := newTestEngine(t, Options{})
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, echoTemplate)},
		[]*gatekeeper.Constraint{testConstraint(t, "TestEcho", "cluster", "{match: {scope: Cluster, kinds: [{apiGroups: [cert-manager.io], kinds: [ClusterIssuer]}]}}")}))
	r := compositionRequest(map[string]any{})
	r.Rendered = []RenderedObject{{Object: map[string]any{"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": map[string]any{"name": "letsencrypt"}}}}
	assert.Empty(t, messages(e.Evaluate(context.Background(), r)), "taken for namespaced without the definition's word")
	r.ClusterScoped = map[schema.GroupKind]bool{{Group: "cert-manager.io", Kind: "ClusterIssuer"}: true}
	assert.Equal(t, []string{"deny ClusterIssuer/letsencrypt: ClusterIssuer -/letsencrypt op=CREATE user= [constraint TestEcho/cluster]"},
		messages(e.Evaluate(context.Background(), r)))
}

// brokenChart is the sample chart 1.1.5 with a template that fails to render.
func brokenChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch := loadChart(t, "1.1.5")
	ch.Templates = append(ch.Templates[:0:0], ch.Templates...)
	for i, tpl := range ch.Templates {
		if tpl.Name == "templates/configmap.yaml" {
			ch.Templates[i] = withData(tpl, "{{ fail \"broken on purpose\" }}")
		}
	}
	return ch
}

// onDeployments is a TestEcho constraint of action on the rendered Deployments only:
// the composition itself gives it nothing to say.
func onDeployments(t *testing.T, name, action string) *gatekeeper.Constraint {
	t.Helper()
	return testConstraint(t, "TestEcho", name, "{enforcementAction: "+action+", match: {kinds: [{apiGroups: [apps], kinds: [Deployment]}]}}")
}

// A warn constraint's warning names the constraint first and is cut only at the API
// server's 256, on a character boundary: a long message no longer loses the name.
func TestConstraintWarningsNameTheConstraintFirst(t *testing.T) {
	e := newTestEngine(t, Options{})
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, echoTemplate)},
		[]*gatekeeper.Constraint{testConstraint(t, "TestEcho", "advice", "{enforcementAction: warn}")}))

	r := compositionRequest(map[string]any{})
	r.Name = "short"
	d := Decision{Violations: e.Evaluate(context.Background(), r)}
	require.False(t, d.Denied())
	assert.Equal(t, []string{"[constraint TestEcho/advice] FireworksApp team-a/short op=CREATE user="}, d.Warnings())

	// 150 bytes: past the 119 of old, kept whole.
	r.Name = strings.Repeat("n", 150)
	d = Decision{Violations: e.Evaluate(context.Background(), r)}
	assert.Equal(t, []string{"[constraint TestEcho/advice] FireworksApp team-a/" + r.Name + " op=CREATE user="}, d.Warnings())

	// Past 256 bytes, in three-byte characters: cut, the name kept, no character split.
	r.UserInfo.Username = strings.Repeat("日", 100)
	d = Decision{Violations: e.Evaluate(context.Background(), r)}
	require.Len(t, d.Warnings(), 1)
	w := d.Warnings()[0]
	assert.True(t, strings.HasPrefix(w, "[constraint TestEcho/advice] FireworksApp team-a/"+r.Name+" op=CREATE user=日"), w)
	assert.True(t, strings.HasSuffix(w, "日..."), w)
	assert.LessOrEqual(t, len(w), MaxWarningLength)
	assert.Greater(t, len(w), MaxWarningLength-len("日..."), "cut no earlier than it must")
	assert.True(t, utf8.ValidString(w))
}

// A chart that does not render says so once in each violation, whichever policy or
// constraint it stands for and however the error came.
func TestRenderFailureSaysSoOnce(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	require.NoError(t, e.Set(ctx, Policy{Name: "ha", Rego: haPolicy, Target: v1alpha1.TargetRendered}))
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, echoTemplate)},
		[]*gatekeeper.Constraint{onDeployments(t, "deployments", "deny")}))
	r := compositionRequest(map[string]any{})
	r.Chart = brokenChart(t)
	vs := e.Evaluate(ctx, r)
	require.Len(t, vs, 2, "%v", messages(vs))
	for _, v := range vs {
		assert.Equal(t, 1, strings.Count(v.Message, ErrRender.Error()), v.Message)
		assert.Contains(t, v.Message, "broken on purpose")
	}

	// renderError marks an error once, whether it already was one or not.
	once := renderError(errors.New("worker died"))
	assert.ErrorIs(t, once, ErrRender)
	assert.EqualError(t, once, "chart does not render: worker died")
	assert.Equal(t, once, renderError(once))
	assert.Nil(t, renderError(nil))
}

// The constraints a chart that does not render keeps from its objects are one
// violation per outcome, naming them, not one copy of the error per constraint; and
// they deny, warn or count as each constraint's action has it, as before.
func TestConstraintsOfAChartThatDoesNotRender(t *testing.T) {
	ctx := context.Background()
	echo := []*gatekeeper.Template{testTemplate(t, echoTemplate)}
	evaluate := func(opts Options, object, dir []*gatekeeper.Constraint) Decision {
		t.Helper()
		e := newTestEngine(t, opts)
		e.SetConstraints(OriginObject, gatekeeper.NewLibrary(echo, object))
		e.SetConstraints(OriginDir, gatekeeper.NewLibrary(echo, dir))
		r := compositionRequest(map[string]any{})
		r.Chart = brokenChart(t)
		r.NamespaceLabels = map[string]string{"tier": "web"}
		return Decision{Violations: e.Evaluate(ctx, r)}
	}
	// byAction checks there is one violation of each action given, its message
	// starting with the given words and ending with the given note.
	type want struct{ start, note string }
	byAction := func(t *testing.T, d Decision, wants map[v1alpha1.EnforcementAction]want) {
		t.Helper()
		require.Len(t, d.Violations, len(wants), "%v", messages(d.Violations))
		for _, v := range d.Violations {
			w, ok := wants[v.Action]
			require.True(t, ok, "unexpected %s", v.Action)
			assert.True(t, strings.HasPrefix(v.Message, w.start+" not evaluated: chart does not render: "), v.Message)
			assert.True(t, strings.HasSuffix(v.Message, "broken on purpose"+w.note), v.Message)
			assert.Equal(t, "constraints", v.Source)
		}
	}

	t.Run("deny, warn and dryrun", func(t *testing.T) {
		d := evaluate(Options{},
			[]*gatekeeper.Constraint{onDeployments(t, "b", "deny"), onDeployments(t, "a", "deny"), onDeployments(t, "w", "warn"), onDeployments(t, "d", "dryrun")},
			[]*gatekeeper.Constraint{onDeployments(t, "c", "deny")})
		assert.True(t, d.Denied())
		byAction(t, d, map[v1alpha1.EnforcementAction]want{
			v1alpha1.EnforcementDeny:   {"constraints TestEcho/a, TestEcho/b, TestEcho/c were", " (denied: policies fail closed)"},
			v1alpha1.EnforcementWarn:   {"constraint TestEcho/w was", ""},
			v1alpha1.EnforcementDryRun: {"constraint TestEcho/d was", ""},
		})
		require.Len(t, d.Warnings(), 1)
		assert.True(t, strings.HasPrefix(d.Warnings()[0], "[constraints] constraint TestEcho/w was not evaluated: chart does not render: "), d.Warnings()[0])
		assert.NotContains(t, d.Message()+strings.Join(d.Warnings(), "\n"), "TestEcho/d", "a dryrun constraint is never shown")
	})

	t.Run("only warn constraints only warn", func(t *testing.T) {
		d := evaluate(Options{}, []*gatekeeper.Constraint{onDeployments(t, "w1", "warn"), onDeployments(t, "w2", "warn")}, nil)
		assert.False(t, d.Denied())
		byAction(t, d, map[v1alpha1.EnforcementAction]want{v1alpha1.EnforcementWarn: {"constraints TestEcho/w1, TestEcho/w2 were", ""}})
	})

	t.Run("only dryrun constraints are only counted", func(t *testing.T) {
		d := evaluate(Options{}, []*gatekeeper.Constraint{onDeployments(t, "d", "dryrun")}, nil)
		assert.False(t, d.Denied())
		assert.Empty(t, d.Warnings())
		byAction(t, d, map[v1alpha1.EnforcementAction]want{v1alpha1.EnforcementDryRun: {"constraint TestEcho/d was", ""}})
	})

	t.Run("fail open", func(t *testing.T) {
		d := evaluate(Options{FailOpen: true}, []*gatekeeper.Constraint{onDeployments(t, "a", "deny"), onDeployments(t, "w", "warn")}, nil)
		assert.False(t, d.Denied())
		// The deny constraint admitted, saying so; the warn one as it is.
		w := d.Warnings()
		require.Len(t, w, 2, "%v", messages(d.Violations))
		assert.True(t, strings.HasPrefix(w[0], "[constraints] constraint TestEcho/a was not evaluated: chart does not render: "), w[0])
		assert.True(t, strings.HasSuffix(w[0], "broken on purpose (admitted: policies fail open)"), w[0])
		assert.True(t, strings.HasPrefix(w[1], "[constraints] constraint TestEcho/w was not evaluated: chart does not render: "), w[1])
		assert.True(t, strings.HasSuffix(w[1], "broken on purpose"), w[1])
	})
	// The composition is in team-a, labelled tier: web: constraints that cannot judge
	// an object there are counted, not named.
	t.Run("constraints scoped to other namespaces are not named", func(t *testing.T) {
		scoped := func(name, match string) *gatekeeper.Constraint {
			return testConstraint(t, "TestEcho", name, "{match: {kinds: [{apiGroups: [apps], kinds: [Deployment]}], "+match+"}}")
		}
		d := evaluate(Options{}, []*gatekeeper.Constraint{
			scoped("here", "namespaces: [team-*]"),
			scoped("selected-here", "namespaceSelector: {matchLabels: {tier: web}}"),
			scoped("only-team-b", "namespaces: [team-b]"),
			scoped("not-team-a", "excludedNamespaces: [team-a]"),
			scoped("cluster", "scope: Cluster"),
			scoped("other-tier", "namespaceSelector: {matchLabels: {tier: db}}"),
		}, nil)
		byAction(t, d, map[v1alpha1.EnforcementAction]want{
			v1alpha1.EnforcementDeny: {"constraints TestEcho/here, TestEcho/selected-here and 4 more scoped to other namespaces were", " (denied: policies fail closed)"},
		})
		for _, hidden := range []string{"only-team-b", "not-team-a", "cluster", "other-tier"} {
			assert.NotContains(t, d.Message(), hidden)
		}

		d = evaluate(Options{}, []*gatekeeper.Constraint{scoped("only-team-b", "namespaces: [team-b]")}, nil)
		byAction(t, d, map[v1alpha1.EnforcementAction]want{v1alpha1.EnforcementDeny: {"1 constraint scoped to other namespaces was", " (denied: policies fail closed)"}})
		d = evaluate(Options{}, []*gatekeeper.Constraint{scoped("only-team-b", "namespaces: [team-b]"), scoped("cluster", "scope: Cluster")},
			[]*gatekeeper.Constraint{scoped("only-team-b", "namespaces: [team-b]")})
		byAction(t, d, map[v1alpha1.EnforcementAction]want{v1alpha1.EnforcementDeny: {"2 constraints scoped to other namespaces were", " (denied: policies fail closed)"}})
	})
}
