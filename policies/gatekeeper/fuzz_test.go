package gatekeeper_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// FuzzConstraintMatch: any constraint and object give a constraint or an error and a
// match or an error, never a panic; the constraint with its match removed matches
// every object that has a kind.
func FuzzConstraintMatch(f *testing.F) {
	f.Add([]byte(`{"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sTeam", "metadata": {"name": "c"}, "spec": {"match": {"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}], "namespaces": ["kube-*"], "excludedNamespaces": ["*-system"]}}}`),
		[]byte(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "kube-system", "labels": {"team": "a"}}}`))
	f.Add([]byte(`{"apiVersion": "constraints.gatekeeper.sh/v1", "kind": "K8sTeam", "metadata": {"name": "c"}, "spec": {"match": {"scope": "Cluster", "labelSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}, "name": "we*"}, "enforcementAction": "warn"}}`),
		[]byte(`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web", "labels": {"team": "b"}}}`))
	f.Add([]byte(`{"apiVersion": "constraints.gatekeeper.sh/v1", "kind": "K8sTeam", "metadata": {"name": "c"}, "spec": {"match": {"namespaceSelector": {"matchLabels": {"env": "prod"}}, "source": "Generated"}, "enforcementAction": "scoped", "scopedEnforcementActions": [{"action": "deny", "enforcementPoints": [{"name": "*"}]}]}}`),
		[]byte(`{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}, "spec": {"template": {"spec": {"containers": []}}}}`))
	f.Add([]byte(`{"apiVersion": "constraints.gatekeeper.sh/v1", "kind": "K8sTeam", "metadata": {"name": "c"}, "spec": {"match": {"labelSelector": {"matchLabels": {"bad key!": "x"}}, "kinds": "Pod"}, "parameters": {"a": [1, null, {"b": 2.5}]}}}`),
		[]byte(`{"apiVersion": 3, "kind": "Pod", "metadata": {"name": ["x"], "namespace": {"a": 1}, "labels": {"team": 7}}}`))
	f.Add([]byte(`{"apiVersion": "constraints.gatekeeper.sh/v1", "kind": "K", "metadata": {"name": "c"}, "spec": {"match": {"name": "*", "namespaces": ["*"]}}}`),
		[]byte(`{"kind": "CronJob", "apiVersion": "batch/v1", "metadata": {"generateName": "x-"}, "spec": {"jobTemplate": {"spec": {"template": 1}}}}`))
	f.Fuzz(func(t *testing.T, constraintJSON, objectJSON []byte) {
		var obj map[string]any
		if json.Unmarshal(objectJSON, &obj) != nil || obj == nil {
			return
		}
		s := gatekeeper.SubjectOf(obj)
		old := gatekeeper.SubjectOf(obj)
		old.OldObject = obj
		gatekeeper.Inventory([]*gatekeeper.Subject{s})
		subjects := []*gatekeeper.Subject{s, old}
		if pod := gatekeeper.Expand(s); pod != nil {
			subjects = append(subjects, pod)
		}

		var cobj map[string]any
		if json.Unmarshal(constraintJSON, &cobj) == nil && cobj != nil {
			if c, err := gatekeeper.ParseConstraint(cobj); err == nil {
				for _, x := range subjects {
					_, _ = c.Matches(x)
				}
			}
			if spec, ok := cobj["spec"].(map[string]any); ok {
				delete(spec, "match")
			}
		} else {
			cobj = map[string]any{}
		}
		cobj["apiVersion"] = "constraints.gatekeeper.sh/v1beta1"
		cobj["kind"] = "K8sAny"
		cobj["metadata"] = map[string]any{"name": "any"}
		c, err := gatekeeper.ParseConstraint(cobj)
		if err != nil {
			return // its action or parameters are bad, not its match
		}
		if s.Kind == "" {
			return
		}
		for _, x := range subjects {
			ok, err := c.Matches(x)
			if err != nil || !ok {
				t.Fatalf("a constraint without a match must match %s, got %v, %v", objectJSON, ok, err)
			}
		}
	})
}

// echoName reports the reviewed object's name as its message.
const echoName = `package k8sechoname

violation[{"msg": msg}] {
	msg := input.review.object.metadata.name
}
`

// FuzzReviewInput: any object is reviewed without a panic; its name, when a string,
// comes back as the template read it, and any other name is a failed evaluation.
func FuzzReviewInput(f *testing.F) {
	tmpl := mustCompile(f, "K8sEchoName", echoName)
	c := constraint(f, "K8sEchoName", "echo", "parameters: {x: [1, 2]}")
	lib := gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, []*gatekeeper.Constraint{c})
	f.Add([]byte(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"}}`), "CREATE")
	f.Add([]byte(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wéb\u0000\"\\%v"}}`), "DELETE")
	f.Add([]byte(`{"metadata": {"name": 12.5e300}}`), "")
	f.Add([]byte(`{"metadata": {"name": {"a": [null, true]}}}`), "UPDATE")
	f.Add([]byte(`{"metadata": {"name": null}}`), "")
	f.Add([]byte(`{"metadata": "x", "spec": [1, [2, [3]]]}`), "")
	f.Add([]byte(`{"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": ""}, "spec": {"template": {}}}`), "CONNECT")
	f.Fuzz(func(t *testing.T, objectJSON []byte, operation string) {
		var obj map[string]any
		if json.Unmarshal(objectJSON, &obj) != nil || obj == nil {
			return
		}
		s := gatekeeper.SubjectOf(obj)
		req := &gatekeeper.Request{Operation: operation, UserInfo: map[string]any{"username": operation}}
		rs := lib.Review(context.Background(), s, req)
		meta, _ := obj["metadata"].(map[string]any)
		name, present := meta["name"]
		switch name := name.(type) {
		case string:
			if len(rs) != 1 || rs[0].Err != nil || rs[0].Msg != name {
				t.Fatalf("the name %q came back as %+v", name, rs)
			}
		default:
			if !present {
				if len(rs) != 0 {
					t.Fatalf("no name, yet %+v", rs)
				}
				return
			}
			if len(rs) != 1 || rs[0].Err == nil {
				t.Fatalf("the name %v is not a string, yet %+v", name, rs)
			}
		}
		if pod := gatekeeper.Expand(s); pod != nil {
			rs := lib.Review(context.Background(), pod, req)
			if len(rs) != 1 || !rs[0].Generated || rs[0].Err != nil {
				t.Fatalf("the Pod of %s reviewed as %+v", objectJSON, rs)
			}
		}
	})
}

// FuzzParseTemplate: any bytes give a template or an error, never a panic; a template
// that compiles has a kind, is named after it and has a Rego version.
func FuzzParseTemplate(f *testing.F) {
	for _, p := range []string{
		"testdata/suites/requiredteam/template.yaml",
		"testdata/suites/imageprefix/template.yaml",
		"testdata/suites/uniqueslot/template.yaml",
		"testdata/suites/celonly/template.yaml",
	} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"metadata": {"name": "k"}, "spec": {"crd": {"spec": {"names": {"kind": "K"}}}, "targets": [{"target": "admission.k8s.gatekeeper.sh", "code": [{"engine": "Rego", "source": {"rego": "package k\n\nviolation[{\"msg\": data.x}] { true }", "libs": ["package lib.a\n\nb := data.inventory"], "version": "v0"}}]}]}}`))
	f.Add([]byte("metadata: {name: k}\nspec: {crd: {spec: {names: {kind: K}}}, targets: [{target: admission.k8s.gatekeeper.sh, rego: 'package k\n\nviolation contains {\"msg\": \"x\"} if http.send({})'}]}\n"))
	f.Add([]byte("spec: {targets: [{code: [{engine: Rego, source: 7}]}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		src, err := gatekeeper.ParseTemplate(data)
		if err != nil {
			return
		}
		for _, anyInventory := range []bool{false, true} {
			opts := serverOptions()
			opts.AnyInventory = anyInventory
			tmpl, err := gatekeeper.Compile(context.Background(), src, opts)
			if err != nil {
				continue
			}
			if tmpl.Kind == "" || tmpl.Name != src.Metadata.Name || (tmpl.RegoVersion != "v0" && tmpl.RegoVersion != "v1") {
				t.Fatalf("compiled %+v from %q", tmpl, data)
			}
			if tmpl.Referential && !anyInventory && src.Metadata.Annotations[gatekeeper.AnnotationInventory] != "release" {
				t.Fatalf("a referential template compiled without opting in: %q", data)
			}
		}
	})
}
