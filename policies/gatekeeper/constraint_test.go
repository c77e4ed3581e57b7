package gatekeeper_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

func TestParseConstraint(t *testing.T) {
	tests := []struct {
		name        string
		obj         map[string]any
		wantAction  string
		errContains []string
	}{
		{name: "no action is deny", obj: constraintObject(t, "K8sTeam", "c", "{}"), wantAction: gatekeeper.ActionDeny},
		{name: "no spec", obj: map[string]any{"apiVersion": "constraints.gatekeeper.sh/v1", "kind": "K8sTeam", "metadata": map[string]any{"name": "c"}}, wantAction: gatekeeper.ActionDeny},
		{name: "deny", obj: constraintObject(t, "K8sTeam", "c", "enforcementAction: deny"), wantAction: gatekeeper.ActionDeny},
		{name: "warn", obj: constraintObject(t, "K8sTeam", "c", "enforcementAction: warn"), wantAction: gatekeeper.ActionWarn},
		{name: "dryrun", obj: constraintObject(t, "K8sTeam", "c", "enforcementAction: dryrun"), wantAction: gatekeeper.ActionDryRun},
		{
			name:        "an unknown action",
			obj:         constraintObject(t, "K8sTeam", "c", "enforcementAction: block"),
			errContains: []string{"spec.enforcementAction", `"block"`},
		},
		{
			name: "scoped to every enforcement point",
			obj: constraintObject(t, "K8sTeam", "c", `
enforcementAction: scoped
scopedEnforcementActions:
- action: warn
  enforcementPoints: [{name: "*"}]`),
			wantAction: gatekeeper.ActionWarn,
		},
		{
			name: "scoped to Compositor",
			obj: constraintObject(t, "K8sTeam", "c", `
enforcementAction: scoped
scopedEnforcementActions:
- action: dryrun
  enforcementPoints: [{name: audit.gatekeeper.sh}, {name: compositor.dev}]`),
			wantAction: gatekeeper.ActionDryRun,
		},
		{
			name: "scoped to Gatekeeper's admission webhook",
			obj: constraintObject(t, "K8sTeam", "c", `
enforcementAction: scoped
scopedEnforcementActions:
- action: deny
  enforcementPoints: [{name: validation.gatekeeper.sh}]`),
			wantAction: gatekeeper.ActionDeny,
		},
		{
			name: "scoped to other enforcement points only",
			obj: constraintObject(t, "K8sTeam", "c", `
enforcementAction: scoped
scopedEnforcementActions:
- action: deny
  enforcementPoints: [{name: audit.gatekeeper.sh}, {name: gator.gatekeeper.sh}]`),
			wantAction: "",
		},
		{
			name:       "scoped with no scoped actions",
			obj:        constraintObject(t, "K8sTeam", "c", "enforcementAction: scoped"),
			wantAction: "",
		},
		{
			name: "scoped: the strictest action for Compositor",
			obj: constraintObject(t, "K8sTeam", "c", `
enforcementAction: scoped
scopedEnforcementActions:
- action: dryrun
  enforcementPoints: [{name: "*"}]
- action: deny
  enforcementPoints: [{name: audit.gatekeeper.sh}]
- action: warn
  enforcementPoints: [{name: compositor.dev}]`),
			wantAction: gatekeeper.ActionWarn,
		},
		{
			name: "scoped: an unknown action for Compositor",
			obj: constraintObject(t, "K8sTeam", "c", `
enforcementAction: scoped
scopedEnforcementActions:
- action: block
  enforcementPoints: [{name: compositor.dev}]`),
			errContains: []string{"spec.scopedEnforcementActions", `"block"`},
		},
		{
			name:        "not a constraint",
			obj:         map[string]any{"apiVersion": "templates.gatekeeper.sh/v1", "kind": "K8sTeam", "metadata": map[string]any{"name": "c"}},
			errContains: []string{"apiVersion", "constraints.gatekeeper.sh"},
		},
		{
			name:        "no kind",
			obj:         constraintObject(t, "", "c", "{}"),
			errContains: []string{"kind"},
		},
		{
			name:        "no name",
			obj:         constraintObject(t, "K8sTeam", "", "{}"),
			errContains: []string{"metadata.name"},
		},
		{
			name:        "a bad scope",
			obj:         constraintObject(t, "K8sTeam", "c", "match: {scope: cluster}"),
			errContains: []string{"spec.match.scope", `"cluster"`},
		},
		{
			name:        "a bad source",
			obj:         constraintObject(t, "K8sTeam", "c", "match: {source: Expanded}"),
			errContains: []string{"spec.match.source", `"Expanded"`},
		},
		{
			name:        "a wildcard inside a namespace",
			obj:         constraintObject(t, "K8sTeam", "c", `match: {namespaces: ["kube*system"]}`),
			errContains: []string{"spec.match.namespaces", `"kube*system"`},
		},
		{
			name:        "a wildcard inside an excluded namespace",
			obj:         constraintObject(t, "K8sTeam", "c", `match: {excludedNamespaces: ["shop", "a*b*"]}`),
			errContains: []string{"spec.match.excludedNamespaces", `"a*b*"`},
		},
		{
			name:        "a wildcard inside a name",
			obj:         constraintObject(t, "K8sTeam", "c", `match: {name: "w*b"}`),
			errContains: []string{"spec.match.name", `"w*b"`},
		},
		{
			// Gatekeeper's CRDs refuse these (its wildcard pattern), so the engine does too.
			name:        "a lone wildcard as the name",
			obj:         constraintObject(t, "K8sTeam", "c", `match: {name: "*"}`),
			errContains: []string{"spec.match.name", `"*"`},
		},
		{
			name:        "an upper-case namespace",
			obj:         constraintObject(t, "K8sTeam", "c", `match: {namespaces: ["Shop"]}`),
			errContains: []string{"spec.match.namespaces", `"Shop"`, "lower-case"},
		},
		{
			name:        "a namespace with a dot",
			obj:         constraintObject(t, "K8sTeam", "c", `match: {excludedNamespaces: ["kube.system"]}`),
			errContains: []string{"spec.match.excludedNamespaces", `"kube.system"`},
		},
		{
			name:        "a bad label selector",
			obj:         constraintObject(t, "K8sTeam", "c", `match: {labelSelector: {matchExpressions: [{key: team, operator: Near}]}}`),
			errContains: []string{"spec.match.labelSelector"},
		},
		{
			name:        "a bad namespace selector",
			obj:         constraintObject(t, "K8sTeam", "c", `match: {namespaceSelector: {matchLabels: {"bad key!": x}}}`),
			errContains: []string{"spec.match.namespaceSelector"},
		},
		{
			name:        "a match of the wrong shape",
			obj:         constraintObject(t, "K8sTeam", "c", `match: {kinds: Pod}`),
			errContains: []string{"reading the constraint"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := gatekeeper.ParseConstraint(tt.obj)
			if tt.errContains != nil {
				require.Error(t, err)
				for _, s := range tt.errContains {
					assert.ErrorContains(t, err, s)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "K8sTeam", c.Kind)
			assert.Equal(t, "c", c.Name)
			assert.Equal(t, tt.wantAction, c.Action)
		})
	}
}

func TestParseConstraintKeepsMatch(t *testing.T) {
	c := constraint(t, "K8sTeam", "c", `
match:
  kinds: [{apiGroups: ["apps"], kinds: ["Deployment"]}]
  scope: Namespaced
  namespaces: ["shop"]
  excludedNamespaces: ["kube-*"]
  labelSelector: {matchLabels: {team: payments}}
  namespaceSelector: {matchLabels: {env: prod}}
  name: "web-*"
  source: Original
`)
	assert.Equal(t, []gatekeeper.KindMatch{{APIGroups: []string{"apps"}, Kinds: []string{"Deployment"}}}, c.Match.Kinds)
	assert.Equal(t, "Namespaced", c.Match.Scope)
	assert.Equal(t, []string{"shop"}, c.Match.Namespaces)
	assert.Equal(t, []string{"kube-*"}, c.Match.ExcludedNamespaces)
	assert.Equal(t, map[string]string{"team": "payments"}, c.Match.LabelSelector.MatchLabels)
	assert.Equal(t, map[string]string{"env": "prod"}, c.Match.NamespaceSelector.MatchLabels)
	assert.Equal(t, "web-*", c.Match.Name)
	assert.Equal(t, "Original", c.Match.Source)
}

// Subjects the match tests judge.
var (
	webPod = &gatekeeper.Subject{
		Object:          pod("web", "shop", map[string]any{"team": "payments", "tier": "front"}),
		Version:         "v1",
		Kind:            "Pod",
		Namespace:       "shop",
		NamespaceObject: namespace("shop", map[string]any{"env": "prod"}),
	}
	labPod = &gatekeeper.Subject{
		Object:          pod("probe", "lab", nil),
		Version:         "v1",
		Kind:            "Pod",
		Namespace:       "lab",
		NamespaceObject: namespace("lab", map[string]any{"env": "dev"}),
	}
	kubePod     = gatekeeper.SubjectOf(pod("proxy", "kube-system", map[string]any{"team": "platform"}))
	podNoNsObj  = gatekeeper.SubjectOf(pod("web", "shop", map[string]any{"team": "payments"}))
	generateRun = gatekeeper.SubjectOf(map[string]any{
		"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"generateName": "web-run-", "namespace": "shop"},
	})
	shopNs     = gatekeeper.SubjectOf(namespace("shop", map[string]any{"env": "prod"}))
	kubeNs     = gatekeeper.SubjectOf(namespace("kube-system", nil))
	viewerRole = gatekeeper.SubjectOf(map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": "viewer", "labels": map[string]any{"team": "platform"}},
	})
	webDeploy = gatekeeper.SubjectOf(map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "shop", "labels": map[string]any{"team": "payments"}},
	})
	webGenerated = &gatekeeper.Subject{
		Object: pod("web-pod", "shop", map[string]any{"team": "payments"}), Version: "v1", Kind: "Pod",
		Namespace: "shop", Generated: true,
	}
	// moved is an UPDATE whose object left team payments, which its old object had.
	moved = &gatekeeper.Subject{
		Object:    pod("web", "shop", map[string]any{"team": "search"}),
		OldObject: pod("web", "shop", map[string]any{"team": "payments"}),
		Version:   "v1", Kind: "Pod", Namespace: "shop",
	}
	// deleted is a DELETE as a caller may give it, with only the old object.
	deleted = &gatekeeper.Subject{
		OldObject: pod("web", "shop", map[string]any{"team": "payments"}),
		Version:   "v1", Kind: "Pod", Namespace: "shop",
	}
)

func TestConstraintMatches(t *testing.T) {
	type judged struct {
		subject *gatekeeper.Subject
		want    bool
	}
	tests := []struct {
		name     string
		match    string
		subjects map[string]judged
	}{
		{
			name:  "an empty match matches everything",
			match: "{}",
			subjects: map[string]judged{
				"pod": {webPod, true}, "namespace": {shopNs, true}, "cluster role": {viewerRole, true},
				"deployment": {webDeploy, true}, "generated": {webGenerated, true}, "without its Namespace": {podNoNsObj, true},
			},
		},
		{
			name:  "kinds in the core group",
			match: `kinds: [{apiGroups: [""], kinds: ["Pod"]}]`,
			subjects: map[string]judged{
				"pod": {webPod, true}, "deployment": {webDeploy, false}, "namespace": {shopNs, false},
			},
		},
		{
			name:  "any kind of a group",
			match: `kinds: [{apiGroups: ["apps"], kinds: ["*"]}]`,
			subjects: map[string]judged{
				"pod": {webPod, false}, "deployment": {webDeploy, true},
			},
		},
		{
			name:  "a kind of any group",
			match: `kinds: [{apiGroups: ["*"], kinds: ["ClusterRole"]}]`,
			subjects: map[string]judged{
				"cluster role": {viewerRole, true}, "pod": {webPod, false},
			},
		},
		{
			name:  "a kind with no groups is of any group",
			match: `kinds: [{kinds: ["Deployment"]}]`,
			subjects: map[string]judged{
				"deployment": {webDeploy, true}, "pod": {webPod, false},
			},
		},
		{
			name:  "a kind of another group",
			match: `kinds: [{apiGroups: ["extensions"], kinds: ["Deployment"]}]`,
			subjects: map[string]judged{
				"deployment": {webDeploy, false},
			},
		},
		{
			name:  "one of several kinds entries",
			match: `kinds: [{apiGroups: [""], kinds: ["Namespace"]}, {apiGroups: ["apps"], kinds: ["Deployment", "StatefulSet"]}]`,
			subjects: map[string]judged{
				"namespace": {shopNs, true}, "deployment": {webDeploy, true}, "pod": {webPod, false},
			},
		},
		{
			name:  "scope Cluster",
			match: "scope: Cluster",
			subjects: map[string]judged{
				"pod": {webPod, false}, "namespace": {shopNs, true}, "cluster role": {viewerRole, true}, "deployment": {webDeploy, false},
			},
		},
		{
			name:  "scope Namespaced",
			match: "scope: Namespaced",
			subjects: map[string]judged{
				"pod": {webPod, true}, "namespace": {shopNs, false}, "cluster role": {viewerRole, false}, "deployment": {webDeploy, true},
			},
		},
		{
			name:  "scope *",
			match: `scope: "*"`,
			subjects: map[string]judged{
				"pod": {webPod, true}, "namespace": {shopNs, true}, "cluster role": {viewerRole, true},
			},
		},
		{
			name:  "namespaces",
			match: `namespaces: ["shop"]`,
			subjects: map[string]judged{
				"pod in shop": {webPod, true}, "pod in lab": {labPod, false}, "pod in kube-system": {kubePod, false},
				"the Namespace shop": {shopNs, true}, "the Namespace kube-system": {kubeNs, false},
				"a cluster-scoped object": {viewerRole, true},
			},
		},
		{
			name:  "namespaces by prefix",
			match: `namespaces: ["kube-*"]`,
			subjects: map[string]judged{
				"pod in kube-system": {kubePod, true}, "pod in shop": {webPod, false}, "the Namespace kube-system": {kubeNs, true},
			},
		},
		{
			name:  "namespaces by suffix",
			match: `namespaces: ["*-system"]`,
			subjects: map[string]judged{
				"pod in kube-system": {kubePod, true}, "pod in shop": {webPod, false},
			},
		},
		{
			name:  "one of several namespaces",
			match: `namespaces: ["lab", "sh*"]`,
			subjects: map[string]judged{
				"pod in shop": {webPod, true}, "pod in lab": {labPod, true}, "pod in kube-system": {kubePod, false},
			},
		},
		{
			name:  "excluded namespaces",
			match: `excludedNamespaces: ["kube-*", "lab"]`,
			subjects: map[string]judged{
				"pod in shop": {webPod, true}, "pod in lab": {labPod, false}, "pod in kube-system": {kubePod, false},
				"the Namespace kube-system": {kubeNs, false}, "the Namespace shop": {shopNs, true},
				"a cluster-scoped object": {viewerRole, true},
			},
		},
		{
			name:  "a namespace both listed and excluded",
			match: `{namespaces: ["shop"], excludedNamespaces: ["*op"]}`,
			subjects: map[string]judged{
				"pod in shop": {webPod, false},
			},
		},
		{
			name:  "label selector by labels",
			match: `labelSelector: {matchLabels: {team: payments}}`,
			subjects: map[string]judged{
				"pod of payments": {webPod, true}, "pod without labels": {labPod, false}, "pod of platform": {kubePod, false},
				"cluster role of platform": {viewerRole, false}, "deployment of payments": {webDeploy, true},
			},
		},
		{
			name:  "label selector by expressions",
			match: `labelSelector: {matchExpressions: [{key: tier, operator: In, values: [front, back]}, {key: owner, operator: DoesNotExist}]}`,
			subjects: map[string]judged{
				"pod of tier front": {webPod, true}, "pod without labels": {labPod, false},
			},
		},
		{
			name:  "label selector of a Namespace",
			match: `labelSelector: {matchLabels: {env: prod}}`,
			subjects: map[string]judged{
				"the Namespace shop": {shopNs, true}, "the Namespace kube-system": {kubeNs, false},
			},
		},
		{
			name:  "namespace selector",
			match: `namespaceSelector: {matchLabels: {env: prod}}`,
			subjects: map[string]judged{
				"pod in a prod namespace": {webPod, true}, "pod in a dev namespace": {labPod, false},
				"the prod Namespace itself": {shopNs, true}, "a Namespace without labels": {kubeNs, false},
				"a cluster-scoped object": {viewerRole, true},
			},
		},
		{
			name:  "name",
			match: `name: web`,
			subjects: map[string]judged{
				"pod web": {webPod, true}, "pod probe": {labPod, false}, "deployment web": {webDeploy, true},
			},
		},
		{
			name:  "name by prefix",
			match: `name: "we*"`,
			subjects: map[string]judged{
				"pod web": {webPod, true}, "pod probe": {labPod, false}, "generated name web-run-": {generateRun, true},
			},
		},
		{
			name:  "name by suffix",
			match: `name: "*obe"`,
			subjects: map[string]judged{
				"pod probe": {labPod, true}, "pod web": {webPod, false}, "generated name web-run-": {generateRun, false},
			},
		},
		{
			name:  "name by prefix and suffix",
			match: `name: "*eb-ru*"`,
			subjects: map[string]judged{
				"pod web": {webPod, false}, "generated name web-run-": {generateRun, true},
			},
		},
		{
			name:  "source Original",
			match: "source: Original",
			subjects: map[string]judged{
				"original pod": {webPod, true}, "generated pod": {webGenerated, false},
			},
		},
		{
			name:  "source Generated",
			match: "source: Generated",
			subjects: map[string]judged{
				"original pod": {webPod, false}, "generated pod": {webGenerated, true},
			},
		},
		{
			name:  "source All",
			match: "source: All",
			subjects: map[string]judged{
				"original pod": {webPod, true}, "generated pod": {webGenerated, true},
			},
		},
		{
			name:  "the old object matches",
			match: `labelSelector: {matchLabels: {team: payments}}`,
			subjects: map[string]judged{
				"an update away from payments": {moved, true}, "a delete with only the old object": {deleted, true},
			},
		},
		{
			name:  "neither object matches",
			match: `labelSelector: {matchLabels: {team: growth}}`,
			subjects: map[string]judged{
				"an update away from payments": {moved, false},
			},
		},
		{
			name:  "every field must match",
			match: `{kinds: [{apiGroups: [""], kinds: ["Pod"]}], namespaces: ["shop"], labelSelector: {matchLabels: {team: payments}}, name: "w*"}`,
			subjects: map[string]judged{
				"pod web": {webPod, true}, "deployment web": {webDeploy, false}, "pod in lab": {labPod, false},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := constraint(t, "K8sTeam", "c", "match:\n  "+tt.match)
			for what, j := range tt.subjects {
				got, err := c.Matches(j.subject)
				require.NoError(t, err, what)
				assert.Equal(t, j.want, got, what)
			}
		})
	}
}

// A namespaceSelector cannot judge a namespaced object whose Namespace is unknown; a
// Namespace and a cluster-scoped object it judges without one.
func TestConstraintNamespaceSelectorNeedsTheNamespace(t *testing.T) {
	c := constraint(t, "K8sTeam", "prod-only", "match: {namespaceSelector: {matchLabels: {env: prod}}}")
	_, err := c.Matches(podNoNsObj)
	require.Error(t, err)
	assert.ErrorContains(t, err, "K8sTeam/prod-only")
	assert.ErrorContains(t, err, "shop")

	ok, err := c.Matches(shopNs)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = c.Matches(viewerRole)
	require.NoError(t, err)
	assert.True(t, ok)

	// Without a namespaceSelector the Namespace is not needed.
	ok, err = constraint(t, "K8sTeam", "c", "match: {namespaces: [shop]}").Matches(podNoNsObj)
	require.NoError(t, err)
	assert.True(t, ok)
}

// Gatekeeper's wildcards (pkg/wildcard since v3.9) may start and end a name at once:
// "*system*" matches every name containing "system". Such a constraint is valid in
// Gatekeeper, so Compositor must accept it and match as Gatekeeper does.
func TestConstraintGlobAtBothEnds(t *testing.T) {
	c, err := gatekeeper.ParseConstraint(constraintObject(t, "K8sTeam", "c", `match: {namespaces: ["*syst*"], name: "*ox*"}`))
	require.NoError(t, err)
	ok, err := c.Matches(kubePod)
	require.NoError(t, err)
	assert.True(t, ok, "pod proxy in kube-system")
	ok, err = c.Matches(webPod)
	require.NoError(t, err)
	assert.False(t, ok, "pod web in shop")
}
