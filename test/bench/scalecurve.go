package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// The scale curve (issue #15): `compositor dev` with N definitions of N distinct
// generated charts and M compositions of each, for a rising list of N. Every wait has
// a deadline and the whole run a budget: what a step did not reach in time is recorded
// as reached so far, never waited for longer.

// scaleOptions are the knobs of the scale curve.
type scaleOptions struct {
	steps         []int
	perDefinition int
	probes        int
	budget        time.Duration
	readyWait     time.Duration
	installWait   time.Duration
	probeWait     time.Duration
	reconcileRate int
	devArgs       []string
	// settle is how long a step waits before a sample, so that informers and
	// controllers started for what it just added are counted with it.
	settle time.Duration
}

// scaleRun is everything one scale curve measured.
type scaleRun struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  machine   `json:"machine"`
	// Baseline is the sample before the first step.
	Baseline      sample      `json:"baseline"`
	Steps         []scaleStep `json:"steps"`
	PerDefinition int         `json:"perDefinition"`
	Probes        int         `json:"probes"`
	DevArgs       []string    `json:"devArgs"`
	BudgetSeconds float64     `json:"budgetSeconds"`
	// Stopped says why the curve ended before its last step, if it did.
	Stopped string `json:"stopped,omitempty"`
}

// scaleStep is one point of the curve.
type scaleStep struct {
	// Definitions is the step's target; DefinitionsReady how many of them were Ready
	// after ReadySeconds (from the first create of the step to the last one Ready, or to
	// the deadline when ReadyTimedOut).
	Definitions      int     `json:"definitions"`
	DefinitionsReady int     `json:"definitionsReady"`
	ReadySeconds     float64 `json:"readySeconds"`
	ReadyTimedOut    bool    `json:"readyTimedOut"`
	// Compositions is how many compositions existed when measured (M per Ready
	// definition, plus the probes of earlier steps); Installed how many of them were
	// Ready after InstalledSeconds.
	Compositions      int     `json:"compositions"`
	Installed         int     `json:"installed"`
	InstalledSeconds  float64 `json:"installedSeconds"`
	InstalledTimedOut bool    `json:"installedTimedOut"`
	CreateErrors      int     `json:"createErrors"`
	FirstCreateError  string  `json:"firstCreateError,omitempty"`
	AfterDefinitions  sample  `json:"afterDefinitions"`
	// AfterFirstCompositions is read once every new kind had its first composition
	// installed; nil when the step added no kind.
	AfterFirstCompositions *sample  `json:"afterFirstCompositions,omitempty"`
	AfterCompositions      sample   `json:"afterCompositions"`
	Validate               *result  `json:"validate,omitempty"`
	NewDefinitionReady     probes   `json:"newDefinitionReady"`
	NewCompositionDone     probes   `json:"newCompositionInstalled"`
	Notes                  []string `json:"notes,omitempty"`
}

// sample is Compositor's and the API server's state at one moment.
type sample struct {
	At         float64 `json:"atSeconds"`
	RSSMiB     float64 `json:"rssMiB"`
	Goroutines int     `json:"goroutines"`
	// Watches is the sum of apiserver_longrunning_requests{verb="WATCH"}; Composition
	// the part of it on group composition.krateo.io. A figure that could not be read
	// is -1 and Err says why.
	Watches            float64 `json:"watches"`
	CompositionWatches float64 `json:"compositionWatches"`
	Definitions        int     `json:"definitions"`
	Compositions       int     `json:"compositions"`
	Err                string  `json:"error,omitempty"`
}

// probes are the times of single objects, applied one after another, to Ready.
type probes struct {
	Attempted int       `json:"attempted"`
	Seconds   []float64 `json:"seconds"`
	TimedOut  int       `json:"timedOut"`
	Errors    []string  `json:"errors,omitempty"`
	// P50 counts what timed out or was not tried as slower than everything; nil when
	// that is half or more.
	P50         *float64 `json:"p50Seconds"`
	WaitSeconds float64  `json:"waitSeconds"`
}

// scaleDef is one definition the curve created.
type scaleDef struct {
	name string
	// exists is set once its create succeeded.
	exists     bool
	ready      bool
	gvr        schema.GroupVersionResource
	apiVersion string
	kind       string
	// next is the index of its next composition (named name-c0, name-c1, …), created
	// how many of them exist (a create that failed is not tried again); allInstalled is
	// set once all of them were seen Ready.
	next         int
	created      int
	allInstalled bool
}

type scaler struct {
	o       options
	so      scaleOptions
	d       *dev
	dyn     dynamic.Interface
	disc    *discovery.DiscoveryClient
	repoURL string
	defs    []*scaleDef
	start   time.Time
}

// runScale starts `compositor dev` and walks the curve, then writes the report.
func runScale(ctx context.Context, o options, so scaleOptions) error {
	dir, err := os.MkdirTemp("", "compositor-bench-scale-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	run := &scaleRun{Started: time.Now(), PerDefinition: so.perDefinition, Probes: so.probes, BudgetSeconds: so.budget.Seconds()}
	rep := &report{}
	if err := rep.describeMachine(o.compositor, o.controlPlaneDir); err != nil {
		return err
	}
	run.Machine = rep.Machine

	maxN := slices.Max(so.steps)
	charts := maxN + so.probes*len(so.steps)
	logf("generating %d charts", charts)
	chartDir := filepath.Join(dir, "scale-charts")
	if err := generateCharts(chartDir, charts); err != nil {
		return err
	}
	repo, err := chartserver.StartRepository(chartserver.RepositoryOptions{Dir: chartDir, Addr: "127.0.0.1:0"})
	if err != nil {
		return err
	}
	defer repo.Close()

	devArgs := append([]string{}, so.devArgs...)
	if so.reconcileRate > 0 {
		devArgs = append(devArgs, "--max-reconcile-rate", strconv.Itoa(so.reconcileRate))
	}
	run.DevArgs = devArgs
	logf("starting compositor dev %s", strings.Join(devArgs, " "))
	d, err := startDev(ctx, o.compositor, o.controlPlaneDir, dir, devArgs...)
	if err != nil {
		return err
	}
	defer d.stop()
	s := &scaler{o: o, so: so, d: d, repoURL: repo.URL, start: time.Now()}
	if s.dyn, err = dynamic.NewForConfig(d.cfg); err != nil {
		return err
	}
	if s.disc, err = discovery.NewDiscoveryClientForConfig(d.cfg); err != nil {
		return err
	}

	budgetCtx, cancel := context.WithTimeout(ctx, so.budget)
	defer cancel()
	calls, err := s.setUpValidate(budgetCtx)
	if err != nil {
		return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
	}
	if err := d.createNamespace(budgetCtx, scaleNamespace, nil); err != nil {
		return err
	}
	run.Baseline = s.sample(budgetCtx)
	for _, n := range so.steps {
		step := s.step(budgetCtx, n, calls)
		run.Steps = append(run.Steps, step)
		if err := budgetCtx.Err(); err != nil {
			run.Stopped = fmt.Sprintf("the budget of %s ran out during the step of %d definitions", so.budget, n)
			if ctx.Err() != nil {
				run.Stopped = "interrupted during the step of " + strconv.Itoa(n) + " definitions"
			}
			break
		}
		if !alive(d) {
			run.Stopped = fmt.Sprintf("compositor dev exited during the step of %d definitions (its log: %s)", n, d.log)
			break
		}
	}
	if run.Stopped != "" {
		logf("stopped: %s", run.Stopped)
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
	return writeScaleSection(o.out, run)
}

// rerenderScale writes the scale section of out again from a run's JSON (-json), as
// the report's code renders it now.
func rerenderScale(path, out string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	run := &scaleRun{}
	if err := json.Unmarshal(b, run); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return writeScaleSection(out, run)
}

// writeScaleSection puts run's section into the Markdown file out, or prints it.
func writeScaleSection(out string, run *scaleRun) error {
	section := run.markdown()
	if out == "" {
		fmt.Print(section)
		return nil
	}
	old, err := os.ReadFile(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(out, []byte(replaceScaleSection(string(old), section)), 0o644)
}

// setUpValidate creates the definition of fireworks-app 1.1.5 in benchNamespace whose
// compositions the /validate runs review, and waits until a review of one is admitted.
func (s *scaler) setUpValidate(ctx context.Context) ([]call, error) {
	if err := s.d.createNamespace(ctx, benchNamespace, map[string]string{"team": "a"}); err != nil {
		return nil, err
	}
	if err := s.d.applyDefinition(ctx, benchNamespace, "fireworks-115", s.d.chartsURL, samplecharts.ChartName, "1.1.5"); err != nil {
		return nil, fmt.Errorf("creating definition fireworks-115: %w", err)
	}
	if err := s.d.waitDefinitionsReady(ctx, benchNamespace, 1, 2*time.Minute); err != nil {
		return nil, err
	}
	spec, err := admittedSpec()
	if err != nil {
		return nil, err
	}
	calls := compositionCreates(benchNamespace, 200, spec)
	deadline := time.Now().Add(time.Minute)
	for {
		err := send(ctx, s.d.endpoint, calls[0])
		if err == nil {
			return calls, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("a FireworksApp create is not admitted after a minute: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// step brings the cluster to n definitions with perDefinition compositions each and
// measures it. It never returns early for a missed deadline: what was reached is
// recorded.
func (s *scaler) step(ctx context.Context, n int, calls []call) scaleStep {
	st := scaleStep{Definitions: n}
	note := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		logf("%d definitions: %s", n, msg)
		st.Notes = append(st.Notes, msg)
	}

	// Definitions.
	from := len(s.defs)
	logf("%d definitions: creating %d", n, max(0, n-from))
	began := time.Now()
	// The creates count against the wait's deadline too.
	readyCtx, cancel := context.WithTimeout(ctx, s.so.readyWait)
	if err := s.createDefinitions(readyCtx, n); err != nil {
		note("%v", err)
	}
	ready, err := s.waitDefinitions(readyCtx, min(n, len(s.defs)))
	cancel()
	st.ReadySeconds = time.Since(began).Seconds()
	st.DefinitionsReady = ready
	if err != nil {
		st.ReadyTimedOut = true
		note("%d/%d definitions Ready after %s (%v)", ready, n, seconds(st.ReadySeconds), err)
	} else {
		logf("%d definitions: all Ready after %.1f s", n, st.ReadySeconds)
	}
	st.AfterDefinitions = s.sample(ctx)

	// Compositions of every Ready definition, in two rounds: each new kind's first
	// composition, then the rest, so that what a kind's first composition starts is
	// told apart from what each composition costs. The pause between them for reading
	// figures is not timed.
	installCtx, cancel := context.WithTimeout(ctx, s.so.installWait)
	var (
		active              time.Duration
		installed, total    int
		installErr          error
		createdAll, errsAll int
	)
	round := func(upTo int) {
		began := time.Now()
		created, errs, first := s.createCompositions(installCtx, upTo)
		createdAll += created
		errsAll += errs
		if st.FirstCreateError == "" {
			st.FirstCreateError = first
		}
		logf("%d definitions: created %d compositions, waiting for their releases", n, created)
		installed, total, installErr = s.waitInstalled(installCtx)
		active += time.Since(began)
	}
	if s.so.perDefinition > 0 && slices.ContainsFunc(s.defs, func(def *scaleDef) bool { return def.ready && def.next == 0 }) {
		round(1)
		first := s.sample(ctx)
		st.AfterFirstCompositions = &first
	}
	round(s.so.perDefinition)
	cancel()
	st.CreateErrors = errsAll
	if errsAll > 0 {
		note("%d composition creates failed, the first: %s", errsAll, st.FirstCreateError)
	}
	st.InstalledSeconds = active.Seconds()
	st.Compositions, st.Installed = total, installed
	if installErr != nil {
		st.InstalledTimedOut = true
		note("%d/%d compositions installed after %s (%v)", installed, total, seconds(st.InstalledSeconds), installErr)
	} else {
		logf("%d definitions: all %d compositions installed after %.1f s (%d created in this step)", n, total, st.InstalledSeconds, createdAll)
	}
	st.AfterCompositions = s.sample(ctx)
	if ctx.Err() != nil {
		return st
	}

	// /validate with n definitions present.
	logf("%d definitions: composition create /validate at concurrency 1", n)
	if r, err := drive(ctx, s.d.endpoint, "composition create /validate", calls, 1, s.o.warmup, s.o.duration); err != nil {
		note("/validate: %v", err)
	} else {
		st.Validate = &r
	}

	// One more definition at a time.
	logf("%d definitions: %d more, one at a time", n, s.so.probes)
	st.NewDefinitionReady = s.probe(ctx, func(ctx context.Context) (func(context.Context) (bool, error), error) {
		return s.addDefinition(ctx)
	})
	// One more composition at a time, of definitions spread over the ones present.
	logf("%d definitions: %d more compositions, one at a time", n, s.so.probes)
	k := 0
	st.NewCompositionDone = s.probe(ctx, func(ctx context.Context) (func(context.Context) (bool, error), error) {
		def := s.readyDef(k, n)
		k++
		if def == nil {
			return nil, errors.New("no Ready definition")
		}
		return s.addComposition(ctx, def)
	})
	for _, p := range []struct {
		what string
		p    probes
	}{{"new definition Ready", st.NewDefinitionReady}, {"new composition installed", st.NewCompositionDone}} {
		if p.p.TimedOut > 0 || len(p.p.Errors) > 0 {
			msg := fmt.Sprintf("%s: %d of %d in time, %d timed out after %s", p.what, len(p.p.Seconds), p.p.Attempted,
				p.p.TimedOut, seconds(p.p.WaitSeconds))
			if len(p.p.Errors) > 0 {
				msg += fmt.Sprintf(", %d failed: %s", len(p.p.Errors), strings.Join(p.p.Errors, "; "))
			}
			if p.p.Attempted < s.so.probes {
				msg += fmt.Sprintf("; %d not tried", s.so.probes-p.p.Attempted)
			}
			note("%s", msg)
		}
	}
	return st
}

// createDefinitions brings the definitions to the first to of the generated charts,
// creating the new ones and any whose create failed before, eight at a time.
func (s *scaler) createDefinitions(ctx context.Context, to int) error {
	for i := len(s.defs); i < to; i++ {
		s.defs = append(s.defs, &scaleDef{name: scaleChartName(i)})
	}
	var missing []int
	for i, def := range s.defs[:to] {
		if !def.exists {
			missing = append(missing, i)
		}
	}
	return s.applyDefinitions(ctx, missing)
}

// applyDefinitions creates the definitions of s.defs at indices, eight at a time.
func (s *scaler) applyDefinitions(ctx context.Context, indices []int) error {
	var (
		mu       sync.Mutex
		firstErr error
		failed   int
	)
	inParallel(ctx, len(indices), func(k int) {
		def := s.defs[indices[k]]
		err := s.d.applyDefinition(ctx, scaleNamespace, def.name, s.repoURL, def.name, "1.0.0")
		if err == nil || apierrors.IsAlreadyExists(err) {
			def.exists = true
			return
		}
		mu.Lock()
		failed++
		firstErr = cmpErr(firstErr, fmt.Errorf("creating definition %s: %w", def.name, err))
		mu.Unlock()
	})
	if firstErr != nil {
		return fmt.Errorf("%d definition creates failed, the first: %w", failed, firstErr)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("definition creates cut off: %w", err)
	}
	return nil
}

// waitDefinitions waits until the first n definitions are Ready and records the API
// each serves. It returns how many are Ready.
func (s *scaler) waitDefinitions(ctx context.Context, n int) (int, error) {
	var ready int
	err := pollUntil(ctx, time.Second, func(ctx context.Context) (bool, error) {
		list := &corev1alpha1.CompositionDefinitionList{}
		if err := s.d.client.List(ctx, list, client.InNamespace(scaleNamespace)); err != nil {
			return false, nil // the API server may be slow under the load; ask again
		}
		byName := map[string]*corev1alpha1.CompositionDefinition{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		ready = 0
		for _, def := range s.defs[:n] {
			s.record(def, byName[def.name])
			if def.ready {
				ready++
			}
		}
		return ready >= n, nil
	})
	return ready, err
}

// record copies what a Ready definition serves into def.
func (s *scaler) record(def *scaleDef, got *corev1alpha1.CompositionDefinition) {
	if got == nil || !meta.IsStatusConditionTrue(got.Status.Conditions, corev1alpha1.ConditionReady) || got.Status.Resource == "" {
		def.ready = false
		return
	}
	gv, err := schema.ParseGroupVersion(got.Status.APIVersion)
	if err != nil {
		return
	}
	def.ready = true
	def.gvr = gv.WithResource(got.Status.Resource)
	def.apiVersion, def.kind = got.Status.APIVersion, got.Status.Kind
}

// createCompositions brings every Ready definition to upTo compositions,
// eight creates at a time, until ctx is done. A create is tried again for a while: the
// webhooks' caches may not have seen a definition that just became Ready; once 16
// creates have failed, the rest are tried once each.
func (s *scaler) createCompositions(ctx context.Context, upTo int) (created, failed int, first string) {
	type job struct {
		def *scaleDef
		j   int
	}
	var jobs []job
	for _, def := range s.defs {
		if !def.ready {
			continue
		}
		for j := def.next; j < upTo; j++ {
			jobs = append(jobs, job{def, j})
		}
	}
	var mu sync.Mutex
	inParallel(ctx, len(jobs), func(i int) {
		// Tried again for a while, until creates keep failing: then once each.
		patience := 30 * time.Second
		mu.Lock()
		if failed >= 16 {
			patience = 0
		}
		mu.Unlock()
		err := s.createComposition(ctx, jobs[i].def, jobs[i].j, patience)
		mu.Lock()
		defer mu.Unlock()
		// Taken in order, so what ctx cut off is a suffix of each definition's.
		jobs[i].def.next = max(jobs[i].def.next, jobs[i].j+1)
		if err != nil {
			failed++
			if first == "" {
				first = err.Error()
			}
			return
		}
		created++
		jobs[i].def.created++
		jobs[i].def.allInstalled = false
	})
	return created, failed, first
}

func compositionName(def *scaleDef, j int) string { return fmt.Sprintf("%s-c%d", def.name, j) }

// createComposition creates composition j of def, trying again until patience runs out.
func (s *scaler) createComposition(ctx context.Context, def *scaleDef, j int, patience time.Duration) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": def.apiVersion,
		"kind":       def.kind,
		"metadata":   map[string]any{"name": compositionName(def, j), "namespace": scaleNamespace},
		"spec":       map[string]any{"message": "scale", "replicas": int64(1 + j%5)},
	}}
	deadline := time.Now().Add(patience)
	for {
		_, err := s.dyn.Resource(def.gvr).Namespace(scaleNamespace).Create(ctx, obj, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("creating %s %s: %w", def.kind, compositionName(def, j), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitInstalled waits until every composition created so far is Ready. It lists, each
// round, the kinds that still have compositions not seen Ready.
func (s *scaler) waitInstalled(ctx context.Context) (installed, total int, err error) {
	count := func() (int, int) {
		installed, total := 0, 0
		for _, def := range s.defs {
			total += def.created
			if def.allInstalled {
				installed += def.created
			}
		}
		return installed, total
	}
	partial := map[*scaleDef]int{}
	err = pollUntil(ctx, time.Second, func(ctx context.Context) (bool, error) {
		var pending []*scaleDef
		for _, def := range s.defs {
			if def.created > 0 && !def.allInstalled {
				pending = append(pending, def)
			}
		}
		var mu sync.Mutex
		inParallel(ctx, len(pending), func(i int) {
			def := pending[i]
			list, err := s.dyn.Resource(def.gvr).Namespace(scaleNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return
			}
			ready := 0
			for _, item := range list.Items {
				if compositionReady(&item) {
					ready++
				}
			}
			mu.Lock()
			partial[def] = ready
			if ready >= def.created {
				def.allInstalled = true
			}
			mu.Unlock()
		})
		i, t := count()
		for def, r := range partial {
			if !def.allInstalled {
				i += r
			}
		}
		installed, total = i, t
		return installed >= total, nil
	})
	return installed, total, err
}

// compositionReady says whether obj's condition Ready is True: its release is
// installed (composition.Reconciler.install in reconciler/composition).
func compositionReady(obj *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if ok && m["type"] == corev1alpha1.ConditionReady {
			return m["status"] == string(metav1.ConditionTrue)
		}
	}
	return false
}

// readyDef is the k-th of probes definitions spread over the first n, the next Ready
// one from there.
func (s *scaler) readyDef(k, n int) *scaleDef {
	n = min(n, len(s.defs))
	if n == 0 {
		return nil
	}
	start := (k * n / max(s.so.probes, 1)) % n
	for i := range n {
		if def := s.defs[(start+i)%n]; def.ready {
			return def
		}
	}
	return nil
}

// addDefinition creates the next definition and returns its readiness check.
func (s *scaler) addDefinition(ctx context.Context) (func(context.Context) (bool, error), error) {
	def := &scaleDef{name: scaleChartName(len(s.defs))}
	s.defs = append(s.defs, def)
	if err := s.applyDefinitions(ctx, []int{len(s.defs) - 1}); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (bool, error) {
		got := &corev1alpha1.CompositionDefinition{}
		if err := s.d.client.Get(ctx, client.ObjectKey{Namespace: scaleNamespace, Name: def.name}, got); err != nil {
			return false, nil
		}
		s.record(def, got)
		return def.ready, nil
	}, nil
}

// addComposition creates one more composition of def and returns its install check.
func (s *scaler) addComposition(ctx context.Context, def *scaleDef) (func(context.Context) (bool, error), error) {
	j := def.next
	def.next++
	if err := s.createComposition(ctx, def, j, 0); err != nil {
		return nil, err
	}
	def.created++
	def.allInstalled = false
	name := compositionName(def, j)
	return func(ctx context.Context) (bool, error) {
		obj, err := s.dyn.Resource(def.gvr).Namespace(scaleNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return compositionReady(obj), nil
	}, nil
}

// probe applies so.probes objects one after another with apply and times each to its
// check, for at most so.probeWait each; after three time-outs it stops, and the ones it
// did not try count as timed out.
func (s *scaler) probe(ctx context.Context, apply func(context.Context) (func(context.Context) (bool, error), error)) probes {
	p := probes{WaitSeconds: s.so.probeWait.Seconds()}
	for range s.so.probes {
		if ctx.Err() != nil || p.TimedOut >= 3 {
			break
		}
		p.Attempted++
		began := time.Now()
		check, err := apply(ctx)
		if err != nil {
			p.Errors = append(p.Errors, err.Error())
			continue
		}
		waitCtx, cancel := context.WithTimeout(ctx, s.so.probeWait)
		err = pollUntil(waitCtx, 50*time.Millisecond, check)
		cancel()
		if err != nil {
			p.TimedOut++
			continue
		}
		p.Seconds = append(p.Seconds, time.Since(began).Seconds())
	}
	if v := p50(p.Seconds, s.so.probes-len(p.Seconds)); !math.IsInf(v, 1) {
		p.P50 = &v
	}
	return p
}

// p50 is the median of values with missing more values slower than all of them.
func p50(values []float64, missing int) float64 {
	all := slices.Clone(values)
	for range max(missing, 0) {
		all = append(all, math.Inf(1))
	}
	if len(all) == 0 {
		return math.Inf(1)
	}
	slices.Sort(all)
	i := int(0.5*float64(len(all))+0.5) - 1
	return all[min(max(i, 0), len(all)-1)]
}

// pollUntil calls cond every interval until it is true or ctx is done.
func pollUntil(ctx context.Context, interval time.Duration, cond func(context.Context) (bool, error)) error {
	for {
		ok, err := cond(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// sample reads Compositor's RSS and goroutines and the API server's watches, after
// so.settle.
func (s *scaler) sample(ctx context.Context) sample {
	select {
	case <-ctx.Done():
	case <-time.After(s.so.settle):
	}
	// Read even when the budget just ran out: the figures at the stop are the point.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	out := sample{At: time.Since(s.start).Seconds()}
	var errs []string
	var err error
	if out.RSSMiB, err = rssMiB(s.d.pid); err != nil {
		out.RSSMiB = -1
		errs = append(errs, "RSS: "+err.Error())
	}
	if out.Goroutines, err = goroutines(ctx, s.d.pprof); err != nil {
		out.Goroutines = -1
		errs = append(errs, "goroutines: "+err.Error())
	}
	if out.Watches, out.CompositionWatches, err = s.watches(ctx); err != nil {
		out.Watches, out.CompositionWatches = -1, -1
		errs = append(errs, "watches: "+err.Error())
	}
	for _, def := range s.defs {
		if def.ready {
			out.Definitions++
		}
		out.Compositions += def.created
	}
	out.Err = strings.Join(errs, "; ")
	if out.Err != "" {
		logf("sample: %s", out.Err)
	}
	return out
}

// goroutines reads the total of Compositor's goroutine profile.
func goroutines(ctx context.Context, pprofAddr string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+pprofAddr+"/debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	var n int
	if _, err := fmt.Sscanf(line, "goroutine profile: total %d", &n); err != nil {
		return 0, fmt.Errorf("unexpected first line %q", strings.TrimSpace(line))
	}
	return n, nil
}

// longrunningMetric counts the API server's open long-running requests by verb, group
// and resource (it replaced apiserver_longrunning_gauge in Kubernetes 1.23).
const longrunningMetric = "apiserver_longrunning_requests"

// watches sums the API server's open WATCH requests, and those on composition.krateo.io.
func (s *scaler) watches(ctx context.Context) (all, compositions float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	raw, err := s.disc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0, err
	}
	return sumWatches(raw)
}

// sumWatches sums longrunningMetric{verb="WATCH"} in a text exposition.
func sumWatches(raw []byte) (all, compositions float64, err error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return 0, 0, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	family, ok := families[longrunningMetric]
	if !ok {
		return 0, 0, fmt.Errorf("the API server exposes no %s", longrunningMetric)
	}
	for _, m := range family.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["verb"] != "WATCH" {
			continue
		}
		v := m.GetGauge().GetValue()
		all += v
		if labels["group"] == compositionGroup {
			compositions += v
		}
	}
	return all, compositions, nil
}

// alive says whether dev's process still runs.
func alive(d *dev) bool {
	_, err := rssMiB(d.pid)
	return err == nil
}
