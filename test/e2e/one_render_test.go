package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// tplChart is chart tells 0.1.0: a ConfigMap whose note is a value passed through tpl,
// as Bitnami's common.tplvalues.render passes extraDeploy and friends: the value is a
// template of its own, which sees what the chart's templates see.
func tplChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "tells", Version: "0.1.0"},
		Values:   map[string]any{"note": "hello", "round": 0},
		Schema:   []byte(`{"type":"object","properties":{"note":{"type":"string"},"round":{"type":"integer"}},"additionalProperties":false}`),
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: {{ .Release.Name }}}
data:
  note: {{ tpl .Values.note . | quote }}
  round: {{ .Values.round | quote }}
  revision: {{ .Release.Revision | quote }}
`)}},
	}
}

// applyTells applies a composition of the tells chart with kubectl.
func applyTells(cp *controlplane.ControlPlane, namespace, name, note string, round int) controlplane.Result {
	manifest := fmt.Sprintf("apiVersion: composition.krateo.io/v0-1-0\nkind: Tells\nmetadata: {name: %s, namespace: %s}\nspec:\n  note: %q\n  round: %d\n", name, namespace, note, round)
	return cp.Kubectl(context.Background(), manifest, "apply", "-f", "-")
}

// requireTellsInstalled waits until the tells composition is Ready and its ConfigMap
// holds round.
func requireTellsInstalled(t *testing.T, cp *controlplane.ControlPlane, namespace, name string, round int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cm := &corev1.ConfigMap{}
		if assert.NoError(c, cp.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, cm)) {
			assert.Equal(c, fmt.Sprint(round), cm.Data["round"])
		}
		ready := readyCondition(t, cp, "tells", namespace, name)
		assert.True(c, strings.HasPrefix(ready, "True "), ready)
	}, 2*time.Minute, 50*time.Millisecond, "%s/%s round %d is installed", namespace, name, round)
}

// loop is a template that runs about a billion empty iterations: minutes of CPU.
const loop = `{{ range until 1000 }}{{ range until 1000 }}{{ range until 1000 }}{{ end }}{{ end }}{{ end }}`

// Issue 47: a template can tell the renders of an install apart — by the revision,
// install or upgrade, what lookup finds, what the cluster serves — so a value that
// loops only in the render Helm applies would, with Helm rendering in Compositor's
// process, cost that process the whole loop. The install renders once, in the sandbox,
// with Helm's real inputs, and Helm applies that render: each variant is stopped at
// the deadline in a worker and refused with the reason (RenderRefused), installs
// nothing new, and costs Compositor's own process (this test's, where it runs) little
// CPU per write. Another namespace's installs meanwhile are timed and logged.
func TestTemplatesThatTellRendersApartStopInTheSandbox(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	applyDefinition(t, cp, serveCharts(t, tplChart()).URL, "tells", "tells", "0.1.0")
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b"} {
		res := cp.Kubectl(ctx, "", "create", "namespace", ns)
		require.NoError(t, res.Err, res.Stderr)
	}
	trigger := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "trigger", Namespace: "team-a"}, Data: map[string]string{"flag": "on"}}
	require.NoError(t, cp.Client.Create(ctx, trigger))

	applied := func(namespace, name, note string, round int) error {
		if res := applyTells(cp, namespace, name, note, round); res.Err != nil {
			return fmt.Errorf("%s/%s is admitted (no rendered policy is in force): %w: %s", namespace, name, res.Err, res.Stderr)
		}
		return nil
	}
	apply := func(namespace, name, note string, round int) {
		t.Helper()
		require.NoError(t, applied(namespace, name, note, round))
	}
	ready := func(namespace, name string) string { return readyCondition(t, cp, "tells", namespace, name) }
	installed := func(namespace, name string, round int) {
		t.Helper()
		requireTellsInstalled(t, cp, namespace, name, round)
	}

	// Each variant loops only where the admission-time render (revision 1, an install
	// or an upgrade by the operation, Helm's default capabilities, lookup finding
	// nothing) does not.
	variants := []struct {
		name, note string
		// installs: the first install passes, and an upgrade is what loops.
		installsFirst bool
	}{
		{"revision", `{{ if gt (int .Release.Revision) 1 }}` + loop + `{{ end }}ok`, true},
		{"upgrade", `{{ if .Release.IsUpgrade }}` + loop + `{{ end }}ok`, true},
		{"install", `{{ if .Release.IsInstall }}` + loop + `{{ end }}ok`, false},
		{"lookup", `{{ if lookup "v1" "ConfigMap" .Release.Namespace "trigger" }}` + loop + `{{ end }}ok`, false},
		{"capabilities", `{{ if .Capabilities.APIVersions.Has "composition.krateo.io/v0-1-0/Tells" }}` + loop + `{{ end }}ok`, false},
	}
	var quiet, attacked []time.Duration
	writeB := func(phase string, n int, into *[]time.Duration) {
		for i := range n {
			name := fmt.Sprintf("b-%s-%d", phase, i)
			start := time.Now()
			apply("team-b", name, "plain", 1)
			installed("team-b", name, 1)
			*into = append(*into, time.Since(start))
		}
	}
	writeB("quiet", 8, &quiet)

	selfCPU := func() time.Duration {
		var u syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &u))
		return time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	idleStart, idleCPU := time.Now(), selfCPU()
	time.Sleep(3 * time.Second)
	idleRate := float64(selfCPU()-idleCPU) / float64(time.Since(idleStart))

	for _, v := range variants {
		if v.installsFirst {
			apply("team-a", v.name, v.note, 1)
			installed("team-a", v.name, 1)
		}
	}
	refused := func(round int) {
		t.Helper()
		for _, v := range variants {
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				got := ready("team-a", v.name)
				assert.True(c, strings.HasPrefix(got, "False RenderRefused "), got)
				assert.Contains(c, got, "was stopped at the deadline")
			}, 2*time.Minute, 50*time.Millisecond, "team-a's %s loop of round %d is refused", v.name, round)
			cm := &corev1.ConfigMap{}
			err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: v.name}, cm)
			if v.installsFirst {
				require.NoError(t, err)
				assert.Equal(t, "1", cm.Data["round"], "team-a's %s: the refused upgrade changed nothing", v.name)
			} else {
				assert.Error(t, err, "team-a's %s installed nothing", v.name)
			}
		}
	}

	// What a write costs Compositor's process beyond what it spends idle: first as
	// many benign writes (installs of a plain value), then the loops alone. A loop in
	// this process would cost seconds a write; a refusal in a worker costs what any
	// write's admission and reconcile cost.
	cost := func(write func(), n int) time.Duration {
		start, cpu := time.Now(), selfCPU()
		write()
		spent, elapsed := selfCPU()-cpu, time.Since(start)
		return (spent - time.Duration(idleRate*float64(elapsed))) / time.Duration(n)
	}
	benign := cost(func() {
		for _, v := range variants {
			apply("team-a", "plain-"+v.name, "plain", 1)
		}
		for _, v := range variants {
			installed("team-a", "plain-"+v.name, 1)
		}
	}, len(variants))
	looping := cost(func() {
		for _, v := range variants {
			apply("team-a", v.name, v.note, 2) // an upgrade for the first two, an install for the rest
		}
		refused(2)
	}, len(variants))
	t.Logf("Compositor's process, CPU a write beyond idle (%.0f ms/s): %s for a benign install, %s for a write whose loop was refused (its sandbox workers are other processes)",
		idleRate*1000, benign.Round(time.Millisecond), looping.Round(time.Millisecond))
	assert.Less(t, looping-benign, 100*time.Millisecond, "no loop ran in Compositor's process (one would take seconds)")

	// Another namespace's installs while team-a writes its loops again, every second.
	loopsCtx, stopLoops := context.WithCancel(ctx)
	looped := make(chan int)
	go func() {
		round := 2
		defer func() { looped <- round }()
		for loopsCtx.Err() == nil {
			round++
			for _, v := range variants {
				if err := applied("team-a", v.name, v.note, round); err != nil {
					t.Error(err)
				}
			}
			select {
			case <-loopsCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	writeB("attacked", 8, &attacked)
	stopLoops()
	refused(<-looped)
	t.Logf("team-b, %d installs without the loops: p50 %s, p99 %s", len(quiet), latencyPercentile(quiet, 50), latencyPercentile(quiet, 99))
	t.Logf("team-b, %d installs while team-a wrote its %d loops again every second: p50 %s, p99 %s", len(attacked), len(variants), latencyPercentile(attacked, 50), latencyPercentile(attacked, 99))

	// What Helm applied is the sandbox's render of the real inputs: the revision
	// reaches the ConfigMap as the release records it.
	apply("team-b", "b-quiet-0", "plain", 2)
	installed("team-b", "b-quiet-0", 2)
	cm := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "b-quiet-0"}, cm))
	assert.Equal(t, "2", cm.Data["revision"])
}

// quietNote is a rendered policy of the tells chart: it judges what the chart renders,
// so admission and the audit render every composition of it.
const quietNote = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: quiet-note
spec:
  target: rendered
  match:
    kinds: [{group: composition.krateo.io, kind: Tells}]
  rego: |
    package compositor.quietnote

    deny contains {"msg": "the note shouts", "path": "spec.note"} if {
      some obj in input.rendered
      obj.kind == "ConfigMap"
      contains(obj.data.note, "!")
    }
`

// Issue 47, the audit: a template that loops only on install passes admission when an
// update adds it (rendered, as the install will render it, as an upgrade), and Helm
// upgrades it. The audit judges an installed composition as its next upgrade would
// render, in its namespace's lane, and only when something it is judged from changed:
// with 15 such compositions and a pass every second, the audit finds nothing to refuse
// (no render was stopped), a pass over them unchanged renders nothing (counted on
// /metrics), and another namespace's writes meanwhile are all admitted and installed.
// Their latencies, quiet and under the audit, are logged.
func TestTheAuditOfInstallOnlyLoopsCostsOtherNamespacesNothing(t *testing.T) {
	cp := controlplane.Start(t)
	var metrics string
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.Controllers = app.ControllersInProcess
		o.AuditInterval = time.Second
		o.MetricsAddr = freePort(t)
		metrics = o.MetricsAddr
	})
	applyDefinition(t, cp, serveCharts(t, tplChart()).URL, "tells", "tells", "0.1.0")
	applyPolicies(t, cp, quietNote)
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b"} {
		res := cp.Kubectl(ctx, "", "create", "namespace", ns)
		require.NoError(t, res.Err, res.Stderr)
	}
	apply := func(namespace, name, note string, round int) controlplane.Result {
		return applyTells(cp, namespace, name, note, round)
	}
	installed := func(namespace, name string, round int) {
		t.Helper()
		requireTellsInstalled(t, cp, namespace, name, round)
	}
	var written int
	writeB := func(n int) (took []time.Duration) {
		for range n {
			written++
			name := fmt.Sprintf("b-%d", written)
			start := time.Now()
			res := apply("team-b", name, "plain", 1)
			require.NoError(t, res.Err, "team-b's %s is admitted: %s", name, res.Stderr)
			installed("team-b", name, 1)
			took = append(took, time.Since(start))
		}
		return took
	}
	quiet := writeB(8)

	installOnly := `{{ if .Release.IsInstall }}` + loop + `{{ end }}ok`
	res := apply("team-a", "direct", installOnly, 1)
	require.Error(t, res.Err, "a create renders as an install, which loops")
	assert.Contains(t, res.Stderr, "stopped at the deadline")

	const attackers = 15
	for i := range attackers {
		res := apply("team-a", fmt.Sprintf("a-%d", i), "plain", 1)
		require.NoError(t, res.Err, res.Stderr)
	}
	for i := range attackers {
		installed("team-a", fmt.Sprintf("a-%d", i), 1)
	}
	for i := range attackers {
		res := apply("team-a", fmt.Sprintf("a-%d", i), installOnly, 2)
		require.NoError(t, res.Err, "an update renders as an upgrade, which does not loop: %s", res.Stderr)
	}
	for i := range attackers {
		installed("team-a", fmt.Sprintf("a-%d", i), 2)
	}

	audited := func(result string) float64 {
		return counter(t, metrics, "compositor_audit_compositions_total", map[string]string{"result": result})
	}
	auditRenders := func() float64 {
		return counter(t, metrics, "compositor_chart_renders_total", map[string]string{"purpose": "audit"})
	}
	// Settled: a pass after the upgrades found every composition and judged none again.
	all := float64(attackers + len(quiet))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		judged, unchanged := audited("judged"), audited("unchanged")
		time.Sleep(2500 * time.Millisecond) // two passes or more
		assert.Equal(c, judged, audited("judged"), "compositions judged again")
		assert.GreaterOrEqual(c, audited("unchanged")-unchanged, all, "passes over every composition")
	}, 2*time.Minute, 100*time.Millisecond, "the audit settles")
	// No render of the audit was stopped: it would be a violation of the policy.
	policy := &policyv1alpha1.CompositionPolicy{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "quiet-note"}, policy))
	require.NotNil(t, policy.Status.Audit.LastRunTime, "the audit ran")
	assert.Zero(t, policy.Status.Audit.ViolationCount, "no render of the audit was stopped: %v", policy.Status.Audit.Examples)

	// Three passes or more over the compositions unchanged render nothing.
	renders, judged, unchanged := auditRenders(), audited("judged"), audited("unchanged")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, audited("unchanged")-unchanged, 3*all, "three passes or more")
	}, time.Minute, 100*time.Millisecond)
	assert.Zero(t, auditRenders()-renders, "renders of passes over unchanged compositions")
	assert.Zero(t, audited("judged")-judged, "compositions judged again")

	renders, judged = auditRenders(), audited("judged")
	attacked := writeB(8)
	renders, judged = auditRenders()-renders, audited("judged")-judged
	t.Logf("team-b, %d writes (admitted and installed) before team-a's %d install-only loops: p50 %s, p99 %s", len(quiet), attackers, latencyPercentile(quiet, 50), latencyPercentile(quiet, 99))
	t.Logf("team-b, %d writes during audit passes every second over them: p50 %s, p99 %s; the audit judged %.0f compositions and rendered %.0f charts meanwhile",
		len(attacked), latencyPercentile(attacked, 50), latencyPercentile(attacked, 99), judged, renders)
}
