package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
	"github.com/compositor-dev/compositor/policies/sandbox"
	"github.com/compositor-dev/compositor/webhooks"
)

// -constraints DIR (make bench-constraints, issue #31) measures what a library of
// Gatekeeper ConstraintTemplates and Constraints costs composition admission. In one
// `compositor dev` it measures composition create and update /validate with the five
// CompositionPolicies of -policies alone, then applies the library with the API, waits
// until the engine enforces all of it, and measures the same again, each run beside the
// floor webhook, with the load generator and durations of make bench. The peer run
// (test/tools/gatekeeper -constraints) times the engine against Gatekeeper's on the
// same library; -peer hands its JSON to the report.

// The constraints section of BENCHMARKS.md lives between these markers: `make
// bench-constraints` replaces only what is between them, and `make bench` carries them.
const (
	constraintsBegin = "<!-- bench-constraints -->"
	constraintsEnd   = "<!-- /bench-constraints -->"
)

// constraintsTarget is issue #31's bound: with the library, the /validate figures stay
// within this factor of the five-policy ones (p50 and p99 at most, throughput at least
// its inverse).
const constraintsTarget = 2.0

// constraintsMeasure is one workload at one concurrency in one phase.
type constraintsMeasure struct {
	Floor      result `json:"floor"`
	Compositor result `json:"compositor"`
	// WorkerCPUSeconds is the CPU time of Compositor's sandbox workers, which render
	// charts for it, over the same run; Compositor's own process does not count it.
	WorkerCPUSeconds float64 `json:"workerCpuSeconds"`
	// OtherCores and FloorOtherCores are the cores the rest of the machine used during
	// Compositor's run and the floor's: the control plane, idle here, and whatever else
	// runs on the machine.
	OtherCores      float64 `json:"otherCores"`
	FloorOtherCores float64 `json:"floorOtherCores"`
	// Renders are the charts Compositor rendered for admission over the same run
	// (compositor_chart_renders_total{purpose="admission"}, read from its /metrics).
	Renders float64 `json:"renders"`
}

// rendersPerRequest is how many charts Compositor rendered for each request.
func (m constraintsMeasure) rendersPerRequest() float64 {
	if m.Compositor.Requests == 0 {
		return 0
	}
	return m.Renders / float64(m.Compositor.Requests)
}

// cpuPerRequest is Compositor's CPU per request, its sandbox workers' included, in ms.
func (m constraintsMeasure) cpuPerRequest() float64 {
	if m.Compositor.Requests == 0 {
		return 0
	}
	return (m.Compositor.CPUSeconds + m.WorkerCPUSeconds) * 1000 / float64(m.Compositor.Requests)
}

// constraintsRow is a workload at a concurrency, before and after the library, and
// with the rendered rewrites of the five policies when they were measured.
type constraintsRow struct {
	Workload    string              `json:"workload"`
	Concurrency int                 `json:"concurrency"`
	Before      constraintsMeasure  `json:"before"`
	Rendered    *constraintsMeasure `json:"rendered,omitempty"`
	After       constraintsMeasure  `json:"after"`
}

// constraintsRun is everything one -constraints run measured.
type constraintsRun struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  machine   `json:"machine"`
	Dir      string    `json:"dir"`
	// The library: templates, how many are Rego v1 and how many have libs, and its
	// constraints by the kinds they match ("*" for any kind, "any kind of <group>").
	Templates   int            `json:"templates"`
	Constraints int            `json:"constraints"`
	RegoV1      int            `json:"regoV1"`
	WithLibs    int            `json:"withLibs"`
	Kinds       map[string]int `json:"kinds"`
	// Subjects are the objects one composition review judges (the composition, what
	// its chart renders, the Pods its workloads imply), Evaluations the (object,
	// constraint) pairs whose match selects the object.
	Subjects    int `json:"subjects"`
	Evaluations int `json:"evaluations"`
	// Probed are the constraints the denial probe breaks, as the engine decides
	// in-process; the library is taken to be in force once the webhook names them all.
	Probed []string `json:"probed"`
	// TemplatesSeconds is from the first template's create until every template said
	// status.created; EnforcedSeconds until the probe was refused by every probed
	// constraint.
	TemplatesSeconds float64          `json:"templatesSeconds"`
	EnforcedSeconds  float64          `json:"enforcedSeconds"`
	WarmupSeconds    float64          `json:"warmupSeconds"`
	DurationSeconds  float64          `json:"durationSeconds"`
	Rows             []constraintsRow `json:"rows"`
	// RenderedDir holds the five policies rewritten with target rendered; empty when
	// that phase was not measured.
	RenderedDir string           `json:"renderedDir,omitempty"`
	Peer        *constraintsPeer `json:"peer,omitempty"`

	profileDir string
	compositor string
}

// constraintsPeer is what test/tools/gatekeeper -constraints reports.
type constraintsPeer struct {
	Compositor            engineFigures `json:"compositor"`
	CompositorPrerendered engineFigures `json:"compositor_prerendered"`
	Gatekeeper            engineFigures `json:"gatekeeper"`
	Ratio                 float64       `json:"ratio"`
	PrerenderedRatio      float64       `json:"prerendered_ratio"`
	Rounds                int           `json:"rounds"`
	DurationSeconds       float64       `json:"duration_seconds"`
	FrameworksVersion     string        `json:"frameworks_version"`
	GatekeeperVersion     string        `json:"gatekeeper_version"`
	OPAVersion            string        `json:"opa_version"`
	Policies              int           `json:"policies"`
	Templates             int           `json:"templates"`
	Constraints           int           `json:"constraints"`
	Requests              int           `json:"requests"`
	Expanded              int           `json:"expanded"`
	DeniedFindings        int           `json:"denied_findings"`
}

// With -profile-dir, Compositor's process is profiled under composition create
// /validate, before and after (constraintsProfile); the peer run may leave a profile of
// the engine alone beside them (its -cpuprofile, named constraintsProfileEngine).
const constraintsProfileEngine = "constraints-engine.pprof"

// constraintsProfile is the file of the CPU profile of workload at concurrency c in phase.
func constraintsProfile(phase, workload string, c int) string {
	return "constraints-" + phase + "-" + profileName(workload, c)
}

// runConstraints runs the -constraints mode and writes its section.
func runConstraints(ctx context.Context, o options) error {
	lib, err := loadConstraintLibrary(ctx, o.constraintDir)
	if err != nil {
		return err
	}
	local, err := newLocalEngine(ctx, o.policyDir, lib)
	if err != nil {
		return err
	}
	spec, err := admittedSpec()
	if err != nil {
		return err
	}
	run := &constraintsRun{Started: time.Now(), Dir: o.constraintDir, RenderedDir: o.renderedDir, WarmupSeconds: o.warmup.Seconds(),
		DurationSeconds: o.duration.Seconds(), profileDir: o.profileDir, compositor: o.compositor}
	if err := run.describeLibrary(lib, local.chart, spec); err != nil {
		return err
	}
	probe := constraintDenials(benchNamespace, 1, spec)[0]
	if run.Probed, err = local.deniedBy(ctx, probe.body); err != nil {
		return err
	}
	if len(run.Probed) == 0 {
		return errors.New("the denial probe breaks no constraint")
	}
	rep := &report{}
	if err := rep.describeMachine(o.compositor, o.controlPlaneDir); err != nil {
		return err
	}
	run.Machine = rep.Machine

	dir, err := os.MkdirTemp("", "compositor-bench-constraints-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	fl, err := startFloor(ctx, dir)
	if err != nil {
		return err
	}
	defer fl.stop()
	logf("starting compositor dev")
	d, err := startDev(ctx, o.compositor, o.controlPlaneDir, dir)
	if err != nil {
		return err
	}
	defer d.stop()
	if err := run.measure(ctx, o, fl, d, lib, probe); err != nil {
		return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
	}
	if o.peerJSON != "" {
		b, err := os.ReadFile(o.peerJSON)
		if err != nil {
			return fmt.Errorf("reading the peer run: %w", err)
		}
		run.Peer = &constraintsPeer{}
		if err := json.Unmarshal(b, run.Peer); err != nil {
			return fmt.Errorf("reading the peer run %s: %w", o.peerJSON, err)
		}
	}
	run.Finished = time.Now()
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(run, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	return run.write(o.out)
}

// write prints the run's section and puts it into out, when given.
func (run *constraintsRun) write(out string) error {
	section := run.markdown()
	fmt.Print(section)
	if out == "" {
		return nil
	}
	old, err := os.ReadFile(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(out, []byte(replaceConstraintsSection(string(old), section)), 0o644)
}

// rerenderConstraints writes the section of a -constraints run again from its -json
// output, with the profiles of o.profileDir and the notes of its library as they are
// now, without measuring.
func rerenderConstraints(path string, o options) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	run := &constraintsRun{}
	if err := json.Unmarshal(b, run); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	run.profileDir, run.compositor = o.profileDir, run.Machine.Compositor
	return run.write(o.out)
}

// writeWorkload names one write as the API server sends it: /mutate, then /validate.
const writeWorkload = "composition create /mutate then /validate"

// unrememberedUpdates names the updates whose old version Compositor must render again.
const unrememberedUpdates = "composition update /validate, old version not remembered"

// measure sets up the five policies, measures, applies the library, measures again.
func (run *constraintsRun) measure(ctx context.Context, o options, fl *floor, d *dev, lib *constraintLibrary, probe call) error {
	w, err := setUp(ctx, d, o.policyDir)
	if err != nil {
		return err
	}
	var workloads []workload
	for _, wl := range admissionWorkloads(w, d.chartsURL) {
		if wl.name == "composition create /validate" || wl.name == "composition update /validate" || wl.name == writeWorkload {
			workloads = append(workloads, wl)
		}
	}
	workloads = append(workloads, workload{unrememberedUpdates, compositionUpdatesUnremembered(benchNamespace, 200, w.spec), []int{1, 16}})
	before, err := measureConstraintsPhase(ctx, o, fl, d, workloads, "before")
	if err != nil {
		return err
	}
	var rendered []constraintsMeasure
	if run.RenderedDir != "" {
		if rendered, err = run.measureRendered(ctx, o, fl, d, workloads, probe, w.spec); err != nil {
			return err
		}
	}
	if err := run.apply(ctx, d, lib, probe, compositionCreates(benchNamespace, 1, w.spec)[0]); err != nil {
		return err
	}
	after, err := measureConstraintsPhase(ctx, o, fl, d, workloads, "after")
	if err != nil {
		return err
	}
	for i := range before {
		row := constraintsRow{Workload: before[i].Compositor.Workload, Concurrency: before[i].Compositor.Concurrency,
			Before: before[i], After: after[i]}
		if rendered != nil {
			row.Rendered = &rendered[i]
		}
		run.Rows = append(run.Rows, row)
	}
	return nil
}

// measureRendered adds the rendered rewrites of the five policies, waits until they
// are in force, measures, and deletes them again, waiting until they no longer judge.
func (run *constraintsRun) measureRendered(ctx context.Context, o options, fl *floor, d *dev, workloads []workload, probe call, spec map[string]any) ([]constraintsMeasure, error) {
	objects, err := d.applyPolicies(ctx, run.RenderedDir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, obj := range objects {
		names = append(names, obj["metadata"].(map[string]any)["name"].(string))
	}
	// In force once the probe is refused by the rewrites that deny it and a composition
	// the load sends is admitted.
	deny := probe
	deny.check = expectPolicies(names, "rendered-allowed-registries", "rendered-max-replicas", "rendered-no-latest")
	if err := sendUntil(ctx, d.endpoint, "the rendered policies are not in force", deny, compositionCreates(benchNamespace, 1, spec)[0]); err != nil {
		return nil, err
	}
	measured, err := measureConstraintsPhase(ctx, o, fl, d, workloads, "rendered")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if err := d.client.Delete(ctx, &v1alpha1.CompositionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			return nil, fmt.Errorf("deleting CompositionPolicy %s: %w", name, err)
		}
	}
	gone := probe
	gone.check = expectPolicies(names)
	if err := sendUntil(ctx, d.endpoint, "the rendered policies still judge", gone); err != nil {
		return nil, err
	}
	return measured, nil
}

// expectPolicies checks that the answer is a refusal naming, of the policies among,
// exactly those of want.
func expectPolicies(among []string, want ...string) func([]byte) error {
	return func(body []byte) error {
		if err := expectAdmission(false)(body); err != nil {
			return err
		}
		msg := refusalMessage(body)
		for _, name := range among {
			named := strings.Contains(msg, "[policy "+name+"]")
			if wanted := slices.Contains(want, name); named != wanted {
				return fmt.Errorf("policy %s named: %v, want %v", name, named, wanted)
			}
		}
		return nil
	}
}

// refusalMessage is the status message of an AdmissionReview answer.
func refusalMessage(body []byte) string {
	var review struct {
		Response struct {
			Status struct {
				Message string `json:"message"`
			} `json:"status"`
		} `json:"response"`
	}
	_ = json.Unmarshal(body, &review)
	return review.Response.Status.Message
}

// sendUntil sends calls, in order, until every answer passes its check, for at most
// applyWait; the error says what and why when they never do.
func sendUntil(ctx context.Context, e *endpoint, what string, calls ...call) error {
	deadline := time.Now().Add(applyWait)
	for {
		var err error
		for _, c := range calls {
			if err = send(ctx, e, c); err != nil {
				break
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s after %s: %w", what, applyWait, err)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// measureConstraintsPhase runs each workload at each concurrency against the floor,
// then against Compositor, profiling Compositor under creates.
func measureConstraintsPhase(ctx context.Context, o options, fl *floor, d *dev, workloads []workload, phase string) ([]constraintsMeasure, error) {
	var out []constraintsMeasure
	for _, wl := range workloads {
		for _, c := range wl.concurrency {
			logf("%s: %s at concurrency %d", phase, wl.name, c)
			var m constraintsMeasure
			var err error
			var floorRun, compositorRun sampled
			if m.Floor, floorRun, err = measureRun(ctx, fl.endpoint, wl.name, floorCalls(wl.calls), c, o.warmup, o.duration, samplers{}); err != nil {
				return nil, err
			}
			var profile chan error
			if o.profileDir != "" && wl.name == "composition create /validate" {
				profile = make(chan error, 1)
				path := filepath.Join(o.profileDir, constraintsProfile(phase, wl.name, c))
				go func() {
					profile <- saveProfile(ctx, d.pprof, o.warmup+time.Second, o.duration-time.Second, path)
				}()
			}
			of := samplers{
				workers: func() (float64, error) { return sandboxWorkersCPU(d.cmd.Process.Pid) },
				renders: func() (float64, error) { return d.renders(ctx, policies.PurposeAdmission) },
			}
			if m.Compositor, compositorRun, err = measureRun(ctx, d.endpoint, wl.name, wl.calls, c, o.warmup, o.duration, of); err != nil {
				return nil, err
			}
			m.FloorOtherCores = floorRun.otherCores
			m.WorkerCPUSeconds, m.OtherCores, m.Renders = compositorRun.workerCPU, compositorRun.otherCores, compositorRun.renders
			if profile != nil {
				if err := <-profile; err != nil {
					return nil, err
				}
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// cpuSample is what measureRun reads besides the server's CPU time, at the same
// instants: the CPU time of the server's sandbox workers, of this process (the load
// generator) and of the whole machine (busy), in seconds, and the server's renders.
type cpuSample struct {
	workers, harness, busy, renders float64
}

// samplers read, for measureRun, the CPU time of the server's sandbox workers and the
// charts it rendered so far; nil ones count nothing.
type samplers struct {
	workers, renders func() (float64, error)
}

// sampled is what measureRun tells besides the result: the workers' CPU time over
// the run, the cores every other process used meanwhile (the machine's busy time less
// the server's, its workers' and this process's), and the renders made.
type sampled struct {
	workerCPU, otherCores, renders float64
}

// measureRun is drive, with a cpuSample read at the same instants as the server's CPU
// time, the warm-up left out.
func measureRun(ctx context.Context, e *endpoint, workload string, calls []call, concurrency int, warmup, d time.Duration, of samplers) (result, sampled, error) {
	sample := func() (cpuSample, error) {
		var s cpuSample
		var err error
		if of.workers != nil {
			if s.workers, err = of.workers(); err != nil {
				return s, err
			}
		}
		if of.renders != nil {
			if s.renders, err = of.renders(); err != nil {
				return s, err
			}
		}
		if s.harness, err = cpuSeconds(os.Getpid()); err != nil {
			return s, err
		}
		fs, err := procfs.NewDefaultFS()
		if err != nil {
			return s, err
		}
		st, err := fs.Stat()
		if err != nil {
			return s, err
		}
		t := st.CPUTotal
		s.busy = t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ + t.Steal
		return s, nil
	}
	if _, err := run(ctx, e, calls, concurrency, warmup); err != nil {
		return result{}, sampled{}, err
	}
	before, err := cpuSeconds(e.pid)
	if err != nil {
		return result{}, sampled{}, err
	}
	sampleBefore, err := sample()
	if err != nil {
		return result{}, sampled{}, err
	}
	start := time.Now()
	stats, err := run(ctx, e, calls, concurrency, d)
	if err != nil {
		return result{}, sampled{}, err
	}
	elapsed := time.Since(start)
	after, err := cpuSeconds(e.pid)
	if err != nil {
		return result{}, sampled{}, err
	}
	sampleAfter, err := sample()
	if err != nil {
		return result{}, sampled{}, err
	}
	r := result{
		Server: e.name, Workload: workload, Concurrency: concurrency,
		Requests: len(stats.latencies), Errors: stats.errors, FirstError: stats.firstError,
		Seconds: elapsed.Seconds(), CPUSeconds: after - before,
	}
	slices.Sort(stats.latencies)
	r.P50 = millis(percentile(stats.latencies, 0.50))
	r.P95 = millis(percentile(stats.latencies, 0.95))
	r.P99 = millis(percentile(stats.latencies, 0.99))
	r.Max = millis(stats.latencies[len(stats.latencies)-1])
	r.Throughput = float64(len(stats.latencies)) / elapsed.Seconds()
	workerCPU := sampleAfter.workers - sampleBefore.workers
	others := (sampleAfter.busy - sampleBefore.busy) - r.CPUSeconds - workerCPU - (sampleAfter.harness - sampleBefore.harness)
	return r, sampled{workerCPU: workerCPU, otherCores: max(0, others/elapsed.Seconds()), renders: sampleAfter.renders - sampleBefore.renders}, nil
}

// sandboxWorkersCPU is the CPU time used so far by the sandbox workers of process pid:
// those alive (its children running `compositor sandbox-worker`), those killed and not
// yet reaped (its zombie children, whose command line is gone), and those it has
// reaped, whose time the kernel adds to its children's (pid's other children, the
// control plane, live until the end). A request cancelled mid-render kills its
// worker: every run's end does, as the load generator drops its requests in flight.
func sandboxWorkersCPU(pid int) (float64, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, p := range procs {
		stat, err := p.Stat()
		if err != nil {
			continue
		}
		if p.PID == pid {
			total += float64(stat.CUTime+stat.CSTime) / userHZ
			continue
		}
		if stat.PPID != pid {
			continue
		}
		if args, err := p.CmdLine(); stat.State == "Z" || err == nil && slices.Contains(args, sandbox.Subcommand) {
			total += stat.CPUTime()
		}
	}
	return total, nil
}

// userHZ is the unit of /proc's CPU times, as procfs reads them.
const userHZ = 100

var (
	templatesGVR = schema.GroupVersionResource{Group: gatekeeper.TemplatesGroup, Version: "v1", Resource: "constrainttemplates"}
	// applyWait bounds each wait of the apply: for the CRDs to be served, for the
	// templates' status, for the probe.
	applyWait = 2 * time.Minute
)

// apply creates the library's templates, waits until each says status.created, creates
// the constraints (those the probe breaks last), and waits until the webhook refuses
// the probe naming every probed constraint and still admits admitted; then for one
// resync of Compositor's constraint controller.
func (run *constraintsRun) apply(ctx context.Context, d *dev, lib *constraintLibrary, probe, admitted call) error {
	logf("applying %d ConstraintTemplates and %d constraints", len(lib.Templates), len(lib.Constraints))
	dyn, err := dynamic.NewForConfig(d.cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	for _, obj := range lib.Templates {
		if err := createWhenServed(ctx, dyn.Resource(templatesGVR), obj); err != nil {
			return err
		}
	}
	if err := waitTemplatesCreated(ctx, dyn, len(lib.Templates)); err != nil {
		return err
	}
	run.TemplatesSeconds = time.Since(start).Seconds()
	constraints := slices.Clone(lib.Constraints)
	probed := func(obj map[string]any) bool {
		u := unstructured.Unstructured{Object: obj}
		return slices.Contains(run.Probed, u.GetKind()+"/"+u.GetName())
	}
	slices.SortStableFunc(constraints, func(a, b map[string]any) int {
		switch {
		case probed(a) == probed(b):
			return 0
		case probed(a):
			return 1
		default:
			return -1
		}
	})
	for _, obj := range constraints {
		u := unstructured.Unstructured{Object: obj}
		gvr := schema.GroupVersionResource{Group: gatekeeper.ConstraintsGroup, Version: "v1beta1", Resource: strings.ToLower(u.GetKind())}
		if err := createWhenServed(ctx, dyn.Resource(gvr), obj); err != nil {
			return err
		}
	}
	probe.check = expectDeniedBy(run.Probed)
	if err := sendUntil(ctx, d.endpoint, "the constraints are not in force", probe, admitted); err != nil {
		return err
	}
	run.EnforcedSeconds = time.Since(start).Seconds()
	logf("the library is in force after %.1f s", run.EnforcedSeconds)
	// The controller rebuilds the library on every change and every 5 s besides: one
	// more period covers a kind whose constraints arrived after the probed ones.
	if !sleepCtx(ctx, 6*time.Second) {
		return ctx.Err()
	}
	return nil
}

// createWhenServed creates obj, retrying while its resource is not served yet (the
// ConstraintTemplate CRD at start, a constraint CRD until Compositor has made it).
func createWhenServed(ctx context.Context, client dynamic.NamespaceableResourceInterface, obj map[string]any) error {
	u := &unstructured.Unstructured{Object: obj}
	deadline := time.Now().Add(applyWait)
	for {
		_, err := client.Create(ctx, u.DeepCopy(), metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// waitTemplatesCreated waits until n ConstraintTemplates say status.created: true, and
// fails at once when one says it cannot be enforced.
func waitTemplatesCreated(ctx context.Context, dyn dynamic.Interface, n int) error {
	deadline := time.Now().Add(applyWait)
	for {
		list, err := dyn.Resource(templatesGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		created := 0
		for _, t := range list.Items {
			ok, found, _ := unstructured.NestedBool(t.Object, "status", "created")
			if ok {
				created++
				continue
			}
			if found {
				byPod, _, _ := unstructured.NestedSlice(t.Object, "status", "byPod")
				return fmt.Errorf("ConstraintTemplate %s is not enforced: %v", t.GetName(), byPod)
			}
		}
		if created >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d ConstraintTemplates created after %s", created, n, applyWait)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// expectDeniedBy checks that the answer refuses the request naming each constraint.
func expectDeniedBy(ids []string) func([]byte) error {
	return func(body []byte) error {
		if err := expectAdmission(false)(body); err != nil {
			return err
		}
		msg := refusalMessage(body)
		var missing []string
		for _, id := range ids {
			if !strings.Contains(msg, "[constraint "+id+"]") {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("refused, but not yet by %s", strings.Join(missing, ", "))
		}
		return nil
	}
}

// constraintDenials are n creates whose values break every constraint that values
// can break, within the chart's schema (so that the chart renders): an unapproved
// registry, tag latest, pullPolicy Never, 9 replicas, a LoadBalancer on port 22, 500Gi
// of storage, a 4Gi cache, a team label out of form and a pause annotation neither true
// nor false.
func constraintDenials(namespace string, n int, spec map[string]any) []call {
	return compositionCalls(n, webhooks.ValidatePath, false, func(i int) (map[string]any, map[string]any) {
		obj := composition(namespace, i, spec)
		s := obj["spec"].(map[string]any)
		s["replicaCount"] = int64(9)
		s["image"] = map[string]any{"repository": "quay.io/acme/nginx", "tag": "latest", "pullPolicy": "Never"}
		s["service"] = map[string]any{"type": "LoadBalancer", "port": int64(22)}
		s["storage"] = map[string]any{"size": "500Gi"}
		s["cache"] = map[string]any{"enabled": true, "maxMemory": "4Gi"}
		md := obj["metadata"].(map[string]any)
		md["labels"].(map[string]any)["team"] = "Payments"
		md["annotations"].(map[string]any)[vocab.AnnotationPaused] = "yes"
		return obj, nil
	})
}

// deniedBy are the constraints that deny the AdmissionReview body, sorted.
func (l *localEngine) deniedBy(ctx context.Context, body []byte) ([]string, error) {
	d, err := l.check(ctx, body)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range d.Violations {
		if strings.HasPrefix(v.Source, "constraint ") && v.Action == v1alpha1.EnforcementDeny {
			out = append(out, v.Policy)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// describeLibrary counts what the library holds and what one composition review
// evaluates: the composition, the objects its chart renders and the Pods they imply,
// each against the constraints whose match selects it.
func (run *constraintsRun) describeLibrary(lib *constraintLibrary, ch *chart.Chart, spec map[string]any) error {
	run.Templates, run.Constraints = len(lib.Templates), len(lib.Constraints)
	for _, t := range lib.Templates {
		targets, _, _ := unstructured.NestedSlice(t, "spec", "targets")
		v1, libs := false, false
		for _, tg := range targets {
			m, _ := tg.(map[string]any)
			if l, _, _ := unstructured.NestedSlice(m, "libs"); len(l) > 0 {
				libs = true
			}
			code, _, _ := unstructured.NestedSlice(m, "code")
			for _, c := range code {
				cm, _ := c.(map[string]any)
				if v, _, _ := unstructured.NestedString(cm, "source", "version"); v == "v1" {
					v1 = true
				}
				if l, _, _ := unstructured.NestedSlice(cm, "source", "libs"); len(l) > 0 {
					libs = true
				}
			}
		}
		if v1 {
			run.RegoV1++
		}
		if libs {
			run.WithLibs++
		}
	}
	run.Kinds = map[string]int{}
	for _, c := range lib.Library.Constraints() {
		seen := map[string]bool{}
		for _, k := range c.Match.Kinds {
			for _, kind := range k.Kinds {
				if kind == "*" && len(k.APIGroups) > 0 && !slices.Contains(k.APIGroups, "*") {
					kind = "any kind of " + strings.Join(k.APIGroups, ", ")
				}
				seen[kind] = true
			}
		}
		for kind := range seen {
			run.Kinds[kind]++
		}
	}
	obj := composition(benchNamespace, 0, spec)
	rendered, err := policies.Render(ch, spec, policies.RenderOptions{ReleaseName: nameOf(obj), Namespace: benchNamespace})
	if err != nil {
		return err
	}
	nsObject := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": benchNamespace,
		"labels": map[string]any{"team": "a", "kubernetes.io/metadata.name": benchNamespace}}}
	subjects := []*gatekeeper.Subject{{Object: obj, Group: compositionGroup, Version: compositionVersion, Kind: compositionKind,
		Namespace: benchNamespace, NamespaceObject: nsObject}}
	for _, o := range rendered {
		s := gatekeeper.SubjectOf(o.Object)
		s.Namespace, s.NamespaceObject = benchNamespace, nsObject
		subjects = append(subjects, s)
		if pod := gatekeeper.Expand(s); pod != nil {
			subjects = append(subjects, pod)
		}
	}
	run.Subjects = len(subjects)
	for _, s := range subjects {
		run.Evaluations += len(lib.Library.Matching(s))
	}
	return nil
}

// replaceConstraintsSection puts section in place of the constraints section of old (replaceSection).
func replaceConstraintsSection(old, section string) string {
	return replaceSection(old, section, constraintsBegin, constraintsEnd)
}

// carryConstraintsSection puts the constraints section of old into fresh (carrySection).
func carryConstraintsSection(old, fresh string) string {
	return carrySection(old, fresh, constraintsBegin, constraintsEnd)
}
