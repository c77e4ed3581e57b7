package gatekeeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// sameResults fails unless a batch's results are those of every constraint evaluated on
// its own: the same constraints, messages, details, origin and failures, in the same
// order. It returns how many violations and failures there were.
func sameResults(t *testing.T, what string, got, want []gatekeeper.Result) (violations, failures int) {
	t.Helper()
	id := func(r gatekeeper.Result) string {
		s := r.Constraint.Kind + "/" + r.Constraint.Name + ": " + r.Msg
		if r.Err != nil {
			s += " (error: " + r.Err.Error() + ")"
		}
		return s
	}
	if len(got) != len(want) {
		t.Errorf("%s: batched %d results, each on its own %d\n  batched: %v\n  each:    %v", what, len(got), len(want), mapped(got, id), mapped(want, id))
		return 0, 0
	}
	for i := range got {
		g, w := got[i], want[i]
		same := g.Constraint == w.Constraint && g.Msg == w.Msg && g.Generated == w.Generated &&
			reflect.DeepEqual(g.Details, w.Details) && (g.Err == nil) == (w.Err == nil) &&
			(g.Err == nil || g.Err.Error() == w.Err.Error())
		if !same {
			t.Errorf("%s: result %d: batched %s, details %v; each on its own %s, details %v", what, i, id(g), g.Details, id(w), w.Details)
		}
		if w.Err != nil {
			failures++
		} else {
			violations++
		}
	}
	return violations, failures
}

func mapped[T any](s []T, f func(T) string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = f(x)
	}
	return out
}

// benchLibrary is the 50 templates and constraints of test/bench/constraints, compiled
// as the server compiles them.
func benchLibrary(t testing.TB) *gatekeeper.Library {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "test", "bench", "constraints", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var templates []*gatekeeper.Template
	var constraints []*gatekeeper.Constraint
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		objs, err := gatekeeper.DecodeObjects(data)
		require.NoError(t, err)
		for _, obj := range objs {
			if obj["kind"] == "ConstraintTemplate" {
				tmpl, err := compileObject(t, obj, serverOptions())
				require.NoError(t, err, f)
				templates = append(templates, tmpl)
				continue
			}
			c, err := gatekeeper.ParseConstraint(obj)
			require.NoError(t, err, f)
			constraints = append(constraints, c)
		}
	}
	lib := gatekeeper.NewLibrary(templates, constraints)
	require.Len(t, lib.Constraints(), len(constraints))
	return lib
}

// benchReview is one review of the differential test: an object and its request.
type benchReview struct {
	name    string
	subject *gatekeeper.Subject
	request *gatekeeper.Request
}

// benchReviews are reviews of compositions of fireworks-app (every example values
// file of every version, and each with the values the bench's denial probe breaks the
// library with), each as reviewConstraints makes them: the composition, the objects
// its chart renders in its namespace, the Pods they imply; created, and updated from
// the previous example; in a tenant namespace and in reserved ones. Then objects made
// to break each kind of check.
func benchReviews(t *testing.T) []benchReview {
	t.Helper()
	var out []benchReview
	alice := map[string]any{"username": "alice", "uid": "1", "groups": []any{"developers"}, "extra": map[string]any{}}
	nsObject := func(ns string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns,
			"labels": map[string]any{"team": "a", "kubernetes.io/metadata.name": ns}}}
	}
	probe := func(spec map[string]any) map[string]any {
		s := maps.Clone(spec)
		s["replicaCount"] = int64(9)
		s["image"] = map[string]any{"repository": "quay.io/acme/nginx", "tag": "latest", "pullPolicy": "Never"}
		s["service"] = map[string]any{"type": "LoadBalancer", "port": int64(22)}
		s["storage"] = map[string]any{"size": "500Gi"}
		s["cache"] = map[string]any{"enabled": true, "maxMemory": "4Gi"}
		return s
	}
	for _, version := range samplecharts.Versions() {
		ch, err := samplecharts.Load(version)
		require.NoError(t, err)
		examples, err := samplecharts.Examples(version)
		require.NoError(t, err)
		apiVersion := "composition.krateo.io/v" + strings.ReplaceAll(version, ".", "-")
		var previous map[string]any
		for _, ex := range examples {
			var spec map[string]any
			require.NoError(t, yaml.Unmarshal(ex.Values, &spec))
			for _, probed := range []bool{false, true} {
				labels := map[string]any{"team": "a"}
				annotations := map[string]any{"krateo.io/paused": "false"}
				if probed {
					spec = probe(spec)
					labels["team"] = "Payments"
					annotations["krateo.io/paused"] = "yes"
				}
				for _, ns := range []string{"bench", "default"} {
					comp := map[string]any{"apiVersion": apiVersion, "kind": "FireworksApp",
						"metadata": map[string]any{"name": "x", "namespace": ns, "labels": labels, "annotations": annotations}, "spec": spec}
					name := fmt.Sprintf("%s %s probed=%v in %s", version, ex.Name, probed, ns)
					self := gatekeeper.SubjectOf(comp)
					self.NamespaceObject = nsObject(ns)
					out = append(out, benchReview{name + ": the composition", self, &gatekeeper.Request{Operation: "CREATE", UserInfo: alice}})
					if previous != nil {
						upd := gatekeeper.SubjectOf(comp)
						upd.NamespaceObject, upd.OldObject = nsObject(ns), previous
						out = append(out, benchReview{name + ": the composition's update", upd, &gatekeeper.Request{Operation: "UPDATE", UserInfo: alice}})
					}
					previous = comp
					objs, err := policies.Render(ch, spec, policies.RenderOptions{ReleaseName: "x", Namespace: ns})
					if err != nil {
						continue // values its chart refuses: the composition alone
					}
					subjects := renderedSubjects(objs, ns, nsObject(ns))
					req := &gatekeeper.Request{Operation: "CREATE", UserInfo: alice, Inventory: gatekeeper.Inventory(subjects)}
					for i, s := range subjects {
						out = append(out, benchReview{fmt.Sprintf("%s: %s", name, objs[i].Ref()), s, req})
						if pod := gatekeeper.Expand(s); pod != nil {
							out = append(out, benchReview{fmt.Sprintf("%s: %s's pod", name, objs[i].Ref()), pod, req})
						}
					}
				}
			}
		}
	}
	// Objects that break the checks the compositions leave alone.
	pod := func(spec map[string]any) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "namespace": "bench",
			"labels": map[string]any{"app.kubernetes.io/instance": "rel"}}, "spec": spec}
	}
	container := func(fields map[string]any) map[string]any {
		c := map[string]any{"name": "web", "image": "registry.example.com/web:1"}
		maps.Copy(c, fields)
		return map[string]any{"containers": []any{c}, "initContainers": []any{maps.Clone(c)}}
	}
	object := func(apiVersion, kind, name string, fields map[string]any) map[string]any {
		obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name, "namespace": "bench",
			"labels":      map[string]any{"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": "rel", "app.kubernetes.io/version": "latest"},
			"annotations": map[string]any{"note": strings.Repeat("x", 20000)}}}
		maps.Copy(obj, fields)
		return obj
	}
	many := map[string]any{"DB_PASSWORD": "x", "lower": "v", "BIG": strings.Repeat("x", 9000)}
	for i := range 21 {
		many[fmt.Sprintf("KEY_%d", i)] = "v"
	}
	for i, obj := range []map[string]any{
		pod(container(map[string]any{"image": "nginx", "imagePullPolicy": "Always", "securityContext": map[string]any{
			"privileged": true, "allowPrivilegeEscalation": true, "runAsUser": 0, "procMount": "Unmasked",
			"capabilities": map[string]any{"add": []any{"SYS_ADMIN", "NET_BIND_SERVICE"}}},
			"ports":   []any{map[string]any{"containerPort": 22, "hostPort": 80}},
			"envFrom": []any{map[string]any{"configMapRef": map[string]any{"name": "other-config"}}}})),
		pod(map[string]any{"hostNetwork": true, "hostPID": true, "automountServiceAccountToken": true,
			"securityContext": map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}},
			"volumes":         []any{map[string]any{"name": "etc", "hostPath": map[string]any{"path": "/etc"}}, map[string]any{"name": "n", "nfs": map[string]any{"server": "x"}}},
			"containers":      []any{map[string]any{"name": "Web_1", "image": "quay.io/x:latest"}, map[string]any{"name": "b"}, map[string]any{"name": "c"}, map[string]any{"name": "d"}, map[string]any{"name": "e"}}}),
		object("apps/v1", "Deployment", strings.Repeat("d", 60), map[string]any{"spec": map[string]any{"replicas": 12, "revisionHistoryLimit": 50,
			"selector": map[string]any{"matchLabels": map[string]any{"app": "a"}},
			"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": "100%"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "b"}}, "spec": container(map[string]any{"image": "nginx"})}}}),
		object("apps/v1", "StatefulSet", "other", map[string]any{"spec": map[string]any{"template": map[string]any{"spec": container(nil)}}}),
		object("apps/v1", "DaemonSet", "Bad_Name", map[string]any{"spec": map[string]any{"template": map[string]any{"spec": container(nil)}}}),
		object("v1", "Service", "rel-svc", map[string]any{"spec": map[string]any{"type": "NodePort", "externalIPs": []any{"1.2.3.4"},
			"ports": []any{map[string]any{"port": 80, "nodePort": 30001, "targetPort": 8080}}}}),
		object("v1", "ConfigMap", "rel-config", map[string]any{"data": many}),
	} {
		s := gatekeeper.SubjectOf(obj)
		s.NamespaceObject = nsObject("bench")
		out = append(out, benchReview{fmt.Sprintf("broken object %d (%s)", i, s.Kind), s, &gatekeeper.Request{Operation: "CREATE", UserInfo: alice}})
		if p := gatekeeper.Expand(s); p != nil {
			out = append(out, benchReview{fmt.Sprintf("broken object %d (%s)'s pod", i, s.Kind), p, &gatekeeper.Request{Operation: "CREATE"}})
		}
	}
	return out
}

// The batch gives exactly the verdicts of every constraint evaluated on its own with
// its template's own query, over the bench's library of 50 templates (26 of them Rego
// v0, 11 with libs) and every review of every composition of the sample chart.
func TestBatchMatchesEachOnTheBenchLibrary(t *testing.T) {
	reviews := benchReviews(t)
	t.Run("direct", func(t *testing.T) { batchMatchesEach(t, benchLibrary(t), "direct", reviews) })
	// The same templates evaluated wrapped, as those that read input otherwise are.
	var wrapped *gatekeeper.Library
	gatekeeper.WrapAll(func() { wrapped = benchLibrary(t) })
	t.Run("wrapped", func(t *testing.T) { batchMatchesEach(t, wrapped, "wrapped", reviews) })
}

func batchMatchesEach(t *testing.T, lib *gatekeeper.Library, mode string, reviews []benchReview) {
	modes := lib.BatchModes()
	for _, c := range lib.Constraints() {
		want := mode
		if mode == "wrapped" && lib.Template(c.Kind).Referential {
			want = "wrapped referential"
		}
		assert.Equal(t, want, modes[c.Kind+"/"+c.Name], "constraint %s/%s", c.Kind, c.Name)
	}
	ctx := context.Background()
	var violations, failures, matched int
	seen := map[string]bool{}
	batchFailures := gatekeeper.BatchFailures()
	for _, r := range reviews {
		got := lib.Review(ctx, r.subject, r.request)
		want := lib.ReviewEach(ctx, r.subject, r.request)
		v, f := sameResults(t, r.name, got, want)
		violations, failures = violations+v, failures+f
		matched += len(lib.Matching(r.subject))
		for _, res := range want {
			seen[res.Constraint.Kind+"/"+res.Constraint.Name] = true
		}
	}
	t.Logf("%d (object, constraint) pairs matched; %d violations of %d constraints, %d failures", matched, violations, len(seen), failures)
	assert.Zero(t, failures)
	assert.Equal(t, batchFailures, gatekeeper.BatchFailures(), "no batch failed: the batches gave every verdict")
	assert.Greater(t, violations, 500)
	assert.Len(t, seen, len(lib.Constraints()), "every constraint finds something in the corpus")
}

// The same over the gator suites of testdata, their templates and constraints in one
// library: each case's object reviewed by all of them.
func TestBatchMatchesEachOnTheSuites(t *testing.T) {
	paths, err := filepath.Glob("testdata/*/suite.yaml")
	require.NoError(t, err)
	more, err := filepath.Glob("testdata/suites/*/suite.yaml")
	require.NoError(t, err)
	paths = append(paths, more...)
	for _, wrapped := range []bool{false, true} {
		t.Run(fmt.Sprintf("wrapped=%v", wrapped), func(t *testing.T) {
			var lib *gatekeeper.Library
			var cases []gatekeeper.SuiteCaseInput
			var err error
			load := func() { lib, cases, err = gatekeeper.LoadSuitesTogether(context.Background(), paths, serverOptions()) }
			if wrapped {
				gatekeeper.WrapAll(load)
			} else {
				load()
			}
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(lib.Constraints()), 4)
			require.Len(t, lib.BatchModes(), len(lib.Constraints()))
			t.Logf("modes: %v", lib.BatchModes())
			suiteBatchMatchesEach(t, lib, cases)
		})
	}
}

func suiteBatchMatchesEach(t *testing.T, lib *gatekeeper.Library, cases []gatekeeper.SuiteCaseInput) {
	ctx := context.Background()
	var violations, failures int
	batchFailures := gatekeeper.BatchFailures()
	errs := map[string]bool{}
	for _, c := range cases {
		want := lib.ReviewEach(ctx, c.Subject, c.Request)
		v, f := sameResults(t, c.Name, lib.Review(ctx, c.Subject, c.Request), want)
		violations, failures = violations+v, failures+f
		for _, r := range want {
			if r.Err != nil {
				errs[r.Err.Error()] = true
			}
		}
	}
	t.Logf("%d cases: %d violations, %d failures: %v", len(cases), violations, failures, slices.Sorted(maps.Keys(errs)))
	assert.Equal(t, batchFailures, gatekeeper.BatchFailures(), "no batch failed")
	assert.Positive(t, violations)
}

// library compiles templates (kind → template object) and constraints (kind, name,
// spec in YAML) into a library.
func library(t *testing.T, templates map[string]map[string]any, constraints ...[3]string) *gatekeeper.Library {
	t.Helper()
	var tmpls []*gatekeeper.Template
	for _, kind := range slices.Sorted(maps.Keys(templates)) {
		opts := serverOptions()
		opts.AnyInventory = true
		tmpl, err := compileObject(t, templates[kind], opts)
		require.NoError(t, err, kind)
		tmpls = append(tmpls, tmpl)
	}
	var cs []*gatekeeper.Constraint
	for _, c := range constraints {
		cs = append(cs, constraint(t, c[0], c[1], c[2]))
	}
	return gatekeeper.NewLibrary(tmpls, cs)
}

func messagesOf(t *testing.T, rs []gatekeeper.Result) []string {
	t.Helper()
	var out []string
	for _, r := range rs {
		if r.Err != nil {
			out = append(out, r.Constraint.Name+": error: "+r.Err.Error())
			continue
		}
		out = append(out, r.Constraint.Name+": "+r.Msg)
	}
	return out
}

// Templates evaluated in one batch stay apart: two templates of the same package,
// each with a lib of the same package defining the same rule differently, one Rego
// v0 and the other v1, each see their own; two constraints of one template see their
// own parameters, though the batch evaluates the template's rules for both.
func TestBatchKeepsTemplatesApart(t *testing.T) {
	v0 := template("K8sSameV0", regoCode("v0", `package same

import data.lib.util

tag := input.parameters.tag

violation[{"msg": msg, "details": {"tag": tag}}] {
	input.review.object.kind == "Pod"
	msg := sprintf("v0 %v %v %v", [util.label, tag, data.same.helper])
}

helper := concat("-", [util.label, tag])
`, `package lib.util

label := "zero"
`))
	v1 := template("K8sSameV1", regoCode("v1", `package same

import data.lib.util

violation contains {"msg": msg} if {
	msg := sprintf("v1 %v %v %v", [util.label, util.twice, object.get(input.parameters, "tag", "none")])
}
`, `package lib.util

label := "one"

twice := concat("", [label, label, data.lib.more.suffix])
`, `package lib.more

suffix := input.review.object.metadata.name
`))
	lib := library(t, map[string]map[string]any{"K8sSameV0": v0, "K8sSameV1": v1},
		[3]string{"K8sSameV0", "a", "parameters: {tag: alpha}"},
		[3]string{"K8sSameV0", "b", "parameters: {tag: beta}"},
		[3]string{"K8sSameV1", "c", "{}"},
		[3]string{"K8sSameV1", "d", "parameters: {tag: delta}"},
	)
	assert.Equal(t, map[string]string{"K8sSameV0/a": "direct", "K8sSameV0/b": "direct", "K8sSameV1/c": "direct", "K8sSameV1/d": "direct"}, lib.BatchModes())
	s := gatekeeper.SubjectOf(pod("web", "shop", nil))
	got := lib.Review(context.Background(), s, nil)
	sameResults(t, "the pod", got, lib.ReviewEach(context.Background(), s, nil))
	assert.Equal(t, []string{
		"a: v0 zero alpha zero-alpha",
		"b: v0 zero beta zero-beta",
		"c: v1 one oneoneweb none",
		"d: v1 one oneoneweb delta",
	}, messagesOf(t, got))
	assert.Equal(t, map[string]any{"tag": "beta"}, got[1].Details)
}

// A template that reads input otherwise than by input.review and input.parameters, or
// uses `with`, is evaluated with the very input its own query gives it; a referential
// one with data.inventory as its own query has it.
func TestBatchWrapsTemplatesThatReadInputAsAWhole(t *testing.T) {
	templates := map[string]map[string]any{
		"K8sWhole": template("K8sWhole", regoCode("v1", `package k8swhole

violation contains {"msg": json.marshal(input)} if input.review.kind.kind == "Pod"
`)),
		"K8sKeys": template("K8sKeys", regoCode("v0", `package k8skeys

violation[{"msg": msg}] {
	keys := {k | input[k]}
	msg := concat(",", sort([k | keys[k]]))
}
`)),
		"K8sWith": template("K8sWith", regoCode("v1", `package k8swith

name := input.review.object.metadata.name

violation contains {"msg": concat(" ", [name, other])} if {
	other := name with input.review.object.metadata.name as "other"
}
`)),
		"K8sSlotDirect": template("K8sSlotDirect", regoCode("v1", `package k8sslotdirect

import data.inventory

violation contains {"msg": sprintf("%v: %v", [input.parameters.prefix, name])} if {
	some name, _ in inventory.namespace[input.review.namespace].v1.Pod
}
`)),
		"K8sSlotWrapped": template("K8sSlotWrapped", regoCode("v0", `package k8sslotwrapped

violation[{"msg": msg}] {
	count(data.inventory.namespace[input.review.namespace].v1.Pod) > 0
	msg := sprintf("%v pods beside %v", [count(data.inventory.namespace[input.review.namespace].v1.Pod), object.get(input, ["review", "name"], "")])
}
`)),
	}
	lib := library(t, templates,
		[3]string{"K8sWhole", "whole", "parameters: {a: [1, 2]}"},
		[3]string{"K8sKeys", "keys", "{}"},
		[3]string{"K8sWith", "with", "{}"},
		[3]string{"K8sSlotDirect", "slot", "parameters: {prefix: taken}"},
		[3]string{"K8sSlotWrapped", "slots", "{}"},
	)
	assert.Equal(t, map[string]string{
		"K8sWhole/whole": "wrapped", "K8sKeys/keys": "wrapped", "K8sWith/with": "wrapped",
		"K8sSlotDirect/slot": "direct", "K8sSlotWrapped/slots": "wrapped referential",
	}, lib.BatchModes())
	web := pod("web", "shop", nil)
	req := &gatekeeper.Request{Operation: "CREATE", Inventory: gatekeeper.Inventory([]*gatekeeper.Subject{gatekeeper.SubjectOf(web), gatekeeper.SubjectOf(pod("db", "shop", nil))})}
	s := gatekeeper.SubjectOf(web)
	got := lib.Review(context.Background(), s, req)
	sameResults(t, "the pod", got, lib.ReviewEach(context.Background(), s, req))
	msgs := messagesOf(t, got)
	require.Len(t, msgs, 6)
	assert.Equal(t, []string{"keys: parameters,review", "slot: taken: db", "slot: taken: web", "slots: 2 pods beside web", "with: web other"}, slices.Concat(msgs[:4], msgs[5:]))
	var whole map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(msgs[4], "whole: ")), &whole))
	assert.Equal(t, []string{"parameters", "review"}, slices.Sorted(maps.Keys(whole)), "the template sees the input its own query gives it")
	assert.Equal(t, map[string]any{"a": []any{1.0, 2.0}}, whole["parameters"])
}

// An evaluation error in one template (a conflict, in Rego v0 and v1) fails the batch;
// the object's constraints are then evaluated one by one, so the error is its
// constraint's alone and the others report their violations.
func TestBatchEvaluationErrorIsItsConstraints(t *testing.T) {
	templates := map[string]map[string]any{
		"K8sConflict": template("K8sConflict", regoCode("v1", `package k8sconflict

x := 1 if input.review.object
x := 2 if input.review.object

violation contains {"msg": sprintf("x is %v", [x])} if true
`)),
		"K8sConflictV0": template("K8sConflictV0", regoCode("v0", `package k8sconflictv0

f(a) = 1 { a }
f(a) = 2 { a }

violation[{"msg": msg}] {
	msg := sprintf("f is %v", [f(true)])
}
`)),
		"K8sName": template("K8sName", regoCode("", `package k8sname

violation[{"msg": msg}] {
	msg := sprintf("%v %v", [input.parameters.say, input.review.object.metadata.name])
}
`)),
	}
	lib := library(t, templates,
		[3]string{"K8sConflict", "conflict", "{}"},
		[3]string{"K8sConflictV0", "conflict-v0", "{}"},
		[3]string{"K8sName", "hello", "parameters: {say: hello}"},
		[3]string{"K8sName", "bye", "parameters: {say: bye}"},
	)
	require.Len(t, lib.BatchModes(), 4)
	s := gatekeeper.SubjectOf(pod("web", "shop", nil))
	got := lib.Review(context.Background(), s, nil)
	sameResults(t, "the pod", got, lib.ReviewEach(context.Background(), s, nil))
	require.Len(t, got, 4)
	assert.Equal(t, "conflict", got[0].Constraint.Name)
	assert.ErrorContains(t, got[0].Err, "eval_conflict_error")
	assert.Equal(t, "conflict-v0", got[1].Constraint.Name)
	assert.ErrorContains(t, got[1].Err, "eval_conflict_error")
	assert.Equal(t, []string{"bye: bye web", "hello: hello web"}, messagesOf(t, got[2:]))

	// Without the failing templates' constraints, the batch reports alone.
	lib = library(t, templates,
		[3]string{"K8sName", "hello", "parameters: {say: hello}"},
		[3]string{"K8sName", "bye", "parameters: {say: bye}"},
	)
	assert.Equal(t, []string{"bye: bye web", "hello: hello web"}, messagesOf(t, lib.Review(context.Background(), s, nil)))
}

// A template whose relocation could change what it computes is evaluated on its own,
// beside a batch of the others.
func TestBatchLeavesOutWhatItCannotRelocate(t *testing.T) {
	templates := map[string]map[string]any{
		"K8sMeta": template("K8sMeta", regoCode("v1", `package k8smeta

violation contains {"msg": json.marshal(rego.metadata.chain())} if true
`)),
		"K8sUnderInventory": template("K8sUnderInventory", regoCode("v0", `package inventory.mine

violation[{"msg": msg}] {
	msg := data.inventory.mine.name
}

name := "mine"
`)),
		"K8sPlain": template("K8sPlain", regoCode("v1", `package k8splain

violation contains {"msg": input.review.object.metadata.name} if true
`)),
	}
	lib := library(t, templates,
		[3]string{"K8sMeta", "meta", "{}"},
		[3]string{"K8sUnderInventory", "under-inventory", "{}"},
		[3]string{"K8sPlain", "a", "{}"},
		[3]string{"K8sPlain", "b", "{}"},
	)
	assert.Equal(t, map[string]string{"K8sPlain/a": "direct", "K8sPlain/b": "direct"}, lib.BatchModes())
	s := gatekeeper.SubjectOf(pod("web", "shop", nil))
	got := lib.Review(context.Background(), s, nil)
	sameResults(t, "the pod", got, lib.ReviewEach(context.Background(), s, nil))
	assert.Equal(t, []string{`meta: [{"path":["k8smeta","violation"]}]`, "a: web", "b: web", "under-inventory: mine"}, messagesOf(t, got))
}

// FuzzBatchMatchesEach: any object, created or updated, is judged by the bench
// library's batch exactly as by each of its constraints on its own.
func FuzzBatchMatchesEach(f *testing.F) {
	lib := benchLibrary(f)
	f.Add([]byte(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "bench"}, "spec": {"hostNetwork": true, "containers": [{"name": "Web_1", "image": "nginx:latest", "securityContext": {"privileged": true, "runAsUser": 0}}]}}`), "CREATE", true)
	f.Add([]byte(`{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x-fireworks-app", "namespace": "bench", "labels": {"app.kubernetes.io/instance": "x"}}, "spec": {"replicas": 10, "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "a", "ports": [{"containerPort": 22, "hostPort": 22}]}]}}}}`), "UPDATE", false)
	f.Add([]byte(`{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"}, "spec": {"type": "NodePort", "ports": [{"port": 1, "nodePort": 30000}, {"name": 7}]}}`), "CREATE", true)
	f.Add([]byte(`{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "bench", "annotations": {"a": null}}, "data": {"password": "x", "k": 1}}`), "", false)
	f.Add([]byte(`{"apiVersion": "composition.krateo.io/v1-1-5", "kind": "FireworksApp", "metadata": {"name": "x", "namespace": "bench", "labels": {"team": 3}}, "spec": {"replicaCount": 99, "storage": {"size": "1Ti"}, "image": {"tag": "latest"}}}`), "UPDATE", true)
	f.Add([]byte(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": {"x": 1}}, "spec": {"containers": "none", "volumes": [1, {"hostPath": 2}]}}`), "DELETE", false)
	f.Fuzz(func(t *testing.T, objectJSON []byte, operation string, inNamespace bool) {
		var obj map[string]any
		if json.Unmarshal(objectJSON, &obj) != nil || obj == nil {
			return
		}
		s := gatekeeper.SubjectOf(obj)
		if operation == "UPDATE" {
			s.OldObject = map[string]any{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": obj["metadata"], "spec": map[string]any{"storage": map[string]any{"size": "1Gi"}}}
		}
		if inNamespace {
			s.NamespaceObject = map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": s.Namespace, "labels": map[string]any{"team": "a"}}}
		}
		req := &gatekeeper.Request{Operation: operation, UserInfo: map[string]any{"username": operation}, Inventory: gatekeeper.Inventory([]*gatekeeper.Subject{s})}
		subjects := []*gatekeeper.Subject{s}
		if pod := gatekeeper.Expand(s); pod != nil {
			subjects = append(subjects, pod)
		}
		for _, x := range subjects {
			sameResults(t, string(objectJSON), lib.Review(context.Background(), x, req), lib.ReviewEach(context.Background(), x, req))
		}
	})
}

// A deadline that comes during a batch leaves no constraint silently passed: the slow
// one fails as a constraint the deadline came before does, and the others fail so or
// report what they find, each on its own.
func TestBatchDeadline(t *testing.T) {
	templates := map[string]map[string]any{
		"K8sSlow": template("K8sSlow", regoCode("v1", `package k8sslow

violation contains {"msg": "never"} if {
	count([1 | walk(input.review.object, [p1, v1]); walk(input.review.object, [p2, v2]); p1 != p2; v1 == v2]) > 1000000000
}
`)),
		"K8sName": template("K8sName", regoCode("", `package k8sname

violation[{"msg": msg}] {
	msg := input.review.object.metadata.name
}
`)),
	}
	lib := library(t, templates,
		[3]string{"K8sName", "name", "{}"},
		[3]string{"K8sSlow", "slow", "{}"},
	)
	require.Len(t, lib.BatchModes(), 2)
	annotations := map[string]any{}
	for i := range 3000 {
		annotations[fmt.Sprintf("example.com/%d", i)] = "v"
	}
	web := pod("web", "shop", nil)
	web["metadata"].(map[string]any)["annotations"] = annotations
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	got := lib.Review(ctx, gatekeeper.SubjectOf(web), nil)
	byName := map[string][]gatekeeper.Result{}
	for _, r := range got {
		byName[r.Constraint.Name] = append(byName[r.Constraint.Name], r)
	}
	require.Len(t, byName["slow"], 1)
	assert.Error(t, byName["slow"][0].Err)
	require.Len(t, byName["name"], 1)
	if r := byName["name"][0]; r.Err == nil {
		assert.Equal(t, "web", r.Msg)
	}
}

// What decides how a template is evaluated in a batch: how it reads input, and whether
// its relocation could change what it computes.
func TestBatchModes(t *testing.T) {
	for _, tc := range []struct {
		name, version, rego string
		want                string
	}{
		{"review and parameters", "v1", "violation contains {\"msg\": input.parameters.m} if input.review.object", "direct"},
		{"some in parameters", "v1", "violation contains {\"msg\": m} if { some m in input.parameters.ms; input.review }", "direct"},
		{"imported parameters", "v1", "import input.parameters as p\n\nviolation contains {\"msg\": p.m} if true", "direct"},
		{"template string", "v1", "violation contains {\"msg\": $\"{input.parameters.m}\"} if true", "direct"},
		{"input as a whole", "v1", "violation contains {\"msg\": json.marshal(input)} if true", "wrapped"},
		{"input in a template string", "v1", "violation contains {\"msg\": $\"{input}\"} if true", "wrapped"},
		{"input by a variable key", "v1", "violation contains {\"msg\": k} if input[k]", "wrapped"},
		{"another field of input", "v1", "violation contains {\"msg\": \"x\"} if input.other", "wrapped"},
		{"imported input", "v1", "import input\n\nviolation contains {\"msg\": \"x\"} if input.review", "wrapped"},
		{"with", "v1", "violation contains {\"msg\": x} if x := input.review.name with input.review.name as \"y\"", "wrapped"},
		{"a rule named input", "v0", "input = {\"parameters\": {\"m\": \"mine\"}}\n\nviolation[{\"msg\": input.parameters.m}] { true }", "wrapped"},
		{"a local named input", "v0", "violation[{\"msg\": m}] { input := {\"parameters\": {\"m\": \"mine\"}}; m := input.parameters.m }", "wrapped"},
		{"a rule named data", "v0", "data = {\"lib\": {\"x\": 1}}\n\nviolation[{\"msg\": \"x\"}] { true }", ""},
		{"rego.metadata", "v1", "violation contains {\"msg\": json.marshal(rego.metadata.rule())} if true", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := template("K8sMode", regoCode(tc.version, "package k8smode\n\n"+tc.rego+"\n"))
			opts := serverOptions()
			opts.AnyInventory = true
			compiled, err := compileObject(t, tmpl, opts)
			if err != nil {
				t.Skipf("does not compile: %v", err)
			}
			lib := gatekeeper.NewLibrary([]*gatekeeper.Template{compiled}, []*gatekeeper.Constraint{
				constraint(t, "K8sMode", "a", "parameters: {m: a, ms: [a, b]}"), constraint(t, "K8sMode", "b", "parameters: {m: b, ms: [c]}"),
			})
			assert.Equal(t, tc.want, lib.BatchModes()["K8sMode/a"])
			s := gatekeeper.SubjectOf(pod("web", "shop", nil))
			sameResults(t, tc.name, lib.Review(context.Background(), s, nil), lib.ReviewEach(context.Background(), s, nil))
		})
	}
}

// Building a library (which relocates templates' modules into batches) while templates
// evaluate elsewhere in the process shares nothing they read: under -race, a global
// term written by the relocation was reported here.
func TestNewLibraryWhileTemplatesEvaluate(t *testing.T) {
	team := template("K8sTeam", regoCode("", teamV0))
	lib := library(t, map[string]map[string]any{"K8sTeam": team},
		[3]string{"K8sTeam", "one", `match: {kinds: [{apiGroups: [""], kinds: [Pod]}]}`})
	subject := gatekeeper.SubjectOf(pod("web", "shop", nil))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			lib.Review(context.Background(), subject, &gatekeeper.Request{Operation: "CREATE"})
		}
	}()
	for i := range 20 {
		library(t, map[string]map[string]any{"K8sTeam": team},
			[3]string{"K8sTeam", fmt.Sprintf("a%d", i), `match: {kinds: [{apiGroups: [""], kinds: [Pod]}]}`},
			[3]string{"K8sTeam", fmt.Sprintf("b%d", i), `match: {kinds: [{apiGroups: [""], kinds: [Pod]}]}`})
	}
	<-done
}
