package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// envFake makes the test binary a fake worker that answers every request with the
// bytes in envFakeBytes (hex), for the garbage tests.
const (
	envFake      = "SANDBOX_TEST_FAKE"
	envFakeBytes = "SANDBOX_TEST_FAKE_BYTES"
)

func TestMain(m *testing.M) {
	if os.Getenv(envFake) == "1" {
		os.Exit(fakeWorker())
	}
	Main()
	os.Exit(m.Run())
}

// fakeWorker reads one request and writes garbage on descriptor 3.
func fakeWorker() int {
	out := os.NewFile(answersFD, "answers")
	var buf []byte
	if _, err := readFrame(bufio.NewReader(os.Stdin), &buf, maxMessage); err != nil {
		return 1
	}
	var garbage []byte
	fmt.Sscanf(os.Getenv(envFakeBytes), "%x", &garbage)
	_, _ = out.Write(garbage)
	return 0
}

func newPool(t testing.TB, opts Options) *Pool {
	t.Helper()
	p, err := NewPool(opts)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func loadChart(t testing.TB, version string) *chart.Chart {
	t.Helper()
	ch, err := samplecharts.Load(version)
	require.NoError(t, err)
	return ch
}

func specOf(t testing.TB, y string) map[string]any {
	t.Helper()
	spec := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(y), &spec))
	return spec
}

// typicalSpec is values-full.yaml of 1.1.5: every documented value set.
func typicalSpec(t testing.TB) map[string]any {
	t.Helper()
	examples, err := samplecharts.Examples("1.1.5")
	require.NoError(t, err)
	for _, ex := range examples {
		if ex.Name == "values-full.yaml" {
			return specOf(t, string(ex.Values))
		}
	}
	t.Fatal("values-full.yaml not found")
	return nil
}

// loopChart renders n×n loop iterations: a template whose cost a composition chooses
// (n = 1e5 runs for hours in little memory).
func loopChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "loop", Version: "0.1.0"},
		Values:   map[string]any{"n": 1},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: loop}
data:
  x: "{{ range until (int .Values.n) }}{{ range until (int $.Values.n) }}{{ end }}{{ end }}"
`)}},
	}
}

// runaway are values that make loopChart render for hours.
var runaway = map[string]any{"n": int64(1e5)}

// A worker renders and checks exactly what the process would: same objects (same Go
// types, empty lists kept), same violations, errors matching the same sentinels.
func TestSameAnswersAsInProcess(t *testing.T) {
	p := newPool(t, Options{Workers: 2})
	ctx := context.Background()
	for _, version := range samplecharts.Versions() {
		ch := loadChart(t, version)
		examples, err := samplecharts.Examples(version)
		require.NoError(t, err)
		for _, ex := range examples {
			spec := specOf(t, string(ex.Values))
			for _, digest := range []string{"", "sha256:" + version} {
				opts := policies.RenderOptions{ReleaseName: "x", Namespace: "team-a", IsUpgrade: digest == ""}
				want, wantErr := policies.Render(ch, spec, opts)
				got, gotErr := p.Render(ctx, "rendering", ch, digest, spec, opts)
				if wantErr != nil {
					require.Error(t, gotErr, "%s %s", version, ex.Name)
					assert.Equal(t, wantErr.Error(), gotErr.Error())
					assert.ErrorIs(t, gotErr, policies.ErrRender)
				} else {
					require.NoError(t, gotErr, "%s %s", version, ex.Name)
					assert.Equal(t, want, got, "%s %s", version, ex.Name)
				}
				wantVs, err := policies.NewJSONSchemaValidator(0).ValidateValues(ctx, ch, digest, spec)
				require.NoError(t, err)
				gotVs, err := p.ValidateValues(ctx, "the schema check", ch, digest, spec)
				require.NoError(t, err)
				assert.Equal(t, wantVs, gotVs, "%s %s", version, ex.Name)
			}
		}
	}
	// Types survive the pipe: int64 and float64 stay apart, an empty list stays one.
	spec := map[string]any{"a": int64(1), "b": 1.0, "c": []any{}, "d": map[string]any{}, "e": nil, "f": []string{"x"}}
	var e encoder
	require.NoError(t, e.value(spec, 0))
	d := decoder{b: e.b}
	back, err := d.value(0)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"a": int64(1), "b": 1.0, "c": []any{}, "d": map[string]any{}, "e": nil, "f": []any{"x"}}, back)

	// A schema that does not compile is the same error as in-process.
	bad := loopChart()
	bad.Schema = []byte(`{"type": 12}`)
	_, err = p.ValidateValues(ctx, "the schema check", bad, "", nil)
	assert.ErrorIs(t, err, policies.ErrSchemaCompile)
	remote := loopChart()
	remote.Schema = []byte(`{"$ref": "https://example.com/s.json"}`)
	_, err = p.ValidateValues(ctx, "the schema check", remote, "", nil)
	assert.ErrorIs(t, err, policies.ErrRemoteRef)
	assert.Equal(t, int64(0), p.Stats().Killed, "errors of the work do not cost a worker")
}

// gone reports whether process pid no longer exists.
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// The runaway: a template that loops on a value (n = 1e9) is stopped at a 1 s
// deadline; its worker process is gone (killed and reaped: its CPU comes back) and
// the next render starts a fresh worker and succeeds at once.
func TestRunawayIsStoppedAtTheDeadline(t *testing.T) {
	p := newPool(t, Options{Workers: 1})
	ch := loopChart()
	opts := policies.RenderOptions{ReleaseName: "x", Namespace: "team-a"}
	_, err := p.Render(context.Background(), "warm-up", ch, "", nil, opts)
	require.NoError(t, err)
	pid := p.onlyPID(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = p.Render(ctx, "rendering chart loop", ch, "", runaway, opts)
	require.ErrorIs(t, err, policies.ErrDeadline)
	assert.Contains(t, err.Error(), "rendering chart loop was stopped at the deadline")
	assert.True(t, gone(pid), "the runaway's worker %d is gone", pid)
	assert.Equal(t, Stats{Started: 1, Killed: 1}, p.Stats())

	objs, err := p.Render(context.Background(), "rendering", ch, "", map[string]any{"n": int64(3)}, opts)
	require.NoError(t, err, "a fresh worker answers")
	assert.Len(t, objs, 1)
	assert.NotEqual(t, pid, p.onlyPID(t))

	// The issue's own sample, one loop of 1e9: sprig's until builds a list of 1e9
	// numbers (8 GB), so the worker runs out of memory before the deadline (unless it
	// is built with the race detector, where its memory is not bounded): either way
	// an error within the deadline, and the worker is gone.
	pid = p.onlyPID(t)
	one := loopChart()
	one.Templates[0] = &chartcommon.File{Name: "templates/cm.yaml", Data: []byte("{{ range until (int .Values.n) }}{{ end }}")}
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = p.Render(ctx, "rendering chart loop", one, "", map[string]any{"n": int64(1e9)}, opts)
	require.Error(t, err)
	if !errors.Is(err, policies.ErrDeadline) {
		assert.Contains(t, err.Error(), "out of memory")
	}
	assert.True(t, gone(pid), "the runaway's worker %d is gone", pid)
	_, err = p.Render(context.Background(), "rendering", ch, "", nil, opts)
	require.NoError(t, err)
}

// onlyPID is the pid of the pool's one idle worker.
func (p *Pool) onlyPID(t *testing.T) int {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Len(t, p.idle, 1)
	return p.idle[0].cmd.Process.Pid
}

// busyPIDs are the pids of the workers serving a request.
func (p *Pool) busyPIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for w := range p.live {
		idle := false
		for _, i := range p.idle {
			idle = idle || i == w
		}
		if !idle {
			out = append(out, w.cmd.Process.Pid)
		}
	}
	return out
}

// A worker killed in the middle of a request (by the OOM killer, say) gives a clear
// error at once, not a hang; the next request gets a fresh worker.
func TestWorkerKilledMidRequest(t *testing.T) {
	p := newPool(t, Options{Workers: 1})
	ch := loopChart()
	opts := policies.RenderOptions{ReleaseName: "x", Namespace: "team-a"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		for {
			if pids := p.busyPIDs(); len(pids) == 1 {
				time.Sleep(200 * time.Millisecond)
				_ = syscall.Kill(pids[0], syscall.SIGKILL)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, err := p.Render(ctx, "rendering chart loop", ch, "", runaway, opts)
	require.Error(t, err)
	assert.NotErrorIs(t, err, policies.ErrDeadline, "it ended when its worker died, not at the deadline")
	assert.Contains(t, err.Error(), "rendering chart loop: the sandbox worker failed (signal: killed): reading the answer: it ended without an answer")

	objs, err := p.Render(context.Background(), "rendering", ch, "", nil, opts)
	require.NoError(t, err)
	assert.Len(t, objs, 1)
	assert.Equal(t, int64(2), p.Stats().Started)
}

// A runaway allocation ends the worker (its memory is bounded), not the process.
func TestRunawayAllocationKillsOnlyTheWorker(t *testing.T) {
	if raceEnabled {
		t.Skip("under the race detector a worker's memory cannot be bounded (see limitData)")
	}
	p := newPool(t, Options{Workers: 1, MemoryLimit: 64 << 20})
	ch := loopChart()
	ch.Templates = []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(`{{ $s := "xxxxxxxxxxxxxxxx" }}{{ range until 40 }}{{ $s = print $s $s }}{{ end }}
apiVersion: v1
kind: ConfigMap
metadata: {name: big}
data: {n: "{{ len $s }}"}
`)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.Render(ctx, "rendering chart big", ch, "", nil, policies.RenderOptions{ReleaseName: "x", Namespace: "a"})
	require.Error(t, err)
	assert.NotErrorIs(t, err, policies.ErrDeadline)
	assert.Contains(t, err.Error(), "the sandbox worker failed")
	assert.Contains(t, err.Error(), "out of memory")
	_, err = p.Render(context.Background(), "rendering", loopChart(), "", nil, policies.RenderOptions{ReleaseName: "x", Namespace: "a"})
	require.NoError(t, err)
}

// Parallel requests each get a worker, at most Workers at once; the others wait. When
// every worker is held past a request's deadline, that request is refused saying so.
func TestConcurrencyIsBounded(t *testing.T) {
	p := newPool(t, Options{Workers: 2})
	ch := loadChart(t, "1.1.5")
	spec := typicalSpec(t)
	var wg sync.WaitGroup
	var maxLive atomic.Int64
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			objs, err := p.Render(context.Background(), "rendering", ch, "sha256:x", spec, policies.RenderOptions{ReleaseName: fmt.Sprint("r", i), Namespace: "a"})
			if err == nil && len(objs) == 0 {
				err = errors.New("nothing rendered")
			}
			errs <- err
			if live := int64(p.Stats().Live); live > maxLive.Load() {
				maxLive.Store(live)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, maxLive.Load(), int64(2))
	assert.LessOrEqual(t, p.Stats().Started, int64(2))

	// A lane holds at most half the workers: a second runaway of lane a cannot start
	// while the first runs, and a request of lane b starts at once.
	loop := loopChart()
	long, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	laneA := policies.WithLane(long, "compositions of namespace a")
	wg.Go(func() {
		_, err := p.Render(laneA, "runaway", loop, "", runaway, policies.RenderOptions{})
		assert.ErrorIs(t, err, policies.ErrDeadline)
	})
	require.Eventually(t, func() bool { return len(p.busyPIDs()) == 1 }, 5*time.Second, 10*time.Millisecond)
	quickA, cancelA := context.WithTimeout(policies.WithLane(context.Background(), "compositions of namespace a"), 100*time.Millisecond)
	defer cancelA()
	_, err := p.Render(quickA, "rendering chart fireworks-app", ch, "sha256:x", spec, policies.RenderOptions{})
	assert.ErrorIs(t, err, policies.ErrDeadline)
	assert.ErrorContains(t, err, "could not start before the deadline: the compositions of namespace a already hold 1 of the 2 sandbox workers, all they may")
	assert.ErrorIs(t, err, policies.ErrNotStarted, "it never ran: nothing is known of its cost")
	_, err = p.Render(policies.WithLane(context.Background(), "compositions of namespace b"), "rendering", ch, "sha256:x", spec, policies.RenderOptions{})
	require.NoError(t, err, "lane b is served while lane a's runaway runs")

	// Runaways of two lanes hold both workers; a third request cannot start before its
	// deadline.
	wg.Go(func() {
		_, err := p.Render(policies.WithLane(long, "compositions of namespace b"), "runaway", loop, "", runaway, policies.RenderOptions{})
		assert.ErrorIs(t, err, policies.ErrDeadline)
	})
	require.Eventually(t, func() bool { return len(p.busyPIDs()) == 2 }, 5*time.Second, 10*time.Millisecond)
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err = p.Render(short, "rendering chart fireworks-app", ch, "sha256:x", spec, policies.RenderOptions{})
	assert.ErrorIs(t, err, policies.ErrDeadline)
	assert.ErrorContains(t, err, "could not start before the deadline: all 2 sandbox workers are busy")
	assert.ErrorIs(t, err, policies.ErrNotStarted)
	wg.Wait()
	_, err = p.Render(context.Background(), "rendering", ch, "sha256:x", spec, policies.RenderOptions{})
	require.NoError(t, err)
}

// Garbage on the pipe from a worker is an error, never a panic nor a hang.
func TestGarbageFromAWorker(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 1))
	cases := [][]byte{
		nil,                         // no answer at all
		{0, 0, 0},                   // a cut length
		{0xff, 0xff, 0xff, 0xff},    // a length beyond the limit
		{0, 0, 0, 10, 1},            // a cut frame
		{0, 0, 0, 1, 9},             // an unknown status
		{0, 0, 0, 3, 0, 0xff, 0xff}, // a count beyond the frame
		{0, 0, 0, 2, 1, 5},          // an error cut short
	}
	for range 12 {
		n := rng.IntN(64)
		g := []byte{0, 0, 0, byte(n)}
		for range n {
			g = append(g, byte(rng.IntN(256)))
		}
		cases = append(cases, g)
	}
	for _, g := range cases {
		p := newPool(t, Options{Workers: 1, Env: []string{envFake + "=1", fmt.Sprintf("%s=%x", envFakeBytes, g)}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.Render(ctx, "rendering", loopChart(), "", nil, policies.RenderOptions{})
		cancel()
		if err == nil {
			continue // garbage that happens to be an answer
		}
		assert.NotErrorIs(t, err, policies.ErrDeadline, "%x", g)
		assert.Contains(t, err.Error(), "the sandbox worker failed", "%x", g)
		assert.Equal(t, 0, p.Stats().Live)
	}
}

// FuzzResponse: no bytes make the parent's reading of an answer panic.
func FuzzResponse(f *testing.F) {
	var e encoder
	require.NoError(f, e.response(opRender, &response{status: statusOK, objects: []policies.RenderedObject{{Template: "t", Object: map[string]any{"a": []any{int64(1), 2.5, "x", nil, true}}}}}))
	f.Add(e.b)
	e.b = nil
	require.NoError(f, e.response(opSchema, &response{status: statusOK, violations: []policies.Violation{{Path: "spec.a", Message: "m", Action: v1alpha1.EnforcementDeny}}}))
	f.Add(e.b)
	f.Add([]byte{statusError, 3, 'a', 'b', 'c', 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, op := range []byte{opRender, opSchema} {
			d := decoder{b: b}
			_, _ = d.response(op)
		}
		d := decoder{b: b}
		_, _ = d.request()
	})
}

// The policies package uses the sandbox once set: a rendered policy's runaway render is
// a denial at the deadline, and the worker is gone.
func TestPoliciesUseTheSandbox(t *testing.T) {
	p := newPool(t, Options{Workers: 2})
	ctx := context.Background()
	e, err := policies.NewEngine(ctx, policies.Options{Timeout: time.Second, DisabledBuiltins: policies.BuiltinIDs()})
	require.NoError(t, err)
	require.NoError(t, e.Set(ctx, policies.Policy{Name: "any", Target: v1alpha1.TargetRendered, Rego: `package any

deny contains {"msg": "no ConfigMaps"} if {
	some obj in input.rendered
	obj.kind == "ConfigMap"
}
`}))
	judge := policies.NewJudge(policies.JudgeOptions{Engine: e, Renderer: &policies.Renderer{Sandbox: p}})
	request := func(n int64) *policies.Request {
		return &policies.Request{
			Operation: "CREATE", Namespace: "team-a", Name: "x",
			Object: map[string]any{"apiVersion": "composition.krateo.io/v0-1-0", "kind": "Loop", "metadata": map[string]any{"name": "x", "namespace": "team-a"}, "spec": map[string]any{"n": n}},
			Chart:  loopChart(),
		}
	}
	d, err := judge.Decide(ctx, request(1e5))
	require.NoError(t, err)
	lines := policies.FormatLines(d.Violations)
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], "rendering chart loop was stopped at the deadline")
	assert.Equal(t, int64(1), p.Stats().Killed)

	d, err = judge.Decide(ctx, request(2))
	require.NoError(t, err)
	assert.Equal(t, []string{"ConfigMap/loop: no ConfigMaps [policy any]"}, policies.FormatLines(d.Violations))
}

// With SANDBOX_TEST_BINARY naming a built compositor, its workers answer as this
// binary's do: through `compositor sandbox-worker`, with and without EnvWorker.
func TestCompositorBinary(t *testing.T) {
	bin := os.Getenv("SANDBOX_TEST_BINARY")
	if bin == "" {
		t.Skip("SANDBOX_TEST_BINARY not set")
	}
	ch := loadChart(t, "1.1.5")
	opts := policies.RenderOptions{ReleaseName: "x", Namespace: "team-a"}
	want, err := policies.Render(ch, typicalSpec(t), opts)
	require.NoError(t, err)
	for _, env := range [][]string{nil, {EnvWorker + "=0"}} {
		p := newPool(t, Options{Command: []string{bin, Subcommand}, Env: env})
		got, err := p.Render(context.Background(), "rendering", ch, "", typicalSpec(t), opts)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
}

// The bound on rendered bytes applies in the worker as in-process, and its refusal
// still names the limit (errors.As finds the *policies.LimitError).
func TestRenderedBytesLimitInTheWorker(t *testing.T) {
	p := newPool(t, Options{Workers: 1})
	ch := loopChart()
	opts := policies.RenderOptions{ReleaseName: "x", Namespace: "a", MaxRenderedBytes: 20}
	_, want := policies.Render(ch, nil, opts)
	require.Error(t, want)
	_, got := p.Render(context.Background(), "rendering", ch, "", nil, opts)
	require.Error(t, got)
	assert.Equal(t, want.Error(), got.Error())
	assert.ErrorIs(t, got, policies.ErrRender)
	var limit *policies.LimitError
	require.ErrorAs(t, got, &limit)
	assert.Equal(t, policies.LimitRendered, limit.Reason)
	assert.Equal(t, 20, limit.Limit)
	assert.Equal(t, int64(0), p.Stats().Killed)
}

func TestWorkerRSS(t *testing.T) {
	bin := os.Getenv("SANDBOX_TEST_BINARY")
	if bin == "" || os.Getenv("SANDBOX_TEST_RSS") == "" {
		t.Skip("measurement only")
	}
	p := newPool(t, Options{Command: []string{bin, Subcommand}, Workers: 1})
	ch := loadChart(t, "1.1.5")
	for range 50 {
		_, err := p.Render(context.Background(), "r", ch, "sha256:x", typicalSpec(t), policies.RenderOptions{ReleaseName: "x", Namespace: "a"})
		require.NoError(t, err)
		_, err = p.ValidateValues(context.Background(), "s", ch, "sha256:x", typicalSpec(t))
		require.NoError(t, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.onlyPID(t)))
	require.NoError(t, err)
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmRSS") || strings.HasPrefix(l, "Rss") || strings.HasPrefix(l, "VmData") {
			t.Log(l)
		}
	}
}

// A worker keeps maxCharts charts; one it let go is asked for and sent again.
func TestChartsCrossOncePerWorker(t *testing.T) {
	p := newPool(t, Options{Workers: 1})
	opts := policies.RenderOptions{ReleaseName: "x", Namespace: "a"}
	for i := range maxCharts + 8 {
		_, err := p.Render(context.Background(), "r", loopChart(), fmt.Sprint("sha256:", i), map[string]any{"n": int64(2)}, opts)
		require.NoError(t, err)
	}
	for _, i := range []int{0, maxCharts + 7, 1} { // let go, kept, let go
		objs, err := p.Render(context.Background(), "r", loopChart(), fmt.Sprint("sha256:", i), map[string]any{"n": int64(2)}, opts)
		require.NoError(t, err)
		assert.Len(t, objs, 1)
	}
	assert.Equal(t, Stats{Started: 1, Live: 1, Idle: 1}, p.Stats())
	p.mu.Lock()
	defer p.mu.Unlock()
	assert.Equal(t, maxCharts+8+2, p.idle[0].chartsSent, "each chart once, and the two let go once more")
}

// Small values are checked against the chart's schema in-process, with no worker:
// what a tenant chooses there cannot run long. Bigger ones go to a worker.
func TestSmallValuesAreCheckedInProcess(t *testing.T) {
	p := newPool(t, Options{Workers: 2})
	ctx := context.Background()
	judge := policies.NewJudge(policies.JudgeOptions{Renderer: &policies.Renderer{Sandbox: p}})
	request := func(spec map[string]any) *policies.Request {
		return &policies.Request{
			Operation: "CREATE", Namespace: "team-a", Name: "x",
			Object: map[string]any{"apiVersion": "composition.krateo.io/v1-1-5", "kind": "FireworksApp", "metadata": map[string]any{"name": "x", "namespace": "team-a"}, "spec": spec},
			Chart:  loadChart(t, "1.1.5"), ChartDigest: "sha256:small",
		}
	}
	d, err := judge.Decide(ctx, request(map[string]any{"replicaCount": "two"}))
	require.NoError(t, err)
	require.Len(t, d.Violations, 1, "the schema is checked")
	assert.Zero(t, p.Stats().Started, "small values need no worker")

	annotations := map[string]any{}
	for i := range 2000 {
		annotations[fmt.Sprint("a", i)] = "b"
	}
	d, err = judge.Decide(ctx, request(map[string]any{"replicaCount": "two", "podAnnotations": annotations}))
	require.NoError(t, err)
	require.NotEmpty(t, d.Violations)
	assert.Equal(t, int64(1), p.Stats().Started, "bigger values are checked in a worker")

	// Small values against a schema that is not cheap (a $ref cycle through anyOf,
	// exponential in the values' depth) go to a worker too.
	recursive := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "recursive", Version: "0.1.0"},
		Schema: []byte(`{"$defs": {"n": {"anyOf": [
			{"properties": {"a": {"$ref": "#/$defs/n"}}},
			{"properties": {"a": {"$ref": "#/$defs/n"}}, "required": ["a"]}]}},
			"$ref": "#/$defs/n"}`),
	}
	fresh := newPool(t, Options{Workers: 2})
	judge = policies.NewJudge(policies.JudgeOptions{Renderer: &policies.Renderer{Sandbox: fresh}})
	r := request(map[string]any{"a": map[string]any{"a": "x"}})
	r.Chart, r.ChartDigest = recursive, "sha256:recursive"
	_, err = judge.Decide(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, int64(1), fresh.Stats().Started, "a schema that is not cheap is checked in a worker")
}
