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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// slowForTeamA runs until the deadline for compositions of team-a labelled slow, without
// building anything big: two nested loops over 100,000 numbers.
const slowForTeamA = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: slow-for-team-a
spec:
  match:
    kinds: [{group: composition.krateo.io, kind: "*"}]
  rego: |
    package compositor.slow

    deny contains "never" if {
      input.review.object.metadata.namespace == "team-a"
      input.review.object.metadata.labels.slow == "true"
      some x in numbers.range(1, 100000)
      some y in numbers.range(1, 100000)
      x * y < 0
    }
`

// Issue 26: one namespace sends runaways (compositions nested 9,000 levels deep, and
// compositions that a policy takes the whole deadline over) four at a time without
// pause, while another namespace writes every second: every write of the second
// namespace is admitted. Its latency with and without the attacker, Compositor's RSS
// (it runs in this process) and the refusals counted on /metrics are logged.
func TestOneNamespaceCannotStarveAnother(t *testing.T) {
	cp := controlplane.Start(t)
	var metricsAddr string
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.MetricsAddr = freePort(t)
		metricsAddr = o.MetricsAddr
	})
	readyDefinition(t, cp)
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

	const window = 20 * time.Second
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
				if n%2 == 0 {
					obj = composition("team-a", fmt.Sprintf("deep-%d-%d", i, n), deep, nil)
				} else {
					obj = composition("team-a", fmt.Sprintf("slow-%d-%d", i, n), map[string]any{"replicaCount": 2}, map[string]any{"slow": "true"})
				}
				_, err := create(obj)
				attacks.Add(1)
				lastRunaway.Store(time.Now().UnixNano())
				if err == nil {
					t.Errorf("team-a's runaway %s was admitted", obj.GetName())
				} else if strings.Contains(err.Error(), "did not finish within") {
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

	// CPU spent once the last runaway was answered: Compositor should be idle again.
	time.Sleep(time.Until(time.Unix(0, lastRunaway.Load()).Add(500 * time.Millisecond)))
	cpuBefore := processCPU()
	time.Sleep(3 * time.Second)
	idleCPU := processCPU() - cpuBefore

	_, hwm := fairnessRSS(t)
	refused := refusalCounts(t, metricsAddr)
	t.Logf("team-b, %d writes without the attacker: p50 %s, p99 %s", len(quiet), latencyPercentile(quiet, 50), latencyPercentile(quiet, 99))
	t.Logf("team-b, %d writes while team-a sent %d runaways four at a time (%d stopped at the deadline): p50 %s, p99 %s",
		len(attacked), attacks.Load(), deadlines.Load(), latencyPercentile(attacked, 50), latencyPercentile(attacked, 99))
	t.Logf("RSS of this process (Compositor and the test): %d MiB before the attack, peak %d MiB during it (VmHWM %d MiB); CPU in the 3 s after the last runaway's answer: %s",
		rssBefore>>20, peakRSS.Load()>>20, hwm>>20, idleCPU)
	t.Logf("compositor_admission_refusals_total: %v", refused)
	assert.NotEmpty(t, attacked)
	assert.Positive(t, refused["depth"], "the deep compositions were refused for their depth")
}

// fairnessRSS reads VmRSS and VmHWM of this process, in bytes.
func fairnessRSS(t *testing.T) (now, peak int64) {
	t.Helper()
	f, err := os.Open("/proc/self/status")
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

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
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
