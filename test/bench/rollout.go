package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// The rollout plan (issue #30), live: `compositor dev` with a definition of
// fireworks-app 1.1.5 that needs every plan approved and N paused compositions of it;
// the definition moves to 2.0.0 while composition writes go through the API server,
// and the time from that apply to status.rollout.plan naming all N is measured, with
// the writes' admission latency before and while the plan is computed. Paused
// compositions install no Helm release, so the N objects cost only what the plan
// needs: the objects themselves.

// The rollout section of BENCHMARKS.md lives between these markers: `make
// bench-rollout` replaces only what is between them, and `make bench` carries them.
const (
	rolloutBegin = "<!-- bench-rollout -->"
	rolloutEnd   = "<!-- /bench-rollout -->"
)

const (
	rolloutDefinitionNamespace = "rollout"
	rolloutDefinition          = "fireworksapp"
	rolloutFrom                = "1.1.5"
	rolloutTo                  = "2.0.0"
	// rolloutTarget is issue #30's: a plan of 1,000 compositions in under 10 s.
	rolloutTarget      = 10 * time.Second
	rolloutTargetScale = 1000
)

// rolloutOptions are the knobs of -rollout.
type rolloutOptions struct {
	compositions  int
	namespaces    int
	concurrency   int
	rate          float64
	baseline      time.Duration
	after         time.Duration
	wait          time.Duration
	poll          time.Duration
	reconcileRate int
	devArgs       []string
}

// rolloutRun is everything one -rollout run measured.
type rolloutRun struct {
	Started      time.Time `json:"started"`
	Finished     time.Time `json:"finished"`
	Machine      machine   `json:"machine"`
	DevArgs      []string  `json:"devArgs"`
	Compositions int       `json:"compositions"`
	Namespaces   int       `json:"namespaces"`
	Concurrency  int       `json:"concurrency"`
	// Rate is the writes per second the load schedules, 0 for each client writing
	// again as soon as it has its answer.
	Rate        float64 `json:"rate"`
	PollSeconds float64 `json:"pollSeconds"`
	// CreateSeconds is how long the N creates took (eight at a time, through the API
	// server and both webhooks); SettleSeconds how long after them until every one was
	// listed and marked Paused by its controller.
	CreateSeconds float64 `json:"createSeconds"`
	SettleSeconds float64 `json:"settleSeconds"`
	// Before the move: compositions listed pinned to the old version, how many of them
	// carry the pause annotation and the condition Ready=False reason Paused, and the
	// Helm release Secrets in their namespaces.
	Listed          int `json:"listed"`
	PausedAnnotated int `json:"pausedAnnotated"`
	PausedCondition int `json:"pausedCondition"`
	HelmReleases    int `json:"helmReleases"`
	// From the apply of the new version: status.rollout written (the new version
	// served, the old one retained; the plan is computed next, in the same
	// reconciliation), and status.rollout.plan with a hash and toMove = N. Read by
	// polling the definition every PollSeconds; -1 when not seen in time.
	RolloutSeconds float64 `json:"rolloutSeconds"`
	PlanSeconds    float64 `json:"planSeconds"`
	PlanTimedOut   bool    `json:"planTimedOut"`
	// The definition's status.rollout once the plan was seen.
	Phase    string                   `json:"phase"`
	Message  string                   `json:"message"`
	Plan     corev1alpha1.PlanSummary `json:"plan"`
	Baseline rolloutWindow            `json:"baseline"`
	Setup    rolloutWindow            `json:"setup"`
	Planning rolloutWindow            `json:"planning"`
	After    rolloutWindow            `json:"after"`
	// Lists are the API server's LISTs of the compositions' resource from the apply
	// to the plan (the definition reconciler reads the compositions to plan with one),
	// by response code, and the seconds it took to answer them; nil when its metrics
	// could not be read.
	Lists *compositionLists `json:"lists,omitempty"`
	Notes []string          `json:"notes,omitempty"`
}

// rolloutWindow is the admission of the writes started in one stretch of time, and
// what Compositor's process and the machine did meanwhile.
type rolloutWindow struct {
	result
	// CompositorCores is Compositor's CPU time over the window's wall time,
	// ControlPlaneCores that of kube-apiserver and etcd (its children), HarnessCores
	// this harness's, OtherCores every other process's (the machine's busy time less
	// those three); MachineBusy the share of every core's time not idle. -1 when not
	// read.
	CompositorCores   float64 `json:"compositorCores"`
	ControlPlaneCores float64 `json:"controlPlaneCores"`
	HarnessCores      float64 `json:"harnessCores"`
	OtherCores        float64 `json:"otherCores"`
	MachineBusy       float64 `json:"machineBusy"`
}

// mark is one instant of the run, with the CPU figures read then.
type mark struct {
	at           time.Time
	compositor   float64 // Compositor's CPU seconds
	controlPlane float64 // kube-apiserver's and etcd's CPU seconds
	harness      float64 // this process's CPU seconds
	busy, all    float64 // the machine's busy and total CPU seconds
}

// marker reads marks of dev: Compositor's process and the others of its process
// group, the control plane it started.
type marker struct {
	d      *dev
	others []int
}

func newMarker(d *dev) *marker {
	m := &marker{d: d}
	procs, err := procfs.AllProcs()
	if err != nil {
		return m
	}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && p.PID != d.pid && (st.PGRP == d.pid || st.PPID == d.pid) {
			m.others = append(m.others, p.PID)
		}
	}
	return m
}

func (k *marker) mark() mark {
	m := mark{at: time.Now(), compositor: -1, controlPlane: -1, harness: -1, busy: -1}
	if c, err := cpuSeconds(k.d.pid); err == nil {
		m.compositor = c
	}
	if c, err := cpuSeconds(os.Getpid()); err == nil {
		m.harness = c
	}
	if len(k.others) > 0 {
		m.controlPlane = 0
		for _, pid := range k.others {
			c, err := cpuSeconds(pid)
			if err != nil {
				m.controlPlane = -1
				break
			}
			m.controlPlane += c
		}
	}
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if st, err := fs.Stat(); err == nil {
			t := st.CPUTotal
			idle := t.Idle + t.Iowait
			m.all = t.User + t.Nice + t.System + idle + t.IRQ + t.SoftIRQ + t.Steal
			m.busy = m.all - idle
		}
	}
	return m
}

// runRollout starts `compositor dev`, sets up the definition and its compositions,
// measures the move, and writes the report.
func runRollout(ctx context.Context, o options, ro rolloutOptions) error {
	if ro.compositions < 1 || ro.namespaces < 1 || ro.concurrency < 1 {
		return fmt.Errorf("-rollout, -rollout-namespaces and -rollout-concurrency must be positive")
	}
	dir, err := os.MkdirTemp("", "compositor-bench-rollout-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	run := &rolloutRun{Started: time.Now(), Compositions: ro.compositions, Namespaces: ro.namespaces,
		Concurrency: ro.concurrency, Rate: ro.rate, PollSeconds: ro.poll.Seconds(), RolloutSeconds: -1, PlanSeconds: -1}
	rep := &report{}
	if err := rep.describeMachine(o.compositor, o.controlPlaneDir); err != nil {
		return err
	}
	run.Machine = rep.Machine
	devArgs := append([]string{}, ro.devArgs...)
	if ro.reconcileRate > 0 {
		// The N paused compositions are each reconciled once, to mark them Paused,
		// before the baseline; at the default 3/s that alone takes minutes.
		devArgs = append(devArgs, "--max-reconcile-rate", strconv.Itoa(ro.reconcileRate))
	}
	run.DevArgs = devArgs
	logf("starting compositor dev %s", strings.Join(devArgs, " "))
	d, err := startDev(ctx, o.compositor, o.controlPlaneDir, dir, devArgs...)
	if err != nil {
		return err
	}
	defer d.stop()
	if err := measureRollout(ctx, o, ro, d, run); err != nil {
		return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
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
	section := run.markdown()
	fmt.Print(section)
	if o.out == "" {
		return nil
	}
	old, err := os.ReadFile(o.out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(o.out, []byte(replaceRolloutSection(string(old), section)), 0o644)
}

func rolloutNamespace(i int) string { return fmt.Sprintf("rollout-%d", i) }

func measureRollout(ctx context.Context, o options, ro rolloutOptions, d *dev, run *rolloutRun) error {
	note := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		logf("%s", msg)
		run.Notes = append(run.Notes, msg)
	}
	// Setup: namespaces, the bench's policies, the definition at the old version.
	team := map[string]string{"team": "a"}
	if err := d.createNamespace(ctx, rolloutDefinitionNamespace, team); err != nil {
		return err
	}
	for i := range ro.namespaces {
		if err := d.createNamespace(ctx, rolloutNamespace(i), team); err != nil {
			return err
		}
	}
	logf("applying the policies and the definition of %s %s (approval Always)", samplecharts.ChartName, rolloutFrom)
	if _, err := d.applyPolicies(ctx, o.policyDir); err != nil {
		return err
	}
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: rolloutDefinition, Namespace: rolloutDefinitionNamespace},
		Spec: corev1alpha1.CompositionDefinitionSpec{
			Chart:   corev1alpha1.ChartInfo{URL: d.chartsURL, Repo: samplecharts.ChartName, Version: rolloutFrom},
			Upgrade: &corev1alpha1.UpgradePolicy{Approval: corev1alpha1.ApprovalAlways},
		},
	}
	if err := d.client.Create(ctx, def); err != nil {
		return fmt.Errorf("creating definition %s: %w", rolloutDefinition, err)
	}
	if err := d.waitDefinitionsReady(ctx, rolloutDefinitionNamespace, 1, 2*time.Minute); err != nil {
		return err
	}
	if err := waitAdmitted(ctx, d); err != nil {
		return err
	}

	// N paused compositions of the old version, spread over the namespaces.
	logf("creating %d paused %s %s compositions over %d namespaces", ro.compositions, compositionKind, compositionVersion, ro.namespaces)
	began := time.Now()
	if err := createRolloutCompositions(ctx, d, ro); err != nil {
		return err
	}
	run.CreateSeconds = time.Since(began).Seconds()
	logf("created %d in %.1f s; waiting until each is listed and marked Paused", ro.compositions, run.CreateSeconds)
	began = time.Now()
	err := wait.PollUntilContextTimeout(ctx, time.Second, ro.wait, true, func(ctx context.Context) (bool, error) {
		var err error
		run.Listed, run.PausedAnnotated, run.PausedCondition, err = countPaused(ctx, d)
		return run.Listed >= ro.compositions && run.PausedCondition >= ro.compositions, err
	})
	run.SettleSeconds = time.Since(began).Seconds()
	if err != nil {
		note("before the move: %d listed pinned to %s, %d paused, %d marked Paused after %s: %v",
			run.Listed, compositionVersion, run.PausedAnnotated, run.PausedCondition, seconds(run.SettleSeconds), err)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if run.HelmReleases, err = countHelmReleases(ctx, d, ro.namespaces); err != nil {
		return err
	}
	logf("%d listed pinned to %s, %d paused, %d marked Paused, %d Helm releases", run.Listed, compositionVersion,
		run.PausedAnnotated, run.PausedCondition, run.HelmReleases)

	// Admission under load throughout: a baseline, the move, a little after.
	lctx, stopLoad := context.WithCancel(ctx)
	k := newMarker(d)
	l := startRolloutLoad(lctx, d, ro)
	defer func() { stopLoad(); l.wait() }()
	logf("dry-run creates through the API server, %s, from %d clients: %s warm-up, %s baseline", rateOf(ro.rate), ro.concurrency, o.warmup, ro.baseline)
	if !sleepCtx(ctx, o.warmup) {
		return ctx.Err()
	}
	baseStart := k.mark()
	if !sleepCtx(ctx, ro.baseline) {
		return ctx.Err()
	}

	logf("applying the definition at %s", rolloutTo)
	listsBefore, listsErr := readCompositionLists(ctx, d)
	apply := k.mark()
	patch := fmt.Appendf(nil, `{"spec":{"chart":{"version":%q}}}`, rolloutTo)
	target := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Name: rolloutDefinition, Namespace: rolloutDefinitionNamespace}}
	if err := d.client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("moving the definition to %s: %w", rolloutTo, err)
	}
	var profiled chan error
	if o.profileDir != "" {
		// Compositor's CPU profile from the apply, and its goroutines two seconds into
		// planning: where the plan's time goes.
		profiled = make(chan error, 1)
		go func() {
			profiled <- saveProfile(ctx, d.pprof, 0, rolloutProfile, filepath.Join(o.profileDir, "rollout-plan.pprof"))
		}()
	}
	var begun, planned mark
	dumped := false
	var last *corev1alpha1.Rollout
	deadline := time.Now().Add(ro.wait)
	for planned.at.IsZero() {
		if !sleepCtx(ctx, ro.poll) {
			return ctx.Err()
		}
		now := k.mark()
		got := &corev1alpha1.CompositionDefinition{}
		if err := d.client.Get(ctx, client.ObjectKeyFromObject(target), got); err != nil {
			return err
		}
		if r := got.Status.Rollout; r != nil && r.To == rolloutTo {
			last = r
			if begun.at.IsZero() {
				begun = now
				logf("status.rollout written after %.2f s (phase %q): planning", now.at.Sub(apply.at).Seconds(), r.Phase)
			}
			if r.Plan.Hash != "" && int(r.Plan.ToMove) == ro.compositions {
				planned = now
				break
			}
		}
		if o.profileDir != "" && !dumped && !begun.at.IsZero() && time.Since(begun.at) >= 2*time.Second {
			dumped = true
			if err := saveGoroutines(ctx, d.pprof, filepath.Join(o.profileDir, "rollout-goroutines.txt")); err != nil {
				note("saving Compositor's goroutines: %v", err)
			}
		}
		if time.Now().After(deadline) {
			run.PlanTimedOut = true
			break
		}
	}
	if !planned.at.IsZero() {
		logf("status.rollout.plan %s with toMove %d after %.2f s", last.Plan.Hash, last.Plan.ToMove, planned.at.Sub(apply.at).Seconds())
		if !sleepCtx(ctx, ro.after) {
			return ctx.Err()
		}
	}
	var listsAfter *compositionLists
	if listsErr == nil && !planned.at.IsZero() {
		listsAfter, listsErr = readCompositionLists(ctx, d)
	}
	end := k.mark()
	stopLoad()
	samples := l.wait()
	if profiled != nil {
		if err := <-profiled; err != nil {
			note("profiling Compositor: %v", err)
		}
	}

	if !begun.at.IsZero() {
		run.RolloutSeconds = begun.at.Sub(apply.at).Seconds()
	}
	if last != nil {
		run.Phase, run.Message, run.Plan = last.Phase, last.Message, last.Plan
	}
	if run.PlanTimedOut {
		msg := fmt.Sprintf("no plan of %d compositions within %s of the apply", ro.compositions, ro.wait)
		if last != nil {
			msg += fmt.Sprintf("; status.rollout was phase %q, plan hash %q, toMove %d, message %q", last.Phase, last.Plan.Hash, last.Plan.ToMove, last.Message)
		}
		note("%s", msg)
		run.Baseline = window(samples, l.start, baseStart, apply)
		run.Setup = window(samples, l.start, apply, end)
		return nil
	}
	run.PlanSeconds = planned.at.Sub(apply.at).Seconds()
	if listsErr != nil {
		note("reading the API server's metrics: %v", listsErr)
	} else if listsAfter != nil {
		run.Lists = listsAfter.since(listsBefore)
	}
	run.Baseline = window(samples, l.start, baseStart, apply)
	run.Setup = window(samples, l.start, apply, begun)
	run.Planning = window(samples, l.start, begun, planned)
	run.After = window(samples, l.start, planned, end)
	for _, w := range []struct {
		name string
		w    rolloutWindow
	}{{"baseline", run.Baseline}, {"apply → status.rollout", run.Setup}, {"planning", run.Planning}, {"after", run.After}} {
		if w.w.Errors > 0 {
			note("%s: %d of %d writes failed, the first: %s", w.name, w.w.Errors, w.w.Requests, w.w.FirstError)
		}
		if w.w.OtherCores > 0.2 {
			note("%s: other processes on the machine used %.2f cores (of %d) meanwhile", w.name, w.w.OtherCores, run.Machine.Cores)
		}
	}
	if run.Phase != corev1alpha1.RolloutAwaitingApproval {
		note("the rollout is in phase %q, not %s: %s", run.Phase, corev1alpha1.RolloutAwaitingApproval, run.Message)
	}
	// Nothing moved: every composition is still pinned to the old version.
	if listed, _, _, err := countPaused(ctx, d); err == nil && listed != ro.compositions {
		note("after the plan, %d compositions are pinned to %s, not %d", listed, compositionVersion, ro.compositions)
	}
	return nil
}

// waitAdmitted waits until the webhooks admit a dry-run create of a composition and
// the policies refuse one without a team label: both are in force.
func waitAdmitted(ctx context.Context, d *dev) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		good := rolloutComposition(rolloutNamespace(0), "probe-admitted", 0)
		if last = d.client.Create(ctx, good, client.DryRunAll); last != nil {
			return false, nil
		}
		bad := rolloutComposition(rolloutNamespace(0), "probe-refused", 0)
		bad.SetLabels(nil)
		if err := d.client.Create(ctx, bad, client.DryRunAll); err == nil {
			last = errors.New("a composition without a team label is admitted: the policies are not in force yet")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("a %s create is not admitted as expected after a minute: %w (last: %v)", compositionKind, err, last)
	}
	return nil
}

// rolloutComposition is a paused FireworksApp as a user writes it, through
// compositionVersion: the webhooks default its release name and pin its version. i
// varies its values.
func rolloutComposition(namespace, name string, i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": compositionGroup + "/" + compositionVersion,
		"kind":       compositionKind,
		"metadata": map[string]any{
			"name":        name,
			"namespace":   namespace,
			"labels":      map[string]any{"team": "a"},
			"annotations": map[string]any{vocab.AnnotationPaused: "true"},
		},
		"spec": rolloutSpec(i),
	}}
}

// rolloutSpec are fireworks-app 1.1.5 values that the schema and the policies admit,
// every documented one varied with i.
func rolloutSpec(i int) map[string]any {
	spec := map[string]any{
		"replicaCount": int64(1 + i%5),
		"image": map[string]any{
			"repository": []string{"nginx", "registry.example.com/web/nginx", "docker.io/library/nginx"}[i%3],
			"tag":        fmt.Sprintf("1.27.%d", i%7),
			"pullPolicy": []string{"IfNotPresent", "Always"}[(i/2)%2],
		},
		"service": map[string]any{
			"type": []string{"ClusterIP", "NodePort", "LoadBalancer"}[(i/3)%3],
			"port": int64(80 + i%50),
		},
		"cache": map[string]any{
			"enabled":   i%4 == 0,
			"maxMemory": fmt.Sprintf("%dMi", 64*(1+i%8)),
		},
	}
	if i%5 != 0 {
		spec["storage"] = map[string]any{"size": fmt.Sprintf("%dGi", 1+i%20)}
	}
	return spec
}

// createRolloutCompositions creates the N compositions, eight at a time; a create that
// fails for another reason than the object existing is tried twice more.
func createRolloutCompositions(ctx context.Context, d *dev, ro rolloutOptions) error {
	var (
		mu       sync.Mutex
		firstErr error
		failed   int
	)
	inParallel(ctx, ro.compositions, func(i int) {
		obj := rolloutComposition(rolloutNamespace(i%ro.namespaces), fmt.Sprintf("app-%05d", i), i)
		var err error
		for attempt := range 3 {
			if attempt > 0 {
				time.Sleep(time.Second)
			}
			if err = d.client.Create(ctx, obj.DeepCopy()); err == nil || apierrors.IsAlreadyExists(err) {
				return
			}
		}
		mu.Lock()
		failed++
		firstErr = cmpErr(firstErr, fmt.Errorf("creating %s %s: %w", compositionKind, obj.GetName(), err))
		mu.Unlock()
	})
	if firstErr != nil {
		return fmt.Errorf("%d of %d creates failed, the first: %w", failed, ro.compositions, firstErr)
	}
	return ctx.Err()
}

// countPaused lists the compositions pinned to compositionVersion, as the definition
// reconciler lists them for its plan, and counts those annotated paused and those
// their controller marked Paused.
func countPaused(ctx context.Context, d *dev) (listed, annotated, marked int, err error) {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(compositionGroup + "/" + compositionVersion)
	list.SetKind(compositionKind + "List")
	if err := d.client.List(ctx, list, client.MatchingLabels{vocab.LabelCompositionVersion: compositionVersion}); err != nil {
		return 0, 0, 0, err
	}
	for i := range list.Items {
		obj := &list.Items[i]
		if obj.GetAnnotations()[vocab.AnnotationPaused] == "true" {
			annotated++
		}
		if c := readyConditionOf(obj); c != nil && c["status"] == string(metav1.ConditionFalse) && c["reason"] == condition.ReasonPaused {
			marked++
		}
	}
	return len(list.Items), annotated, marked, nil
}

func readyConditionOf(obj *unstructured.Unstructured) map[string]any {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == corev1alpha1.ConditionReady {
			return m
		}
	}
	return nil
}

// countHelmReleases counts Helm's release Secrets in the compositions' namespaces.
func countHelmReleases(ctx context.Context, d *dev, namespaces int) (int, error) {
	n := 0
	for i := range namespaces {
		list := &metav1.PartialObjectMetadataList{}
		list.APIVersion, list.Kind = "v1", "SecretList"
		if err := d.client.List(ctx, list, client.InNamespace(rolloutNamespace(i)), client.MatchingLabels{"owner": "helm"}); err != nil {
			return 0, err
		}
		n += len(list.Items)
	}
	return n, nil
}

// rolloutSample is one write of the load: when it started, after the load did, and
// how long it took.
type rolloutSample struct {
	start, took time.Duration
	err         error
}

// rolloutLoad sends dry-run creates of compositions through the API server, which calls
// both webhooks over HTTPS and converts to the storage version, from concurrency
// workers until stopped.
type rolloutLoad struct {
	start   time.Time
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []rolloutSample
}

// With ro.rate, write i is due at i/rate after the start and timed from then, so that
// a write that waits for a free client counts its wait (no coordinated omission).
func startRolloutLoad(ctx context.Context, d *dev, ro rolloutOptions) *rolloutLoad {
	l := &rolloutLoad{start: time.Now()}
	var next atomic.Int64
	for range ro.concurrency {
		l.wg.Go(func() {
			var mine []rolloutSample
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				obj := rolloutComposition(rolloutNamespace(i%ro.namespaces), fmt.Sprintf("probe-%d", i%500), i)
				began := time.Now()
				if ro.rate > 0 {
					began = l.start.Add(time.Duration(float64(i) / ro.rate * float64(time.Second)))
					if !sleepCtx(ctx, time.Until(began)) {
						break
					}
				}
				err := d.client.Create(ctx, obj, client.DryRunAll)
				if ctx.Err() != nil {
					break // cut off by the end of the load, not an answer
				}
				mine = append(mine, rolloutSample{start: began.Sub(l.start), took: time.Since(began), err: err})
			}
			l.mu.Lock()
			l.samples = append(l.samples, mine...)
			l.mu.Unlock()
		})
	}
	return l
}

// wait waits for the workers, stopped by their context, and returns every sample.
func (l *rolloutLoad) wait() []rolloutSample {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.samples
}

// window is the writes started between from and to, and the CPU used meanwhile.
func window(samples []rolloutSample, start time.Time, from, to mark) rolloutWindow {
	lo, hi := from.at.Sub(start), to.at.Sub(start)
	var latencies []time.Duration
	w := rolloutWindow{result: result{Server: "compositor", Workload: "composition dry-run create through the API server", Seconds: to.at.Sub(from.at).Seconds()},
		CompositorCores: -1, ControlPlaneCores: -1, HarnessCores: -1, OtherCores: -1, MachineBusy: -1}
	for _, s := range samples {
		if s.start < lo || s.start >= hi {
			continue
		}
		latencies = append(latencies, s.took)
		if s.err != nil {
			w.Errors++
			if w.FirstError == "" {
				w.FirstError = s.err.Error()
			}
		}
	}
	if from.compositor >= 0 && to.compositor >= 0 {
		w.CPUSeconds = to.compositor - from.compositor
		if w.Seconds > 0 {
			w.CompositorCores = w.CPUSeconds / w.Seconds
		}
	}
	if from.controlPlane >= 0 && to.controlPlane >= 0 && w.Seconds > 0 {
		w.ControlPlaneCores = (to.controlPlane - from.controlPlane) / w.Seconds
	}
	if from.harness >= 0 && to.harness >= 0 && w.Seconds > 0 {
		w.HarnessCores = (to.harness - from.harness) / w.Seconds
	}
	if from.busy >= 0 && to.busy >= 0 && to.all > from.all {
		w.MachineBusy = (to.busy - from.busy) / (to.all - from.all)
		if w.CompositorCores >= 0 && w.ControlPlaneCores >= 0 && w.HarnessCores >= 0 {
			w.OtherCores = max(0, (to.busy-from.busy)/w.Seconds-w.CompositorCores-w.ControlPlaneCores-w.HarnessCores)
		}
	}
	w.Requests = len(latencies)
	if len(latencies) == 0 {
		return w
	}
	slices.Sort(latencies)
	w.P50 = millis(percentile(latencies, 0.50))
	w.P95 = millis(percentile(latencies, 0.95))
	w.P99 = millis(percentile(latencies, 0.99))
	w.Max = millis(latencies[len(latencies)-1])
	if w.Seconds > 0 {
		w.Throughput = float64(len(latencies)) / w.Seconds
	}
	return w
}

// compositionLists are the API server's LISTs of the compositions' resource.
type compositionLists struct {
	ByCode  map[string]float64 `json:"byCode"`
	Seconds float64            `json:"seconds"`
}

func (c *compositionLists) since(before *compositionLists) *compositionLists {
	out := &compositionLists{ByCode: map[string]float64{}, Seconds: c.Seconds - before.Seconds}
	for code, n := range c.ByCode {
		if d := n - before.ByCode[code]; d > 0 {
			out.ByCode[code] = d
		}
	}
	return out
}

func (c *compositionLists) String() string {
	codes := slices.Sorted(maps.Keys(c.ByCode))
	var parts []string
	for _, code := range codes {
		parts = append(parts, fmt.Sprintf("%.0f × %s", c.ByCode[code], code))
	}
	if len(parts) == 0 {
		return "none"
	}
	return fmt.Sprintf("%s, answered in %.2f s in all", strings.Join(parts, ", "), c.Seconds)
}

// readCompositionLists reads apiserver_request_total and
// apiserver_request_duration_seconds of LISTs of the compositions' resource.
func readCompositionLists(ctx context.Context, d *dev) (*compositionLists, error) {
	clientset, err := kubernetes.NewForConfig(d.cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	raw, err := clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	out := &compositionLists{ByCode: map[string]float64{}}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		if labels := listLabels(m.GetLabel()); labels != nil {
			out.ByCode[labels["code"]] += m.GetCounter().GetValue()
		}
	}
	for _, m := range families["apiserver_request_duration_seconds"].GetMetric() {
		if listLabels(m.GetLabel()) != nil {
			out.Seconds += m.GetHistogram().GetSampleSum()
		}
	}
	return out, nil
}

// listLabels are the labels of a metric of LISTs of the compositions' resource, nil
// for another metric.
func listLabels[L interface {
	GetName() string
	GetValue() string
}](pairs []L) map[string]string {
	labels := map[string]string{}
	for _, l := range pairs {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["verb"] != "LIST" || labels["group"] != compositionGroup || labels["resource"] != "fireworksapps" {
		return nil
	}
	return labels
}

// rolloutProfile is how long Compositor is profiled from the apply, with -profile-dir.
const rolloutProfile = 10 * time.Second

// saveGoroutines writes every goroutine's stack in Compositor, from its pprof at addr.
func saveGoroutines(ctx context.Context, addr, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/goroutine?debug=2", addr), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func rateOf(rate float64) string {
	if rate <= 0 {
		return "each client writing again at once"
	}
	return fmt.Sprintf("%g/s", rate)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *rolloutRun) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p(rolloutBegin)
	p("## Rollout plan (issue #30)")
	p("")
	p("Written by `make bench-rollout` (`go run ./test/bench -rollout %d`) on %s in %s, on %s,", r.Compositions, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Round(time.Second), r.Machine.CPU)
	p("%d cores, %d GiB, Compositor at %s. `compositor dev %s` gets the bench's CompositionPolicies", r.Machine.Cores, r.Machine.MemoryGiB, r.Machine.Commit, strings.Join(r.DevArgs, " "))
	p("and a definition of %s %s (the sample charts, served on loopback) with `spec.upgrade: {approval: Always}`,", samplecharts.ChartName, rolloutFrom)
	p("then %d %s %s compositions over %d namespaces, created through the API server in %s, values varied", r.Compositions, compositionKind, compositionVersion, r.Namespaces, seconds(r.CreateSeconds))
	p("(replicaCount, image, service, storage, cache) and annotated `%s: \"true\"`. Before the move, %d were listed", vocab.AnnotationPaused, r.Listed)
	p("pinned to %s (the definition reconciler's own query), %d of them annotated paused, %d marked Ready=False", compositionVersion, r.PausedAnnotated, r.PausedCondition)
	p("reason Paused by their controller; %d Helm release Secrets in their namespaces.", r.HelmReleases)
	p("")
	p("The definition then moves to %s (a merge patch of spec.chart.version). Its reconciler writes", rolloutTo)
	p("status.rollout (the new version served, the old one retained) and plans moving every composition")
	p("of the old version in the same reconciliation (`plan.Compute`, one worker, in the process serving")
	p("the webhooks). Both instants are read by polling the definition every %s.", time.Duration(r.PollSeconds*float64(time.Second)))
	p("")
	p("| compositions | apply → status.rollout s | status.rollout → plan s | **apply → plan s** | phase | toMove | refused | additions | deletions | changes |")
	p("|---|---|---|---|---|---|---|---|---|---|")
	if r.PlanTimedOut {
		p("| %d | %s | — | not within the wait | %s | %d | %d | %d | %d | %d |", r.Compositions, num(r.RolloutSeconds, "%.2f"), r.Phase, r.Plan.ToMove, r.Plan.Refused, r.Plan.Additions, r.Plan.Deletions, r.Plan.Changes)
	} else {
		p("| %d | %.2f | %.2f | **%.2f** | %s | %d | %d | %d | %d | %d |", r.Compositions, r.RolloutSeconds, r.PlanSeconds-r.RolloutSeconds, r.PlanSeconds,
			r.Phase, r.Plan.ToMove, r.Plan.Refused, r.Plan.Additions, r.Plan.Deletions, r.Plan.Changes)
	}
	if r.Lists != nil {
		p("")
		p("LISTs of fireworksapps the API server answered between the apply and the plan (the reconciler reads the")
		p("compositions to plan with one; response code, count): %s.", r.Lists)
	}
	p("")
	p("Admission meanwhile: dry-run creates of %s %s compositions (server-side dry run: the API server calls", compositionKind, compositionVersion)
	if r.Rate > 0 {
		p("`/mutate` and `/validate` over HTTPS and converts to the storage version, nothing is stored), %g a", r.Rate)
		p("second on a fixed schedule from up to %d clients, each timed from when it was due (a write waiting for", r.Concurrency)
		p("a free client counts its wait), and counted in the window it was due in.")
	} else {
		p("`/mutate` and `/validate` over HTTPS and converts to the storage version, nothing is stored) from %d", r.Concurrency)
		p("clients without pause, each timed from the client, and counted in the window it started in.")
	}
	p("The last four columns are CPU time over the window's, in cores: Compositor's process, the control plane")
	p("it started (kube-apiserver, etcd), this harness, and every other process on the machine (its busy time")
	p("less those three: anything else running then competes for the same %d cores).", r.Machine.Cores)
	p("")
	p("| window | s | writes | errors | p50 ms | p95 ms | p99 ms | max ms | writes/s | Compositor | control plane | harness | others |")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	rows := []struct {
		name string
		w    rolloutWindow
	}{{"baseline, before the apply", r.Baseline}, {"apply → status.rollout", r.Setup}, {"**status.rollout → plan (planning)**", r.Planning}, {"after the plan", r.After}}
	for _, row := range rows {
		w := row.w
		if w.Seconds == 0 {
			continue
		}
		if w.Requests == 0 {
			p("| %s | %.2f | 0 | — | — | — | — | — | — | %s |", row.name, w.Seconds, w.cores())
			continue
		}
		p("| %s | %.2f | %d | %d | %.2f | %.2f | %.2f | %.2f | %.0f | %s |", row.name, w.Seconds, w.Requests, w.Errors,
			w.P50, w.P95, w.P99, w.Max, w.Throughput, w.cores())
	}
	if r.Planning.Requests > 0 && r.Baseline.Requests > 0 && r.Baseline.P50 > 0 && r.Baseline.P99 > 0 {
		p("")
		p("While planning, p50 %.2f× and p99 %.2f× the baseline's; %.2f× its writes per second.",
			r.Planning.P50/r.Baseline.P50, r.Planning.P99/r.Baseline.P99, r.Planning.Throughput/r.Baseline.Throughput)
	}
	p("")
	p("### Target (issue #30)")
	p("")
	p("| target | measured | met |")
	p("|---|---|---|")
	measured, ok := "no plan of all of them within the wait", false
	if !r.PlanTimedOut {
		measured = fmt.Sprintf("%.2f s from the apply for %d compositions", r.PlanSeconds, r.Compositions)
		ok = r.PlanSeconds < rolloutTarget.Seconds()
	}
	p("| plan of 1,000 compositions computed in under 10 s | %s | %s |", measured, atScale(ok, r.Compositions, rolloutTargetScale))
	if r.Planning.Requests > 0 {
		p("| without blocking admission | %d writes admitted while planning, %d failed, p99 %.2f ms (baseline %.2f ms) | %s |",
			r.Planning.Requests-r.Planning.Errors, r.Planning.Errors, r.Planning.P99, r.Baseline.P99, judged(r.Planning.Errors == 0 && r.Planning.Requests-r.Planning.Errors > 0))
	}
	if len(r.Notes) > 0 {
		p("")
		p("Notes:")
		p("")
		for _, n := range r.Notes {
			p("- %s", strings.ReplaceAll(n, "\n", " "))
		}
	}
	p("")
	p("`make bench-rollout ROLLOUT_ARGS='-rollout 200'` runs a smaller one; `go run ./test/bench -h` lists the `-rollout` knobs.")
	p(rolloutEnd)
	return b.String()
}

// cores are the window's CPU cells.
func (w rolloutWindow) cores() string {
	return strings.Join([]string{num(w.CompositorCores, "%.2f"), num(w.ControlPlaneCores, "%.2f"), num(w.HarnessCores, "%.2f"), num(w.OtherCores, "%.2f")}, " | ")
}

// replaceRolloutSection puts section in place of the rollout section of old (replaceSection).
func replaceRolloutSection(old, section string) string {
	return replaceSection(old, section, rolloutBegin, rolloutEnd)
}

// carryRolloutSection puts the rollout section of old into fresh (carrySection).
func carryRolloutSection(old, fresh string) string {
	return carrySection(old, fresh, rolloutBegin, rolloutEnd)
}
