package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/policies/sandbox"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// slowForTeamA runs until the deadline over the rendered manifests of compositions of
// team-a labelled slow, without building anything big: two nested loops over 100,000
// numbers. Being a rendered policy matching every kind, it also has every composition
// rendered at admission, team-a's loops with size 100,000 (a template that loops on a
// value) included.
const slowForTeamA = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: slow-for-team-a
spec:
  target: rendered
  match:
    kinds: [{group: composition.krateo.io, kind: "*"}]
  rego: |
    package compositor.slow

    deny contains "never" if {
      input.review.object.metadata.namespace == "team-a"
      input.review.object.metadata.labels.slow == "true"
      some obj in input.rendered
      some x in numbers.range(1, 100000)
      some y in numbers.range(1, 100000)
      x * y < 0
    }
`

// Issue 26: one namespace sends runaways four at a time without pause for 40 s —
// compositions nested 9,000 levels deep, compositions whose template loops on a value
// (loops, size 100,000), and compositions that a rendered policy takes the whole
// deadline over — while another namespace writes every second: every write of the
// second namespace is admitted. Its latency with and without the attacker,
// Compositor's RSS (it runs in this process, its sandbox workers in children of it),
// the CPU spent once the last runaway was answered and the refusals counted on
// /metrics are logged.
func TestOneNamespaceCannotStarveAnother(t *testing.T) {
	cp := controlplane.Start(t)
	var metricsAddr string
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.MetricsAddr = freePort(t)
		metricsAddr = o.MetricsAddr
	})
	readyDefinition(t, cp)
	applyDefinition(t, cp, serveCharts(t, loopsChart()).URL, "loops", "loops", "0.1.0")
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b"} {
		res := cp.Kubectl(ctx, "", "create", "namespace", ns)
		require.NoError(t, res.Err, res.Stderr)
	}
	res := cp.Kubectl(ctx, slowForTeamA, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)

	composition := func(namespace, name string, spec map[string]any, labels map[string]any) *unstructured.Unstructured {
		metadata := map[string]any{"name": name, "namespace": namespace}
		if labels != nil {
			metadata["labels"] = labels
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "composition.krateo.io/v1-1-5", "kind": "FireworksApp", "metadata": metadata, "spec": spec,
		}}
	}
	deep := func() map[string]any {
		var v any = "x"
		for range 9000 {
			v = map[string]any{"nest": v}
		}
		return v.(map[string]any)
	}()
	create := func(obj *unstructured.Unstructured) (time.Duration, error) {
		start := time.Now()
		err := cp.Client.Create(ctx, obj)
		return time.Since(start), err
	}

	loops := func(namespace, name string, size int) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "composition.krateo.io/v0-1-0", "kind": "Loops",
			"metadata": map[string]any{"name": name, "namespace": namespace}, "spec": map[string]any{"size": int64(size)},
		}}
	}

	// The slow policy is in force once team-a's slow write is denied at the deadline.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := create(composition("team-a", "probe", map[string]any{"replicaCount": 2}, map[string]any{"slow": "true"}))
		if assert.Error(c, err) {
			assert.Contains(c, err.Error(), "did not finish within")
		}
	}, time.Minute, 500*time.Millisecond)
	// A deep one is refused at once, naming the limit.
	_, err := create(composition("team-a", "deep", deep, nil))
	require.Error(t, err)
	require.Contains(t, err.Error(), "levels deep, more than the limit of 64 (--max-value-depth)")
	// A template that loops on a value is stopped at the deadline.
	_, err = create(loops("team-a", "loop", 100000))
	require.Error(t, err)
	require.Contains(t, err.Error(), "rendering chart loops was stopped at the deadline")

	var written atomic.Int64
	// writes creates a composition in team-b every second for d and returns the
	// latency of each; every one must be admitted.
	writes := func(phase string, d time.Duration) []time.Duration {
		var out []time.Duration
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
			name := fmt.Sprintf("web-%d", written.Add(1))
			took, err := create(composition("team-b", name, map[string]any{"replicaCount": 2}, nil))
			assert.NoError(t, err, "%s: team-b's write %s", phase, name)
			out = append(out, took)
		}
		return out
	}

	const window = 40 * time.Second
	quiet := writes("without the attacker", window)

	rssBefore, _ := fairnessRSS(t)
	var peakRSS atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(100 * time.Millisecond):
				if now, _ := fairnessRSS(t); now > peakRSS.Load() {
					peakRSS.Store(now)
				}
			}
		}
	}()

	attackCtx, stopAttack := context.WithCancel(ctx)
	var attackers sync.WaitGroup
	var attacks, deadlines atomic.Int64
	var lastRunaway atomic.Int64 // unix nanos at which the last runaway's answer came
	for i := range 4 {
		attackers.Add(1)
		go func() {
			defer attackers.Done()
			for n := 0; attackCtx.Err() == nil; n++ {
				var obj *unstructured.Unstructured
				switch (i + n) % 3 {
				case 0:
					obj = composition("team-a", fmt.Sprintf("deep-%d-%d", i, n), deep, nil)
				case 1:
					obj = composition("team-a", fmt.Sprintf("slow-%d-%d", i, n), map[string]any{"replicaCount": 2}, map[string]any{"slow": "true"})
				default:
					obj = loops("team-a", fmt.Sprintf("loop-%d-%d", i, n), 100000)
				}
				_, err := create(obj)
				attacks.Add(1)
				lastRunaway.Store(time.Now().UnixNano())
				switch {
				case err == nil:
					t.Errorf("team-a's runaway %s was admitted", obj.GetName())
				case strings.Contains(err.Error(), "did not finish within"), strings.Contains(err.Error(), "stopped at the deadline"):
					deadlines.Add(1)
				}
			}
		}()
	}
	time.Sleep(time.Second) // the attack is under way
	attacked := writes("with the attacker", window)
	stopAttack()
	attackers.Wait()
	close(stopSampling)
	<-sampled

	// CPU spent once the last runaway was answered, by this process and its children
	// (the workers killed at the deadline are reaped by then): Compositor should be
	// idle again.
	time.Sleep(time.Until(time.Unix(0, lastRunaway.Load()).Add(500 * time.Millisecond)))
	cpuBefore := processCPU()
	time.Sleep(3 * time.Second)
	idleCPU := processCPU() - cpuBefore

	_, hwm := fairnessRSS(t)
	refused := refusalCounts(t, metricsAddr)
	t.Logf("team-b, %d writes without the attacker: p50 %s, p99 %s", len(quiet), latencyPercentile(quiet, 50), latencyPercentile(quiet, 99))
	t.Logf("team-b, %d writes while team-a sent %d runaways four at a time (%d stopped at the deadline): p50 %s, p99 %s",
		len(attacked), attacks.Load(), deadlines.Load(), latencyPercentile(attacked, 50), latencyPercentile(attacked, 99))
	t.Logf("RSS of this process (Compositor and the test) and its sandbox workers: %d MiB before the attack, peak %d MiB during it (this process's VmHWM %d MiB); CPU of both in the 3 s after the last runaway's answer: %s",
		rssBefore>>20, peakRSS.Load()>>20, hwm>>20, idleCPU)
	t.Logf("compositor_admission_refusals_total: %v", refused)
	assert.NotEmpty(t, attacked)
	assert.Positive(t, refused["depth"], "the deep compositions were refused for their depth")
}

// fairnessRSS is the RSS of this process and its children (the sandbox workers), and
// this process's VmHWM, in bytes.
func fairnessRSS(t *testing.T) (now, peak int64) {
	t.Helper()
	now, peak = statusRSS("/proc/self/status")
	for _, pid := range sandboxWorkers() {
		rss, _ := statusRSS(fmt.Sprintf("/proc/%d/status", pid))
		now += rss
	}
	return now, peak
}

// sandboxWorkers are the sandbox workers this process runs: its children started
// with sandbox.Subcommand.
func sandboxWorkers() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(fields) > 1 {
			if ppid, _ := strconv.Atoi(fields[1]); ppid != self {
				continue
			}
			if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), sandbox.Subcommand) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// statusRSS reads VmRSS and VmHWM from a /proc status file, in bytes.
func statusRSS(path string) (now, peak int64) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			now = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return now, peak
}

// processCPU is the user and system CPU time so far of this process and of its
// children that ended.
func processCPU() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var u syscall.Rusage
		if err := syscall.Getrusage(who, &u); err == nil {
			total += time.Duration(u.Utime.Nano() + u.Stime.Nano())
		}
	}
	return total
}

func latencyPercentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)].Round(time.Millisecond)
}

// refusalCounts reads compositor_admission_refusals_total by reason from /metrics.
func refusalCounts(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	for _, m := range families["compositor_admission_refusals_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "reason" {
				out[l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// Issue 26, the controllers: compositions whose template loops on a value pass
// admission when no rendered policy is in force. The controller renders each in the
// sandbox before Helm would render it in Compositor's process, stops it at the
// deadline and says so (RenderRefused), holding at most the namespace's lane of
// workers: another namespace's compositions are installed meanwhile, about as fast
// as with no attacker.
func TestRunawayRendersHoldNoControllerWorker(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	applyDefinition(t, cp, serveCharts(t, loopsChart()).URL, "loops", "loops", "0.1.0")
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b"} {
		res := cp.Kubectl(ctx, "", "create", "namespace", ns)
		require.NoError(t, res.Err, res.Stderr)
	}
	loops := func(namespace, name string, size int) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "composition.krateo.io/v0-1-0", "kind": "Loops",
			"metadata": map[string]any{"name": name, "namespace": namespace}, "spec": map[string]any{"size": int64(size)},
		}}
	}
	ready := func(namespace, name string) (status, reason, message string) {
		obj := loops(namespace, name, 0)
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return "", "", err.Error()
		}
		conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conditions {
			if c, ok := c.(map[string]any); ok && c["type"] == "Ready" {
				status, _ = c["status"].(string)
				reason, _ = c["reason"].(string)
				message, _ = c["message"].(string)
			}
		}
		return status, reason, message
	}
	var written atomic.Int64
	// installs creates n compositions of team-b one after the other and returns how
	// long each took to be installed (Ready).
	installs := func(phase string, n int) []time.Duration {
		var out []time.Duration
		for range n {
			name := fmt.Sprintf("web-%d", written.Add(1))
			start := time.Now()
			require.NoError(t, cp.Client.Create(ctx, loops("team-b", name, 3)), phase)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				status, reason, message := ready("team-b", name)
				assert.Equal(c, "True", status, "%s: %s %s", phase, reason, message)
			}, 2*time.Minute, 20*time.Millisecond, "%s: team-b's %s is installed", phase, name)
			out = append(out, time.Since(start))
		}
		return out
	}
	quiet := installs("without the attacker", 5)

	attackCtx, stopAttack := context.WithCancel(ctx)
	var attackers sync.WaitGroup
	var runaways []string
	var mu sync.Mutex
	for i := range 4 {
		attackers.Go(func() {
			for n := 0; attackCtx.Err() == nil; n++ {
				name := fmt.Sprintf("loop-%d-%d", i, n)
				if err := cp.Client.Create(ctx, loops("team-a", name, 100000)); err != nil {
					t.Errorf("team-a's %s was not admitted (no rendered policy is in force): %v", name, err)
					return
				}
				mu.Lock()
				runaways = append(runaways, name)
				mu.Unlock()
				select {
				case <-attackCtx.Done():
				case <-time.After(time.Second):
				}
			}
		})
	}
	time.Sleep(2 * time.Second) // the attack is under way
	attacked := installs("with the attacker", 10)
	stopAttack()
	attackers.Wait()

	// Each runaway is refused with the reason, and installs nothing.
	for _, name := range runaways {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			status, reason, message := ready("team-a", name)
			assert.Equal(c, "False", status)
			assert.Equal(c, "RenderRefused", reason, message)
			assert.Contains(c, message, "nothing was installed: rendering the chart with these values did not finish within")
		}, 2*time.Minute, 100*time.Millisecond, "team-a's %s", name)
		cm := &unstructured.Unstructured{}
		cm.SetAPIVersion("v1")
		cm.SetKind("ConfigMap")
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: name}, cm)
		assert.True(t, apierrors.IsNotFound(err), "team-a's %s installed nothing: %v", name, err)
	}
	stopped := 0
	for _, name := range runaways {
		status, reason, message := ready("team-a", name)
		if !strings.Contains(message, "was stopped at the deadline") {
			t.Logf("team-a's %s is not refused for being stopped at the deadline: %s %s %s", name, status, reason, message)
		} else if stopped++; stopped == 1 {
			t.Logf("team-a's %s: %s", name, message)
		}
	}
	_, _, message := ready("team-a", runaways[len(runaways)-1])
	t.Logf("team-a's %d runaways, %d of them refused for being stopped at the deadline (a render that could not start, its namespace's lane of sandbox workers full, is tried again, not refused); the last: %s", len(runaways), stopped, message)
	assert.Equal(t, len(runaways), stopped, "every runaway is refused for what it did, not for its turn")
	t.Logf("team-b, %d installs without the attacker: p50 %s, max %s", len(quiet), latencyPercentile(quiet, 50), latencyPercentile(quiet, 100))
	t.Logf("team-b, %d installs while team-a created a runaway every second from each of 4 writers: p50 %s, max %s",
		len(attacked), latencyPercentile(attacked, 50), latencyPercentile(attacked, 100))
}
