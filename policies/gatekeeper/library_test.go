package gatekeeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// echoInput reports the review and parameters it was given as its one violation.
const echoInput = `package k8secho

violation[{"msg": msg}] {
	msg := json.marshal({"review": input.review, "parameters": input.parameters})
}
`

// echoFields reports some of input.review's fields; a review without userInfo has none.
const echoFields = `package k8secho

violation[{"msg": msg}] {
	msg := sprintf("%v %v %v %v", [input.review.operation, input.review.kind.kind, input.review.userInfo.username, input.review.namespace])
}
`

func review(t testing.TB, lib *gatekeeper.Library, s *gatekeeper.Subject, req *gatekeeper.Request) []gatekeeper.Result {
	t.Helper()
	return lib.Review(context.Background(), s, req)
}

// jsonOf is v as encoding/json gives it back: what a template reading v sees.
func jsonOf(t testing.TB, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

func TestReviewInput(t *testing.T) {
	web := pod("web", "shop", map[string]any{"team": "payments"})
	webSearch := pod("web", "shop", map[string]any{"team": "search"})
	shop := namespace("shop", map[string]any{"env": "prod"})
	viewer := map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "viewer"}}
	alice := map[string]any{"username": "alice", "uid": "1", "groups": []any{"developers"}}
	podKind := map[string]any{"group": "", "version": "v1", "kind": "Pod"}
	tests := []struct {
		name       string
		subject    *gatekeeper.Subject
		request    *gatekeeper.Request
		parameters string // spec.parameters of the constraint, YAML
		want       map[string]any
	}{
		{
			name:    "an object as it stands",
			subject: gatekeeper.SubjectOf(web),
			request: &gatekeeper.Request{},
			want: map[string]any{
				"review": map[string]any{
					"kind": podKind, "name": "web", "namespace": "shop", "operation": "",
					"userInfo": map[string]any{}, "object": web, "namespaceObject": nil,
				},
				"parameters": map[string]any{},
			},
		},
		{
			name: "a CREATE with its user, dry run, Namespace and parameters",
			subject: &gatekeeper.Subject{
				Object: web, Version: "v1", Kind: "Pod", Namespace: "shop", NamespaceObject: shop,
			},
			request:    &gatekeeper.Request{Operation: "CREATE", UserInfo: alice, DryRun: true},
			parameters: "{teams: [payments, search], strict: true, limits: {cpu: 2}}",
			want: map[string]any{
				"review": map[string]any{
					"kind": podKind, "name": "web", "namespace": "shop", "operation": "CREATE",
					"userInfo": alice, "dryRun": true, "object": web, "namespaceObject": shop,
				},
				"parameters": map[string]any{"teams": []any{"payments", "search"}, "strict": true, "limits": map[string]any{"cpu": 2}},
			},
		},
		{
			name: "an UPDATE with the old object",
			subject: &gatekeeper.Subject{
				Object: webSearch, OldObject: web, Version: "v1", Kind: "Pod", Namespace: "shop",
			},
			request: &gatekeeper.Request{Operation: "UPDATE", UserInfo: alice},
			want: map[string]any{
				"review": map[string]any{
					"kind": podKind, "name": "web", "namespace": "shop", "operation": "UPDATE", "userInfo": alice,
					"object": webSearch, "oldObject": web, "namespaceObject": nil,
				},
				"parameters": map[string]any{},
			},
		},
		{
			name:    "a DELETE of the object: oldObject is the object, as Gatekeeper gives it",
			subject: gatekeeper.SubjectOf(web),
			request: &gatekeeper.Request{Operation: "DELETE"},
			want: map[string]any{
				"review": map[string]any{
					"kind": podKind, "name": "web", "namespace": "shop", "operation": "DELETE",
					"userInfo": map[string]any{}, "object": web, "oldObject": web, "namespaceObject": nil,
				},
				"parameters": map[string]any{},
			},
		},
		{
			name: "a request's name over the object's",
			subject: &gatekeeper.Subject{
				Object: pod("", "shop", nil), Name: "web-7f9c", Version: "v1", Kind: "Pod", Namespace: "shop",
			},
			request: &gatekeeper.Request{Operation: "CREATE"},
			want: map[string]any{
				"review": map[string]any{
					"kind": podKind, "name": "web-7f9c", "namespace": "shop", "operation": "CREATE",
					"userInfo": map[string]any{}, "object": pod("", "shop", nil), "namespaceObject": nil,
				},
				"parameters": map[string]any{},
			},
		},
		{
			name:    "a cluster-scoped object",
			subject: gatekeeper.SubjectOf(viewer),
			request: &gatekeeper.Request{},
			want: map[string]any{
				"review": map[string]any{
					"kind": map[string]any{"group": "rbac.authorization.k8s.io", "version": "v1", "kind": "ClusterRole"},
					"name": "viewer", "namespace": "", "operation": "", "userInfo": map[string]any{}, "object": viewer, "namespaceObject": nil,
				},
				"parameters": map[string]any{},
			},
		},
	}
	tmpl := mustCompile(t, "K8sEcho", echoInput)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := "{}"
			if tt.parameters != "" {
				spec = "parameters: " + tt.parameters
			}
			lib := gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, []*gatekeeper.Constraint{constraint(t, "K8sEcho", "echo", spec)})
			rs := review(t, lib, tt.subject, tt.request)
			require.Len(t, rs, 1)
			require.NoError(t, rs[0].Err)
			var got any
			require.NoError(t, json.Unmarshal([]byte(rs[0].Msg), &got))
			assert.Equal(t, jsonOf(t, tt.want), got)
		})
	}
}

func TestReviewInputFields(t *testing.T) {
	tests := []struct {
		name    string
		subject *gatekeeper.Subject
		request *gatekeeper.Request
		want    []string
	}{
		{
			name:    "a CREATE",
			subject: gatekeeper.SubjectOf(pod("web", "shop", nil)),
			request: &gatekeeper.Request{Operation: "CREATE", UserInfo: map[string]any{"username": "alice"}},
			want:    []string{"CREATE Pod alice shop"},
		},
		{
			name:    "a DELETE",
			subject: gatekeeper.SubjectOf(pod("web", "shop", nil)),
			request: &gatekeeper.Request{Operation: "DELETE", UserInfo: map[string]any{"username": "system:serviceaccount:shop:cleaner"}},
			want:    []string{"DELETE Pod system:serviceaccount:shop:cleaner shop"},
		},
		{
			name:    "no user: userInfo is left out",
			subject: gatekeeper.SubjectOf(pod("web", "shop", nil)),
			request: &gatekeeper.Request{Operation: "CREATE"},
			want:    nil,
		},
	}
	lib := gatekeeper.NewLibrary([]*gatekeeper.Template{mustCompile(t, "K8sEcho", echoFields)}, []*gatekeeper.Constraint{constraint(t, "K8sEcho", "echo", "{}")})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, r := range review(t, lib, tt.subject, tt.request) {
				require.NoError(t, r.Err)
				got = append(got, r.Msg)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// A template may serialize its whole input (json.marshal(input), yaml.marshal(input))
// or return it in a violation's details; input.parameters must then read as the
// parameters object it is, as in Gatekeeper.
func TestReviewInputParametersSerialized(t *testing.T) {
	const marshalInput = `package k8secho

violation[{"msg": msg, "details": input}] {
	msg := json.marshal(input)
}
`
	lib := gatekeeper.NewLibrary(
		[]*gatekeeper.Template{mustCompile(t, "K8sEcho", marshalInput)},
		[]*gatekeeper.Constraint{constraint(t, "K8sEcho", "echo", "parameters: {teams: [payments]}")},
	)
	rs := review(t, lib, gatekeeper.SubjectOf(pod("web", "shop", nil)), &gatekeeper.Request{})
	require.Len(t, rs, 1)
	require.NoError(t, rs[0].Err)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(rs[0].Msg), &got))
	assert.Equal(t, map[string]any{"teams": []any{"payments"}}, got["parameters"], "json.marshal(input)")
	assert.Equal(t, map[string]any{"teams": []any{"payments"}}, jsonOf(t, rs[0].Details).(map[string]any)["parameters"], "details: input")
}

func TestReviewInventory(t *testing.T) {
	const echoInventory = `package k8secho

violation[{"msg": msg}] {
	msg := json.marshal({"inventory": data.inventory, "name": input.review.name, "parameters": input.parameters})
}
`
	opts := serverOptions()
	opts.AnyInventory = true
	tmpl, err := compileObject(t, template("K8sEcho", regoCode("", echoInventory)), opts)
	require.NoError(t, err)
	require.True(t, tmpl.Referential)
	lib := gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, []*gatekeeper.Constraint{constraint(t, "K8sEcho", "echo", "parameters: {limit: 1}")})

	other := pod("other", "shop", nil)
	inv := gatekeeper.Inventory([]*gatekeeper.Subject{gatekeeper.SubjectOf(other)})
	rs := review(t, lib, gatekeeper.SubjectOf(pod("web", "shop", nil)), &gatekeeper.Request{Inventory: inv})
	require.Len(t, rs, 1)
	require.NoError(t, rs[0].Err)
	var got any
	require.NoError(t, json.Unmarshal([]byte(rs[0].Msg), &got))
	assert.Equal(t, jsonOf(t, map[string]any{
		"inventory": map[string]any{
			"cluster":   map[string]any{},
			"namespace": map[string]any{"shop": map[string]any{"v1": map[string]any{"Pod": map[string]any{"other": other}}}},
		},
		"name":       "web",
		"parameters": map[string]any{"limit": 1},
	}), got)

	// No inventory is an empty one.
	rs = review(t, lib, gatekeeper.SubjectOf(pod("web", "shop", nil)), &gatekeeper.Request{})
	require.Len(t, rs, 1)
	require.NoError(t, rs[0].Err)
	assert.JSONEq(t, `{"inventory": {}, "name": "web", "parameters": {"limit": 1}}`, rs[0].Msg)
}

// multiMsg gives one violation per message listed in its parameters.
const multiMsg = `package %s

violation[{"msg": msg}] {
	msg := input.parameters.msgs[_]
}
`

func TestReviewOrder(t *testing.T) {
	var templates []*gatekeeper.Template
	for _, kind := range []string{"K8sZeta", "K8sAlpha", "K8sMid"} {
		templates = append(templates, mustCompile(t, kind, fmt.Sprintf(multiMsg, "k8s"+kind[3:])))
	}
	params := "parameters: {msgs: [delta, alpha, charlie, bravo]}"
	constraints := []*gatekeeper.Constraint{
		constraint(t, "K8sMid", "b", params),
		constraint(t, "K8sZeta", "a", params),
		constraint(t, "K8sAlpha", "z", params),
		constraint(t, "K8sMid", "a", params),
		constraint(t, "K8sAlpha", "m", "enforcementAction: warn\n"+params),
		constraint(t, "K8sNoTemplate", "x", params),
		constraint(t, "K8sAlpha", "audit-only", "enforcementAction: scoped\nscopedEnforcementActions: [{action: deny, enforcementPoints: [{name: audit.gatekeeper.sh}]}]\n"+params),
	}
	lib := gatekeeper.NewLibrary(templates, constraints)
	assert.False(t, lib.Empty())
	var names []string
	for _, c := range lib.Constraints() {
		names = append(names, c.Kind+"/"+c.Name)
	}
	assert.Equal(t, []string{"K8sAlpha/m", "K8sAlpha/z", "K8sMid/a", "K8sMid/b", "K8sZeta/a"}, names)
	assert.Equal(t, "K8sMid", lib.Template("K8sMid").Kind)
	assert.Nil(t, lib.Template("K8sNoTemplate"))

	var want []string
	for _, n := range names {
		for _, m := range []string{"alpha", "bravo", "charlie", "delta"} {
			want = append(want, n+": "+m)
		}
	}
	subject := gatekeeper.SubjectOf(pod("web", "shop", nil))
	for range 20 {
		var got []string
		for _, r := range review(t, lib, subject, &gatekeeper.Request{}) {
			require.NoError(t, r.Err)
			got = append(got, r.Constraint.Kind+"/"+r.Constraint.Name+": "+r.Msg)
		}
		require.Equal(t, want, got)
	}
}

func TestEmptyLibrary(t *testing.T) {
	var none *gatekeeper.Library
	assert.True(t, none.Empty())
	assert.Nil(t, none.Constraints())
	assert.Nil(t, none.Template("K8sTeam"))
	assert.Nil(t, none.Review(context.Background(), gatekeeper.SubjectOf(pod("web", "shop", nil)), &gatekeeper.Request{}))

	onlyOrphans := gatekeeper.NewLibrary(nil, []*gatekeeper.Constraint{constraint(t, "K8sTeam", "c", "{}")})
	assert.True(t, onlyOrphans.Empty())
}

func TestReviewFailures(t *testing.T) {
	tests := []struct {
		name    string
		rego    string
		spec    string
		subject *gatekeeper.Subject
		errText string
	}{
		{
			name: "conflicting values at run time",
			rego: `package k8sbroken

violation[{"msg": msg}] { msg := answer }

answer := "one" { input.review.object.kind == "Pod" }

answer := "two" { input.review.object.metadata.name == "web" }
`,
			errText: "conflicting",
		},
		{
			name:    "a message that is not a string",
			rego:    "package k8sbroken\n\nviolation[{\"msg\": count(input.review.object.spec.containers)}] { true }\n",
			errText: "msg must be a string",
		},
		{
			name:    "no message",
			rego:    "package k8sbroken\n\nviolation[{\"details\": {}}] { true }\n",
			errText: "msg must be a string",
		},
		{
			name:    "a violation that is not an object",
			rego:    "package k8sbroken\n\nviolation[\"a plain string\"] { true }\n",
			errText: "must be an object with msg",
		},
		{
			name:    "a namespace selector without the Namespace",
			rego:    "package k8sbroken\n\nviolation[{\"msg\": \"x\"}] { true }\n",
			spec:    "match: {namespaceSelector: {matchLabels: {env: prod}}}",
			subject: gatekeeper.SubjectOf(pod("web", "shop", nil)),
			errText: "unknown",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			if spec == "" {
				spec = "{}"
			}
			subject := tt.subject
			if subject == nil {
				subject = gatekeeper.SubjectOf(pod("web", "shop", nil))
			}
			subject.Generated = true
			broken := constraint(t, "K8sBroken", "broken", spec)
			fine := constraint(t, "K8sFine", "fine", "{}")
			lib := gatekeeper.NewLibrary(
				[]*gatekeeper.Template{mustCompile(t, "K8sBroken", tt.rego), mustCompile(t, "K8sFine", "package k8sfine\n\nviolation[{\"msg\": \"fine\"}] { true }\n")},
				[]*gatekeeper.Constraint{fine, broken},
			)
			rs := review(t, lib, subject, &gatekeeper.Request{})
			require.Len(t, rs, 2, "one failure, and the other constraint's violation")
			assert.Same(t, broken, rs[0].Constraint)
			require.Error(t, rs[0].Err)
			assert.ErrorContains(t, rs[0].Err, tt.errText)
			assert.Empty(t, rs[0].Msg)
			assert.True(t, rs[0].Generated)
			assert.Same(t, fine, rs[1].Constraint)
			assert.NoError(t, rs[1].Err)
			assert.Equal(t, "fine", rs[1].Msg)
			assert.True(t, rs[1].Generated)
		})
	}
}

// Dividing by zero is a built-in's error, which OPA (and so Gatekeeper, which does not
// ask for strict built-in errors) makes undefined: no violation and no failure.
func TestReviewDivisionByZeroIsUndefined(t *testing.T) {
	tmpl := mustCompile(t, "K8sRatio", `package k8sratio

violation[{"msg": msg}] {
	ratio := 100 / count(object.get(input.review.object.metadata, "labels", {}))
	msg := sprintf("ratio %v", [ratio])
}
`)
	lib := gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, []*gatekeeper.Constraint{constraint(t, "K8sRatio", "r", "{}")})
	assert.Empty(t, review(t, lib, gatekeeper.SubjectOf(pod("web", "shop", nil)), &gatekeeper.Request{}))
	rs := review(t, lib, gatekeeper.SubjectOf(pod("web", "shop", map[string]any{"a": "1", "b": "2"})), &gatekeeper.Request{})
	require.Len(t, rs, 1)
	assert.Equal(t, "ratio 50", rs[0].Msg)
}

func TestReviewDetails(t *testing.T) {
	tmpl := mustCompile(t, "K8sTeam", `package k8steam

violation[{"msg": "no team", "details": {"missing": ["team"], "have": object.keys(object.get(input.review.object.metadata, "labels", {}))}}] {
	not input.review.object.metadata.labels.team
}
`)
	lib := gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, []*gatekeeper.Constraint{constraint(t, "K8sTeam", "c", "{}")})
	rs := review(t, lib, gatekeeper.SubjectOf(pod("web", "shop", map[string]any{"tier": "front"})), &gatekeeper.Request{})
	require.Len(t, rs, 1)
	assert.Equal(t, "no team", rs[0].Msg)
	assert.Equal(t, map[string]any{"missing": []any{"team"}, "have": []any{"tier"}}, jsonOf(t, rs[0].Details))
}

func TestMatching(t *testing.T) {
	tmpl := mustCompile(t, "K8sTeam", teamV0)
	pods := constraint(t, "K8sTeam", "pods", `match: {kinds: [{apiGroups: [""], kinds: ["Pod"]}]}`)
	prod := constraint(t, "K8sTeam", "prod", `match: {namespaceSelector: {matchLabels: {env: prod}}}`)
	deployments := constraint(t, "K8sTeam", "deployments", `match: {kinds: [{apiGroups: ["apps"], kinds: ["Deployment"]}]}`)
	lib := gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, []*gatekeeper.Constraint{pods, prod, deployments})

	assert.Equal(t, []*gatekeeper.Constraint{pods, prod}, lib.Matching(webPod))
	assert.Equal(t, []*gatekeeper.Constraint{pods}, lib.Matching(labPod))
	// A match that cannot be decided is listed: its review will report why.
	assert.Equal(t, []*gatekeeper.Constraint{pods, prod}, lib.Matching(podNoNsObj))
	assert.Equal(t, []*gatekeeper.Constraint{deployments, prod}, lib.Matching(&gatekeeper.Subject{
		Object: webDeploy.Object, Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "shop",
		NamespaceObject: namespace("shop", map[string]any{"env": "prod"}),
	}))
}
