package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

const rolloutNamespace = "rollouts"

// rolloutRepository serves fireworks-app 1.1.5 as the samples have it, and two later
// versions made for this test:
//
//   - 2.0.0, the sample 2.0.0 with replicaCount at most 4 (1.1.5 allows 10) and no
//     ConfigMap: its upgrade refuses compositions with more replicas and deletes every
//     release's ConfigMap;
//   - 2.0.1, that 2.0.0 with a template that renders, for replicaCount 3, a ConfigMap
//     whose name the API server refuses: its template fails for some values, at
//     install, where no plan can see it.
func rolloutRepository(t *testing.T) *chartserver.Repository {
	t.Helper()
	dir := t.TempDir()
	v115, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	publish(t, dir, v115)
	for _, version := range []string{"2.0.0", "2.0.1"} {
		ch, err := samplecharts.Load("2.0.0")
		require.NoError(t, err)
		ch.Metadata.Version = version
		ch.Schema = bytes.Replace(ch.Schema, []byte(`"maximum": 20`), []byte(`"maximum": 4`), 1)
		require.Contains(t, string(ch.Schema), `"maximum": 4`)
		ch.Templates = slices.DeleteFunc(ch.Templates, func(f *chartcommon.File) bool { return f.Name == "templates/configmap.yaml" })
		if version == "2.0.1" {
			ch.Templates = append(ch.Templates, &chartcommon.File{Name: "templates/broken.yaml", Data: []byte(
				"{{- if eq (int .Values.replicaCount) 3 }}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}_Three\ndata: {}\n{{- end }}\n")})
		}
		publish(t, dir, ch)
	}
	return chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
}

// rolloutApps are the 20 compositions: app-03 and app-11 have 6 replicas, which 2.0.0
// refuses; app-05 has 3, which 2.0.1's template fails for.
func rolloutApps() map[string]int {
	apps := map[string]int{}
	for i := range 20 {
		apps[fmt.Sprintf("app-%02d", i)] = 1 + i%2
	}
	apps["app-03"], apps["app-11"] = 6, 6
	apps["app-05"] = 3
	return apps
}

// TestStagedRollout moves 20 compositions from 1.1.5 to 2.0.0 as issue #30 asks: the
// plan names the two compositions 2.0.0 refuses and the objects it would delete,
// nothing moves until it is approved, then a canary of 2 and the rest in batches; the
// refused two stay on 1.1.5. The next version, 2.0.1, fails for one composition's
// values: the rollout stops and moves the moved ones back. Every composition ends Ready
// on the version it should be on.
func TestStagedRollout(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.Controllers = app.ControllersInProcess
		o.AllowChartNetworks = chartfetch.LoopbackNetworks()
	})
	repo := rolloutRepository(t)
	ctx := context.Background()
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
		return res.Stdout
	}
	definitionAt := func(version string) string {
		return definition(repo.URL, rolloutNamespace, "fireworksapp", version) +
			"  upgrade: {canary: 2, batchSize: 8, progressDeadlineSeconds: 120}\n"
	}
	getDefinition := func(t assert.TestingT) *corev1alpha1.CompositionDefinition {
		def := &corev1alpha1.CompositionDefinition{}
		assert.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: rolloutNamespace, Name: "fireworksapp"}, def))
		return def
	}
	// releases are the chart and status of each release.
	releases := func(t assert.TestingT) map[string]string {
		res := cp.Helm(ctx, "list", "-n", rolloutNamespace, "-o", "json")
		if !assert.NoError(t, res.Err, res.Stderr) {
			return nil
		}
		var list []helmRelease
		assert.NoError(t, json.Unmarshal([]byte(res.Stdout), &list))
		out := map[string]string{}
		for _, r := range list {
			out[r.Name] = r.Chart + " " + r.Status
		}
		return out
	}
	// onVersions waits until each composition is pinned to the version want names,
	// Ready, with its release deployed from that version's chart.
	onVersions := func(want map[string]string, timeout time.Duration) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := releases(c)
			for name, version := range want {
				assert.Equal(c, "fireworks-app-"+version+" deployed", got[name], name)
				res := cp.Kubectl(ctx, "", "get", "fireworksapps.composition.krateo.io", name, "-n", rolloutNamespace, "-o",
					`jsonpath={.metadata.labels.krateo\.io/composition-version} {.status.helmChartVersion} {.status.conditions[?(@.type=="Ready")].status}`)
				assert.Equal(c, "v"+strings.ReplaceAll(version, ".", "-")+" "+version+" True", res.Stdout, name)
			}
		}, timeout, time.Second)
	}
	phase := func(want string, timeout time.Duration) *corev1alpha1.Rollout {
		t.Helper()
		var ro *corev1alpha1.Rollout
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			ro = getDefinition(c).Status.Rollout
			if assert.NotNil(c, ro) {
				assert.Equal(c, want, ro.Phase, ro.Message)
			}
		}, timeout, 250*time.Millisecond)
		return ro
	}

	t.Cleanup(func() {
		if t.Failed() {
			res := cp.Kubectl(ctx, "", "get", "compositiondefinition", "fireworksapp", "-n", rolloutNamespace, "-o", "jsonpath={.status}")
			t.Logf("the definition's status: %s", res.Stdout)
			res = cp.Kubectl(ctx, "", "get", "events", "-n", rolloutNamespace)
			t.Logf("events:\n%s", res.Stdout)
		}
	})
	kubectl("", "create", "namespace", rolloutNamespace)
	kubectl(definitionAt("1.1.5"), "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "fireworksapp", "-n", rolloutNamespace, "--for", "condition=Ready=True", "--timeout", "120s")
	apps := rolloutApps()
	var manifests strings.Builder
	for name, replicas := range apps {
		fmt.Fprintf(&manifests, "---\napiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: %s, namespace: %s}\nspec: {replicaCount: %d, service: {type: ClusterIP}}\n", name, rolloutNamespace, replicas)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, manifests.String(), "apply", "-f", "-")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 250*time.Millisecond)
	all := func(version string) map[string]string {
		out := map[string]string{}
		for name := range apps {
			out[name] = version
		}
		return out
	}
	onVersions(all("1.1.5"), 4*time.Minute)

	// The move to 2.0.0 plans first, and waits: two refusals, 20 ConfigMaps deleted.
	kubectl(definitionAt("2.0.0"), "apply", "-f", "-")
	ro := phase(corev1alpha1.RolloutAwaitingApproval, 2*time.Minute)
	assert.EqualValues(t, 20, ro.Plan.ToMove)
	assert.EqualValues(t, 2, ro.Plan.Refused)
	assert.EqualValues(t, 20, ro.Plan.Deletions)
	require.Len(t, ro.Plan.RefusedCompositions, 2)
	assert.Contains(t, ro.Plan.RefusedCompositions[0], rolloutNamespace+"/app-03: ")
	assert.Contains(t, ro.Plan.RefusedCompositions[0], "replicaCount")
	assert.Contains(t, ro.Plan.RefusedCompositions[1], rolloutNamespace+"/app-11: ")
	assert.Contains(t, ro.Plan.DeletedObjects, rolloutNamespace+"/app-00: ConfigMap "+rolloutNamespace+"/app-00-config (v1)")
	assert.Contains(t, ro.Message, "kubectl annotate --overwrite compositiondefinition fireworksapp -n "+rolloutNamespace+" "+vocab.AnnotationApprovePlan+"="+ro.Plan.Hash)
	wide := kubectl("", "get", "compositiondefinition", "fireworksapp", "-n", rolloutNamespace, "-o", "wide")
	assert.Regexp(t, `AwaitingApproval\s+20\s+2\s+20`, wide)

	// compositor plan DEFINITION shows the whole plan the hash names.
	var out bytes.Buffer
	require.NoError(t, app.RunPlanDefinition(ctx, &out, nil, &app.PlanOptions{Kubeconfig: cp.Kubeconfig, Output: "text"}, rolloutNamespace, "fireworksapp"))
	assert.Contains(t, out.String(), "Plan "+ro.Plan.Hash)
	assert.Contains(t, out.String(), rolloutNamespace+"/app-03 (release app-03): refused")
	assert.Contains(t, out.String(), "- ConfigMap "+rolloutNamespace+"/app-07-config (v1)")

	// Nothing has moved, and an approval of another plan moves nothing either.
	kubectl("", "annotate", "compositiondefinition", "fireworksapp", "-n", rolloutNamespace, vocab.AnnotationApprovePlan+"=sha256:0000")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, getDefinition(c).Status.Rollout.Message, vocab.AnnotationApprovePlan+" names sha256:0000, which is not the plan now")
	}, time.Minute, 250*time.Millisecond)
	pinned := kubectl("", "get", "fireworksapps.composition.krateo.io", "-n", rolloutNamespace, "-l", vocab.LabelCompositionVersion+"=v1-1-5", "-o", "name")
	assert.Len(t, strings.Fields(pinned), 20, "nothing moves before the approval")
	assert.Empty(t, getDefinition(t).Status.Rollout.Moved)

	// Paused, an approved plan still moves nothing; resumed, a canary of 2 moves
	// first, then the rest, and the refused two stay.
	kubectl("", "annotate", "compositiondefinition", "fireworksapp", "-n", rolloutNamespace, vocab.AnnotationRolloutPaused+"=true")
	kubectl("", "annotate", "--overwrite", "compositiondefinition", "fireworksapp", "-n", rolloutNamespace, vocab.AnnotationApprovePlan+"="+ro.Plan.Hash)
	ro = phase(corev1alpha1.RolloutPaused, time.Minute)
	assert.Empty(t, ro.Moved)
	kubectl("", "annotate", "compositiondefinition", "fireworksapp", "-n", rolloutNamespace, vocab.AnnotationRolloutPaused+"-")
	ro = phase(corev1alpha1.RolloutComplete, 5*time.Minute)
	want := all("2.0.0")
	want["app-03"], want["app-11"] = "1.1.5", "1.1.5"
	onVersions(want, 2*time.Minute)
	require.Len(t, ro.Moved, 18)
	assert.Equal(t, []string{rolloutNamespace + "/app-00", rolloutNamespace + "/app-01"}, []string{ro.Moved[0].Name, ro.Moved[1].Name}, "the canary")
	assert.Empty(t, ro.Pending)
	assert.Len(t, ro.Stayed, 2)
	events := kubectl("", "get", "events", "-n", rolloutNamespace, "--field-selector", "reason="+"RolloutBatch", "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	assert.Contains(t, events, "moved "+rolloutNamespace+"/app-00, "+rolloutNamespace+"/app-01 to 2.0.0; 2 moved, 16 to move")
	err := cp.Client.Get(ctx, client.ObjectKey{Namespace: rolloutNamespace, Name: "app-00-config"}, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsNotFound(err), "2.0.0 deleted app-00's ConfigMap: %v", err)
	def := getDefinition(t)
	require.Len(t, def.Status.Retained, 1, "1.1.5 stays served for the two refused")
	assert.Equal(t, "composition.krateo.io/v1-1-5", def.Status.Retained[0].APIVersion)

	// A create through the retained v1-1-5 lands on the chart served now: a retained
	// version keeps its compositions and takes no new one.
	late := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: late, namespace: " + rolloutNamespace + "}\nspec: {replicaCount: 1, service: {type: LoadBalancer}}\n"
	kubectl(late, "apply", "-f", "-")
	assert.Equal(t, "v2-0-0 public", kubectl("", "get", "fireworksapps.v2-0-0.composition.krateo.io", "late", "-n", rolloutNamespace,
		"-o", `jsonpath={.metadata.labels.krateo\.io/composition-version} {.spec.exposure}`))

	// And it is judged by that chart: 6 replicas, which 1.1.5 allows and 2.0.0 does not,
	// are refused.
	res := cp.Kubectl(ctx, strings.ReplaceAll(strings.ReplaceAll(late, "late", "six"), "replicaCount: 1", "replicaCount: 6"), "apply", "-f", "-")
	require.Error(t, res.Err, "a create through v1-1-5 runs 2.0.0's chart, whose schema refuses 6 replicas")
	assert.Contains(t, res.Stderr, "replicaCount")

	// 2.0.1 fails for app-05 in the second batch: the rollout stops and moves the ten
	// it moved back to 2.0.0.
	kubectl(definitionAt("2.0.1"), "apply", "-f", "-")
	ro = phase(corev1alpha1.RolloutRolledBack, 5*time.Minute)
	assert.Contains(t, strings.Join(ro.Failed, "\n"), rolloutNamespace+"/app-05: ")
	assert.Len(t, ro.Moved, 10, "the canary and one batch of 8")
	assert.Contains(t, ro.Message, "moved back to 2.0.0")
	onVersions(want, 3*time.Minute)
	rolledBack := kubectl("", "get", "events", "-n", rolloutNamespace, "--field-selector", "reason=RolloutRolledBack", "-o", "name")
	assert.NotEmpty(t, strings.TrimSpace(rolledBack))
	def = getDefinition(t)
	var retained []string
	for _, r := range def.Status.Retained {
		retained = append(retained, r.APIVersion)
	}
	assert.ElementsMatch(t, []string{"composition.krateo.io/v1-1-5", "composition.krateo.io/v2-0-0"}, retained)
}
