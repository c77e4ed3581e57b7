package composition

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// checkTemplate denies, per its constraint's parameters, an object without a label or
// an annotation, or every object its constraint selects.
const checkTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: gatecheck}
spec:
  crd: {spec: {names: {kind: GateCheck}}}
  targets:
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package gatecheck
      violation[{"msg": msg}] {
        key := input.parameters.label
        not input.review.object.metadata.labels[key]
        msg := sprintf("%v %v lacks label %v", [input.review.kind.kind, input.review.object.metadata.name, key])
      }
      violation[{"msg": msg}] {
        key := input.parameters.annotation
        not input.review.object.metadata.annotations[key]
        msg := sprintf("%v %v lacks annotation %v", [input.review.kind.kind, input.review.object.metadata.name, key])
      }
      violation[{"msg": msg}] {
        input.parameters.deny
        msg := sprintf("%v %v is denied", [input.review.kind.kind, input.review.object.metadata.name])
      }
`

// checkEngine is an engine with checkTemplate and the GateCheck constraints of specs,
// each "name: spec".
func checkEngine(t *testing.T, specs ...string) *policies.Engine {
	t.Helper()
	ctx := context.Background()
	engine, err := policies.NewEngine(ctx, policies.Options{DisabledBuiltins: policies.BuiltinIDs()})
	require.NoError(t, err)
	src, err := gatekeeper.ParseTemplate([]byte(checkTemplate))
	require.NoError(t, err)
	tmpl, err := policies.CompileTemplate(ctx, src)
	require.NoError(t, err)
	var cs []*gatekeeper.Constraint
	for _, spec := range specs {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte("apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: GateCheck\nmetadata: {name: c}\nspec: "+spec+"\n"), &obj))
		c, err := gatekeeper.ParseConstraint(obj)
		require.NoError(t, err)
		cs = append(cs, c)
	}
	engine.SetConstraints(policies.OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{tmpl}, cs))
	return engine
}

func configMapChart(name string) *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: "0.1.0"},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata: {a: b}\n")}},
	}
}

// The gate judges each object as Helm sends it: with the label and annotations Helm
// gives the release's objects after building them, and a hook with the annotations
// the gate gives it. A constraint that selects Helm's objects by Helm's label refuses
// them (it judged none before); one that requires the label or the release annotation
// admits what Helm creates (it refused everything before); an object of a
// cluster-scoped kind is judged cluster-wide whatever namespace the chart wrote.
func TestTheGateJudgesObjectsAsHelmSendsThem(t *testing.T) {
	env := newAttackEnv(t, "owned")
	ctx := context.Background()

	t.Run("a constraint selecting Helm's label", func(t *testing.T) {
		engine := checkEngine(t, `{match: {kinds: [{apiGroups: [""], kinds: [ConfigMap]}], labelSelector: {matchLabels: {app.kubernetes.io/managed-by: Helm}}}, parameters: {deny: true}}`)
		gate := env.gateAllowing(ctx, engine, nil)
		_, _, err := env.helm.UpgradeInstall(ctx, env.namespace, "selected", configMapChart("selected"), nil, InstallOptions{Gate: gate})
		require.Error(t, err)
		require.NotNil(t, gate.refusal)
		assert.Contains(t, gate.refusal.Message, "ConfigMap selected is denied [constraint GateCheck/c]")
		err = env.cp.Client.Get(ctx, client.ObjectKey{Namespace: env.namespace, Name: "selected"}, &corev1.ConfigMap{})
		assert.True(t, apierrors.IsNotFound(err), "installed: %v", err)
	})

	t.Run("constraints requiring Helm's label and the release annotation", func(t *testing.T) {
		engine := checkEngine(t,
			`{match: {kinds: [{apiGroups: [""], kinds: [ConfigMap]}]}, parameters: {annotation: meta.helm.sh/release-name}}`,
		)
		gate := env.gateAllowing(ctx, engine, nil)
		_, _, err := env.helm.UpgradeInstall(ctx, env.namespace, "attacker", hookChart(""), nil, InstallOptions{Gate: gate})
		require.NoError(t, err, "the manifest's object and the hook carry the annotation when they are created")
		engine = checkEngine(t, `{match: {kinds: [{apiGroups: [""], kinds: [ConfigMap]}]}, parameters: {label: app.kubernetes.io/managed-by}}`)
		gate = env.gateAllowing(ctx, engine, nil)
		_, _, err = env.helm.UpgradeInstall(ctx, env.namespace, "required", configMapChart("required"), nil, InstallOptions{Gate: gate})
		require.NoError(t, err, "Helm labels the manifest's objects")
		got := &corev1.ConfigMap{}
		require.NoError(t, env.cp.Client.Get(ctx, client.ObjectKey{Namespace: env.namespace, Name: "required"}, got))
		assert.Equal(t, "Helm", got.Labels["app.kubernetes.io/managed-by"])
	})

	t.Run("a cluster-scoped object the chart gives a namespace", func(t *testing.T) {
		engine := checkEngine(t, `{match: {scope: Cluster, kinds: [{apiGroups: [networking.k8s.io], kinds: [IngressClass]}]}, parameters: {deny: true}}`)
		allowed := map[schema.GroupKind]bool{{Group: "networking.k8s.io", Kind: "IngressClass"}: true}
		ch := &chart.Chart{
			Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "ic", Version: "0.1.0"},
			Templates: []*chartcommon.File{{Name: "templates/ic.yaml", Data: []byte(
				"apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  name: evil-class\n  namespace: {{ .Release.Namespace }}\nspec:\n  controller: example.com/evil\n")}},
		}
		resources := []schema.GroupResource{{Group: "networking.k8s.io", Resource: "ingressclasses"}}
		gate := env.gateAllowing(ctx, engine, allowed)
		_, _, err := env.helm.UpgradeInstall(ctx, env.namespace, "ic", ch, nil, InstallOptions{Gate: gate, ClusterResources: resources})
		require.Error(t, err)
		require.NotNil(t, gate.refusal)
		assert.Contains(t, gate.refusal.Message, "IngressClass evil-class is denied [constraint GateCheck/c]")
		err = env.cp.Client.Get(ctx, client.ObjectKey{Name: "evil-class"}, &networkingv1.IngressClass{})
		assert.True(t, apierrors.IsNotFound(err), "installed: %v", err)

		// Without the constraint, the same chart installs: the namespace the chart
		// wrote and Helm's builder dropped is no second reading of the manifests.
		gate = env.gateAllowing(ctx, checkEngine(t), allowed)
		_, _, err = env.helm.UpgradeInstall(ctx, env.namespace, "ic", ch, nil, InstallOptions{Gate: gate, ClusterResources: resources})
		require.NoError(t, err)
		require.NoError(t, env.cp.Client.Get(ctx, client.ObjectKey{Name: "evil-class"}, &networkingv1.IngressClass{}))
	})
}

// Whatever changes an object between Build, where the release's manifest is judged,
// and Create, the gate judges it again as it is sent: a label set afterwards is
// judged, not waved through as the object Build made.
func TestTheGateJudgesAnObjectChangedAfterItWasJudged(t *testing.T) {
	env := newAttackEnv(t, "changed")
	ctx := context.Background()
	engine := checkEngine(t, `{match: {kinds: [{apiGroups: [""], kinds: [ConfigMap]}], labelSelector: {matchLabels: {tier: forbidden}}}, parameters: {deny: true}}`)
	cfg, err := env.helm.Actions(env.namespace)
	require.NoError(t, err)
	gate := env.gateAllowing(ctx, engine, nil)
	gated(cfg, gate, "changed")
	kc := cfg.KubeClient

	manifest := "---\n# Source: changed/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: changed\ndata: {a: b}\n"
	infos, err := kc.Build(bytes.NewBufferString(manifest), false)
	require.NoError(t, err, "the manifest as built passes")
	require.Len(t, infos, 1)
	for _, info := range infos {
		u := info.Object.(*unstructured.Unstructured)
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["tier"] = "forbidden"
		u.SetLabels(labels)
	}
	_, err = kc.Create(infos)
	require.Error(t, err)
	require.NotNil(t, gate.refusal)
	assert.Contains(t, gate.refusal.Message, "ConfigMap changed is denied [constraint GateCheck/c]")
	err = env.cp.Client.Get(ctx, client.ObjectKey{Namespace: env.namespace, Name: "changed"}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "created: %v", err)
}

// The one render of an install, the one Helm applies, is held to the bound of rendered
// bytes: past it nothing is built, applied or recorded.
func TestTheGateBoundsTheManifestsHelmRendered(t *testing.T) {
	env := newAttackEnv(t, "bounded")
	ctx := context.Background()
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "big", Version: "0.1.0"},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  blob: {{ repeat 8000 \"x\" | quote }}\n")}},
	}
	gate := env.gateAllowing(ctx, checkEngine(t), nil)
	gate.judge = policies.NewJudge(policies.JudgeOptions{Engine: checkEngine(t), Renderer: &policies.Renderer{MaxRenderedBytes: 4096}})
	_, _, err := env.helm.UpgradeInstall(ctx, env.namespace, "big", ch, nil, InstallOptions{Gate: gate})
	require.Error(t, err)
	refusal, refused := asGateError(err)
	require.True(t, refused, "%v", err)
	assert.Equal(t, ReasonRenderRefused, refusal.Reason)
	assert.Contains(t, refusal.Message, "nothing was installed: rendering the chart with these values went past a bound")
	assert.Nil(t, gate.refusal, "the render Helm applies was refused before Helm built anything")
	err = env.cp.Client.Get(ctx, client.ObjectKey{Namespace: env.namespace, Name: "big"}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "installed: %v", err)
	last, err := env.helm.lastRelease(env.namespace, "big")
	assert.True(t, last == nil && err == nil, "a release is recorded: %v, %v", last, err)
}

// The gate reads a chart's labels and annotations as Helm does (a null is "", a value
// that is no string drops the map), so the manifest's objects it judged are the ones
// Helm sends, applied server-side as the release's; a hook that already names the
// release is still created, never applied onto an object of its name.
func TestTheGateKnowsTheManifestWhateverItsMetadata(t *testing.T) {
	env := newAttackEnv(t, "metadata")
	ctx := context.Background()
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "odd", Version: "0.1.0"},
		Templates: []*chartcommon.File{
			{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: odd\n  labels: {version: }\n  annotations: {kept: }\n")},
			{Name: "templates/hook.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: odd-hook\n  annotations: {helm.sh/hook: pre-install, meta.helm.sh/release-name: odd, meta.helm.sh/release-namespace: metadata}\n")},
		},
	}
	gate := env.gateAllowing(ctx, checkEngine(t, `{match: {kinds: [{apiGroups: [""], kinds: [ConfigMap]}]}, parameters: {annotation: meta.helm.sh/release-name}}`), nil)
	_, _, err := env.helm.UpgradeInstall(ctx, env.namespace, "odd", ch, nil, InstallOptions{Gate: gate})
	require.NoError(t, err)
	assert.Equal(t, []string{vocab.FieldManager + "/Apply"}, env.operations(t, "odd"), "the manifest's object, applied")
	assert.Equal(t, []string{vocab.FieldManager + "/Update"}, env.operations(t, "odd-hook"), "the hook, created")
	cm := &corev1.ConfigMap{}
	require.NoError(t, env.cp.Client.Get(ctx, client.ObjectKey{Namespace: env.namespace, Name: "odd"}, cm))
	assert.Equal(t, map[string]string{"version": "", "app.kubernetes.io/managed-by": "Helm"}, cm.Labels)
	assert.Equal(t, map[string]string{"kept": "", "meta.helm.sh/release-name": "odd", "meta.helm.sh/release-namespace": "metadata"}, cm.Annotations)
}
