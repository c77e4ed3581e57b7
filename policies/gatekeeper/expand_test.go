package gatekeeper_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

const deploymentYAML = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  labels: {team: payments}
spec:
  replicas: 2
  template:
    metadata:
      labels: {app: web}
      annotations: {note: kept}
    spec:
      containers:
      - name: web
        image: registry.example.com/web:2
`

const cronJobYAML = `
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
  namespace: shop
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: report
            image: registry.example.com/report:1
`

func TestExpand(t *testing.T) {
	shop := namespace("shop", map[string]any{"env": "prod"})
	tests := []struct {
		name    string
		subject *gatekeeper.Subject
		want    map[string]any // the Pod, nil for no expansion
	}{
		{
			name:    "a Deployment",
			subject: withNamespaceObject(gatekeeper.SubjectOf(object(t, deploymentYAML)), shop),
			want: object(t, `
apiVersion: v1
kind: Pod
metadata:
  name: web-pod
  namespace: shop
  labels: {app: web}
  annotations: {note: kept}
spec:
  containers:
  - name: web
    image: registry.example.com/web:2
`),
		},
		{
			name:    "a CronJob",
			subject: gatekeeper.SubjectOf(object(t, cronJobYAML)),
			want: object(t, `
apiVersion: v1
kind: Pod
metadata:
  name: nightly-pod
  namespace: shop
spec:
  restartPolicy: OnFailure
  containers:
  - name: report
    image: registry.example.com/report:1
`),
		},
		{
			name: "a StatefulSet without a namespace",
			subject: gatekeeper.SubjectOf(object(t, `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  template:
    spec:
      containers: [{name: db, image: registry.example.com/db:16}]
`)),
			want: object(t, `
apiVersion: v1
kind: Pod
metadata: {name: db-pod}
spec:
  containers: [{name: db, image: registry.example.com/db:16}]
`),
		},
		{
			name:    "not a workload",
			subject: gatekeeper.SubjectOf(object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: shop}\ndata: {a: b}\n")),
		},
		{
			name:    "a Deployment of another group",
			subject: gatekeeper.SubjectOf(object(t, "apiVersion: example.com/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {template: {spec: {}}}\n")),
		},
		{
			name:    "a workload without a pod template",
			subject: gatekeeper.SubjectOf(object(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec: {replicas: 1}\n")),
		},
		{
			name:    "a pod template that is not an object",
			subject: gatekeeper.SubjectOf(object(t, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: once}\nspec: {template: [1, 2]}\n")),
		},
		{
			name:    "a Pod",
			subject: gatekeeper.SubjectOf(pod("web", "shop", nil)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := gatekeeper.Expand(tt.subject)
			if tt.want == nil {
				assert.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			assert.Equal(t, tt.want, got.Object)
			assert.True(t, got.Generated)
			assert.Equal(t, "", got.Group)
			assert.Equal(t, "v1", got.Version)
			assert.Equal(t, "Pod", got.Kind)
			assert.Equal(t, tt.subject.Namespace, got.Namespace)
			assert.Equal(t, tt.subject.NamespaceObject, got.NamespaceObject)
			assert.Nil(t, gatekeeper.Expand(got), "a generated Pod expands no further")
		})
	}
}

func withNamespaceObject(s *gatekeeper.Subject, ns map[string]any) *gatekeeper.Subject {
	s.NamespaceObject = ns
	return s
}

// Expanding leaves the workload as it was.
func TestExpandCopies(t *testing.T) {
	deploy := object(t, deploymentYAML)
	before := object(t, deploymentYAML)
	pod := gatekeeper.Expand(gatekeeper.SubjectOf(deploy))
	require.NotNil(t, pod)
	pod.Object["metadata"].(map[string]any)["name"] = "changed"
	pod.Object["spec"] = nil
	assert.Equal(t, before, deploy)
}

func TestExpandedPodsAndSource(t *testing.T) {
	deploy := gatekeeper.SubjectOf(object(t, deploymentYAML))
	expanded := gatekeeper.Expand(deploy)
	require.NotNil(t, expanded)
	tmpl := mustCompile(t, "K8sTeam", teamV0)
	constraints := []*gatekeeper.Constraint{
		constraint(t, "K8sTeam", "all", `match: {kinds: [{apiGroups: ["", "apps"], kinds: ["Pod", "Deployment"]}]}`),
		constraint(t, "K8sTeam", "generated", `match: {kinds: [{apiGroups: [""], kinds: ["Pod"]}], source: Generated}`),
		constraint(t, "K8sTeam", "original", `match: {source: Original}`),
	}
	lib := gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, constraints)

	names := func(s *gatekeeper.Subject) []string {
		var out []string
		for _, r := range lib.Review(context.Background(), s, &gatekeeper.Request{}) {
			require.NoError(t, r.Err)
			assert.Equal(t, s.Generated, r.Generated)
			out = append(out, r.Constraint.Name)
		}
		return out
	}
	// The Deployment has a team label, its Pod does not.
	assert.Empty(t, names(deploy))
	assert.Equal(t, []string{"all", "generated"}, names(expanded))

	ok, err := constraints[2].Matches(deploy)
	require.NoError(t, err)
	assert.True(t, ok, "source Original matches the workload")
	ok, err = constraints[1].Matches(deploy)
	require.NoError(t, err)
	assert.False(t, ok, "source Generated does not match the workload")
}

func TestInventory(t *testing.T) {
	web := pod("web", "shop", nil)
	api := pod("api", "shop", nil)
	probe := pod("probe", "lab", nil)
	deploy := object(t, deploymentYAML)
	shop := namespace("shop", nil)
	viewer := map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "viewer"}}
	var subjects []*gatekeeper.Subject
	for _, o := range []map[string]any{web, api, probe, deploy, shop, viewer} {
		subjects = append(subjects, gatekeeper.SubjectOf(o))
	}
	// A request's name names the object in the inventory, as it does in input.review.
	subjects = append(subjects, &gatekeeper.Subject{Object: map[string]any{"kind": "Secret"}, Version: "v1", Kind: "Secret", Namespace: "shop", Name: "token"})

	assert.Equal(t, map[string]any{
		"cluster": map[string]any{
			"v1":                           map[string]any{"Namespace": map[string]any{"shop": shop}},
			"rbac.authorization.k8s.io/v1": map[string]any{"ClusterRole": map[string]any{"viewer": viewer}},
		},
		"namespace": map[string]any{
			"shop": map[string]any{
				"v1":      map[string]any{"Pod": map[string]any{"web": web, "api": api}, "Secret": map[string]any{"token": map[string]any{"kind": "Secret"}}},
				"apps/v1": map[string]any{"Deployment": map[string]any{"web": deploy}},
			},
			"lab": map[string]any{"v1": map[string]any{"Pod": map[string]any{"probe": probe}}},
		},
	}, gatekeeper.Inventory(subjects))

	assert.Equal(t, map[string]any{"cluster": map[string]any{}, "namespace": map[string]any{}}, gatekeeper.Inventory(nil))
}
