package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// gateNamespace holds the definition and compositions of the gate-check chart.
const gateNamespace = "gate"

// gateChart renders one ConfigMap, and by spec.mode what compositions must never
// install: a ServiceAccount token Secret, a cluster-scoped IngressClass, a
// PriorityClass, lookups into another namespace and across namespaces. spec.ns moves the ConfigMap to another
// namespace. Its verdict is "forbidden" only when ConfigMap <release>-trigger exists:
// admission renders without a cluster and sees "fine", the install sees the truth.
var gateChart = &chart.Chart{
	Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "gate-check", Version: "0.1.0"},
	Values:   map[string]any{"mode": "plain", "ns": ""},
	Schema:   []byte(`{"type":"object","properties":{"mode":{"type":"string","enum":["plain","token","cluster","priority","lookup","hook"]},"ns":{"type":"string"}},"additionalProperties":false}`),
	Templates: []*chartcommon.File{
		{Name: "templates/data.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-data
  {{- with .Values.ns }}
  namespace: {{ . }}
  {{- end }}
data:
  verdict: {{ if lookup "v1" "ConfigMap" .Release.Namespace (printf "%s-trigger" .Release.Name) }}forbidden{{ else }}fine{{ end }}
  {{- if eq .Values.mode "lookup" }}
  stolen: {{ (lookup "v1" "Secret" "other-team" "x").data | toJson | quote }}
  everyone: {{ (lookup "v1" "ConfigMap" "" "").items | default list | len | quote }}
  {{- end }}
`)},
		{Name: "templates/token.yaml", Data: []byte(`{{- if eq .Values.mode "token" }}
apiVersion: v1
kind: Secret
metadata:
  name: {{ .Release.Name }}-token
  annotations: {kubernetes.io/service-account.name: default}
type: kubernetes.io/service-account-token
{{- end }}
`)},
		{Name: "templates/hook.yaml", Data: []byte(`{{- if eq .Values.mode "hook" }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-hooked
  namespace: other-team
  annotations: {helm.sh/hook: pre-install}
{{- end }}
`)},
		{Name: "templates/cluster.yaml", Data: []byte(`{{- if eq .Values.mode "cluster" }}
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: {{ .Release.Name }}-class
spec:
  controller: example.com/ingress
{{- end }}
`)},
		{Name: "templates/priority.yaml", Data: []byte(`{{- if eq .Values.mode "priority" }}
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: {{ .Release.Name }}-urgent
value: 1000000
{{- end }}
`)},
	},
}

// noForbiddenVerdict is a rendered policy: it judges the manifests, not the spec.
const noForbiddenVerdict = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: no-forbidden-verdict
spec:
  target: rendered
  match:
    kinds: [{group: composition.krateo.io, kind: GateCheck}]
  rego: |
    package compositor.noforbiddenverdict

    deny contains sprintf("ConfigMap %s has a forbidden verdict", [obj.metadata.name]) if {
      some obj in input.rendered
      obj.kind == "ConfigMap"
      obj.data.verdict == "forbidden"
    }
`

// gateCheck is a composition of the gate-check chart.
func gateCheck(name, spec string) string {
	return fmt.Sprintf("apiVersion: composition.krateo.io/v0-1-0\nkind: GateCheck\nmetadata: {name: %s, namespace: %s}\nspec: %s\n", name, gateNamespace, spec)
}

// readyCondition is the composition's Ready condition as kubectl shows it: status,
// reason and message.
func readyCondition(t assert.TestingT, cp *controlplane.ControlPlane, resource, namespace, name string) string {
	res := cp.Kubectl(context.Background(), "", "get", resource, name, "-n", namespace, "-o",
		`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason} {.status.conditions[?(@.type=="Ready")].message}`)
	assert.NoError(t, res.Err, res.Stderr)
	return res.Stdout
}

// warnings are the notes of the Warning events about an object, by reason.
func warnings(t assert.TestingT, cp *controlplane.ControlPlane, namespace, name string) map[string]string {
	list := &corev1.EventList{}
	if !assert.NoError(t, cp.Client.List(context.Background(), list, client.InNamespace(namespace))) {
		return nil
	}
	out := map[string]string{}
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name && e.Type == corev1.EventTypeWarning {
			out[e.Reason] = e.Message
		}
	}
	return out
}

// absent asserts that the API server has no such object.
func absent(t *testing.T, cp *controlplane.ControlPlane, obj client.Object, namespace, name string) {
	t.Helper()
	err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, obj)
	assert.True(t, apierrors.IsNotFound(err), "%T %s/%s exists (err %v)", obj, namespace, name, err)
}

// Issues 12 and 13, controller side: the manifests Helm is about to apply pass the
// install gate or nothing is applied. The composition says why, and so does an event.
func TestInstallGateAppliesNothingItRefuses(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	ctx := context.Background()
	applyDefinition(t, cp, serveCharts(t, gateChart).URL, gateNamespace, "gate-check", "0.1.0")
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other-team"}}))
	require.NoError(t, cp.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other-team", Name: "x"},
		StringData: map[string]string{"password": "other-teams-secret"},
	}))
	applyPolicies(t, cp, noForbiddenVerdict)
	require.NoError(t, cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: gateNamespace, Name: "judged-trigger"}}))
	const resource = "gatechecks.v0-1-0.composition.krateo.io"

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("DEBUG %s %s", cp.Kubectl(ctx, "", "get", resource, "-A", "-o", "yaml").Stdout, cp.Kubectl(ctx, "", "get", "events", "-A").Stdout)
		}
	})
	// The same chart installs when nothing is wrong: the gate lets ordinary releases by.
	res := cp.Kubectl(ctx, gateCheck("plain", "{mode: plain}"), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True Available release plain is installed", readyCondition(c, cp, resource, gateNamespace, "plain"))
	}, 2*time.Minute, 250*time.Millisecond)
	cm := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: gateNamespace, Name: "plain-data"}, cm))
	assert.Equal(t, "fine", cm.Data["verdict"])

	for _, tc := range []struct {
		name, spec, reason, message string
		forbidden                   client.Object
		forbiddenNamespace          string
		forbiddenName               string
		// admission is the denial of kubectl apply, for what admission already
		// refuses as the gate would: it renders the chart for the rendered policy.
		admission string
	}{
		{
			name: "judged", spec: "{mode: plain}", reason: "PolicyDenied",
			message:   "nothing was installed: ConfigMap/judged-data: ConfigMap judged-data has a forbidden verdict [policy no-forbidden-verdict]",
			forbidden: &corev1.ConfigMap{}, forbiddenNamespace: gateNamespace, forbiddenName: "judged-data",
		},
		{
			name: "elsewhere", spec: "{mode: plain, ns: other-team}", reason: "ObjectOutsideNamespace",
			message:   "nothing was installed: v1 ConfigMap/elsewhere-data (template gate-check/templates/data.yaml): rendered into namespace other-team, outside the composition's namespace gate",
			forbidden: &corev1.ConfigMap{}, forbiddenNamespace: "other-team", forbiddenName: "elsewhere-data",
			admission: "ConfigMap/elsewhere-data: rendered into namespace other-team, outside the composition's namespace gate: nothing is installed outside it [install gate]",
		},
		{
			name: "hooked", spec: "{mode: hook}", reason: "ObjectOutsideNamespace",
			message:   "nothing was installed: v1 ConfigMap/hooked-hooked (a Helm hook): rendered into namespace other-team, outside the composition's namespace gate",
			forbidden: &corev1.ConfigMap{}, forbiddenNamespace: "other-team", forbiddenName: "hooked-hooked",
			admission: "ConfigMap/hooked-hooked: rendered into namespace other-team, outside the composition's namespace gate: nothing is installed outside it [install gate]",
		},
		{
			name: "minter", spec: "{mode: token}", reason: "ForbiddenObject",
			message:   "nothing was installed: v1 Secret/minter-token (template gate-check/templates/token.yaml): a Secret of type kubernetes.io/service-account-token would mint a ServiceAccount token",
			forbidden: &corev1.Secret{}, forbiddenNamespace: gateNamespace, forbiddenName: "minter-token",
		},
		{
			name: "clusterwide", spec: "{mode: cluster}", reason: "ForbiddenObject",
			message:   "nothing was installed: networking.k8s.io/v1 IngressClass/clusterwide-class (template gate-check/templates/cluster.yaml): IngressClass is cluster-scoped, and compositions create only namespaced objects",
			forbidden: &networkingv1.IngressClass{}, forbiddenName: "clusterwide-class",
		},
		{
			name: "urgent", spec: "{mode: priority}", reason: "ForbiddenObject",
			message:   "nothing was installed: scheduling.k8s.io/v1 PriorityClass/urgent-urgent (template gate-check/templates/priority.yaml): compositions never create a PriorityClass",
			forbidden: &schedulingv1.PriorityClass{}, forbiddenName: "urgent-urgent",
		},
		{
			name: "snoop", spec: "{mode: lookup}", reason: "InstallFailed",
			message:   "Compositor confines Helm and the chart's templates to namespace gate: GET /api/v1/namespaces/other-team/secrets/x reaches namespace other-team",
			forbidden: &corev1.ConfigMap{}, forbiddenNamespace: gateNamespace, forbiddenName: "snoop-data",
		},
	} {
		t.Run(tc.reason+" "+tc.name, func(t *testing.T) {
			res := cp.Kubectl(ctx, gateCheck(tc.name, tc.spec), "apply", "-f", "-")
			if tc.admission != "" {
				require.Error(t, res.Err, "admitted")
				assert.Contains(t, res.Stderr, tc.admission)
				absent(t, cp, tc.forbidden, tc.forbiddenNamespace, tc.forbiddenName)
				return
			}
			require.NoError(t, res.Err, "admission judged the spec only, and let it by: %s", res.Stderr)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				assert.Contains(c, readyCondition(c, cp, resource, gateNamespace, tc.name), "False "+tc.reason+" ")
			}, 2*time.Minute, 250*time.Millisecond)
			assert.Contains(t, readyCondition(t, cp, resource, gateNamespace, tc.name), tc.message)
			warned := warnings(t, cp, gateNamespace, tc.name)
			if tc.reason == "InstallFailed" {
				assert.Contains(t, warned["HelmInstallFailed"], tc.message)
			} else {
				assert.Contains(t, warned[tc.reason], tc.message)
			}
			absent(t, cp, tc.forbidden, tc.forbiddenNamespace, tc.forbiddenName)
			absent(t, cp, &corev1.ConfigMap{}, gateNamespace, tc.name+"-data")
			if tc.name != "hooked" { // Helm records a failed release before it runs hooks
				assert.Error(t, cp.Helm(ctx, "status", tc.name, "-n", gateNamespace).Err, "release %s exists", tc.name)
			}
		})
	}
	t.Run("a definition may allow a cluster-scoped kind", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "annotate", "compositiondefinition", "gate-check", "-n", gateNamespace,
			"compositor.dev/allow-cluster-scoped=IngressClass.networking.k8s.io,PriorityClass.scheduling.k8s.io")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, "True Available release clusterwide is installed", readyCondition(c, cp, resource, gateNamespace, "clusterwide"))
		}, 2*time.Minute, 250*time.Millisecond)
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "clusterwide-class"}, &networkingv1.IngressClass{}))
		assert.Contains(t, readyCondition(t, cp, resource, gateNamespace, "urgent"), "compositions never create a PriorityClass", "never, even when listed")
		absent(t, cp, &schedulingv1.PriorityClass{}, "", "urgent-urgent")
	})
	secret := &corev1.Secret{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "other-team", Name: "x"}, secret))
	assert.Equal(t, "other-teams-secret", string(secret.Data["password"]), "the other team's Secret is untouched")
}

// Issue 13, item 1, controller side: a composition whose release name is a release
// the controller did not install for it (here one made by `helm install` after the
// composition was admitted) leaves it alone, says so, and leaves it when deleted.
func TestControllerLeavesAForeignReleaseAlone(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	readyDefinition(t, cp)
	ctx := context.Background()
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops"}}))

	// Admitted while no release db exists, and paused so that nothing is installed yet.
	composition := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata:\n  name: innocent\n  namespace: ops\n" +
		"  annotations: {krateo.io/release-name: db, krateo.io/paused: \"true\"}\nspec: {replicaCount: 1}\n"
	res := cp.Kubectl(ctx, composition, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)

	ops := &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "opschart", Version: "1.0.0"},
		Templates: []*chartcommon.File{{Name: "templates/data.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: precious-data}\ndata: {keep: \"yes\"}\n")}},
	}
	archive, err := chartutil.Save(ops, t.TempDir())
	require.NoError(t, err)
	res = cp.Helm(ctx, "install", "db", archive, "-n", "ops")
	require.NoError(t, res.Err, res.Stderr)

	res = cp.Kubectl(ctx, "", "annotate", "fireworksapps.v1-1-5.composition.krateo.io", "innocent", "-n", "ops", "krateo.io/paused-")
	require.NoError(t, res.Err, res.Stderr)
	// The record `helm install` wrote has no release seal: it is another's, left alone.
	const conflict = "False ReleaseConflict Helm release db in namespace ops (record sh.helm.release.v1.db.v1) was not installed by Compositor for this composition: it is left alone; give the composition another krateo.io/release-name"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, conflict, readyCondition(c, cp, "fireworksapps.v1-1-5.composition.krateo.io", "ops", "innocent"))
	}, 2*time.Minute, 250*time.Millisecond)
	assert.Contains(t, warnings(t, cp, "ops", "innocent")["ReleaseConflict"], "Helm release db in namespace ops")
	foreignUnchanged(t, cp)

	res = cp.Kubectl(ctx, "", "delete", "fireworksapps.v1-1-5.composition.krateo.io", "innocent", "-n", "ops", "--timeout", "60s")
	require.NoError(t, res.Err, res.Stderr)
	foreignUnchanged(t, cp)
}

// foreignUnchanged asserts that release db in ops is still opschart at revision 1 and
// its ConfigMap keeps its data.
func foreignUnchanged(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	res := cp.Helm(context.Background(), "history", "db", "-n", "ops", "-o", "json")
	require.NoError(t, res.Err, res.Stderr)
	var history []map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.Stdout), &history))
	require.Len(t, history, 1, "the foreign release was not upgraded")
	assert.Equal(t, "opschart-1.0.0", history[0]["chart"])
	assert.Equal(t, "deployed", history[0]["status"])
	cm := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(context.Background(), client.ObjectKey{Namespace: "ops", Name: "precious-data"}, cm))
	assert.Equal(t, "yes", cm.Data["keep"])
}

// frozenForControllers refuses every update of a FireworksApp by a ServiceAccount, and
// by anyone who sets the e2e/probe annotation (so the test knows it is in force).
const frozenForControllers = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: frozen-for-controllers}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [composition.krateo.io]
      apiVersions: ["*"]
      operations: [UPDATE]
      resources: [fireworksapps]
  validations:
  - expression: "!request.userInfo.username.startsWith('system:serviceaccount:') && !(has(object.metadata.annotations) && 'e2e/probe' in object.metadata.annotations)"
    message: fireworksapps are frozen for controllers
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: frozen-for-controllers}
spec:
  policyName: frozen-for-controllers
  validationActions: [Deny]
`

// Issue 12, last item: a composition whose controller cannot write it (here the API
// server refuses the controller's finalizer update) says so in its conditions, and
// nothing is installed.
func TestCompositionSaysWhyItsControllerCannotAct(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	readyDefinition(t, cp)
	ctx := context.Background()
	const resource = "fireworksapps.v1-1-5.composition.krateo.io"

	stuck := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata:\n  name: stuck\n  namespace: fireworksapp-system\n" +
		"  annotations: {krateo.io/paused: \"true\"}\nspec: {replicaCount: 1}\n"
	res := cp.Kubectl(ctx, stuck, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	applyPolicies(t, cp, frozenForControllers)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "annotate", "--dry-run=server", resource, "stuck", "-n", "fireworksapp-system", "e2e/probe=1")
		assert.Contains(c, res.Stderr, "fireworksapps are frozen for controllers")
	}, time.Minute, 250*time.Millisecond)

	res = cp.Kubectl(ctx, "", "annotate", resource, "stuck", "-n", "fireworksapp-system", "krateo.io/paused-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, readyCondition(c, cp, resource, "fireworksapp-system", "stuck"),
			"False UpdateRefused nothing was installed: the controller could not add its finalizer compositor.dev/composition to the composition:")
	}, 2*time.Minute, 250*time.Millisecond)
	assert.Contains(t, readyCondition(t, cp, resource, "fireworksapp-system", "stuck"), "fireworksapps are frozen for controllers")
	res = cp.Kubectl(ctx, "", "describe", resource, "stuck", "-n", "fireworksapp-system")
	require.NoError(t, res.Err, res.Stderr)
	assert.Contains(t, res.Stdout, "UpdateRefused")
	assert.Error(t, cp.Helm(ctx, "status", "stuck", "-n", "fireworksapp-system").Err, "nothing was installed")
	absent(t, cp, &corev1.ConfigMap{}, "fireworksapp-system", "stuck-config")
}
