// Command bench measures Compositor's admission path as users meet it: its webhooks
// over HTTPS, served by a running `compositor dev` with a chart and five
// CompositionPolicies, at fixed concurrency, each workload first against a do-nothing
// webhook on the same server stack (the floor) in the same run, so that every figure
// is also a ratio to what TLS, HTTP and decoding alone cost on this machine. Then the
// same writes through the API server with Compositor's webhooks and without them, and
// /validate again with many definitions present.
//
// With -scale it measures the scale curve instead (scalecurve.go): definitions of
// distinct generated charts and their compositions, in steps, to Ready and installed.
// With -rollout N it measures a rollout's plan (rollout.go): N paused compositions,
// the definition moved to a new chart version, the time to its plan and admission
// meanwhile. With -constraints DIR it measures composition /validate before and after a
// library of Gatekeeper ConstraintTemplates and Constraints is applied (constraints.go).
//
//	make bench                      # builds, runs everything, writes BENCHMARKS.md
//	make bench-scale                # the scale curve, into its section of BENCHMARKS.md
//	make bench-rollout              # the rollout plan, into its section of BENCHMARKS.md
//	make bench-constraints          # Gatekeeper constraints, into their section of BENCHMARKS.md
//	go run ./test/bench -h          # the knobs
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	compositor      string
	controlPlaneDir string
	policyDir       string
	constraintDir   string
	renderedDir     string
	out             string
	jsonOut         string
	profileDir      string
	duration        time.Duration
	warmup          time.Duration
	e2eCreates      int
	e2eConcurrency  int
	definitions     int
	scaleWait       time.Duration
	peerJSON        string
	only            *regexp.Regexp
	scale           bool
	bounds          bool
}

func main() {
	if len(os.Args) == 4 && os.Args[1] == floorCommand {
		var port int
		if _, err := fmt.Sscan(os.Args[3], &port); err != nil {
			fmt.Fprintln(os.Stderr, "floor: bad port:", err)
			os.Exit(2)
		}
		if err := serveFloor(os.Args[2], port); err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.compositor, "compositor", "bin/compositor", "The compositor binary to measure")
	flag.StringVar(&o.controlPlaneDir, "control-plane-dir", "bin/k8s", "Directory with etcd and kube-apiserver (make control-plane)")
	flag.StringVar(&o.policyDir, "policies", "test/bench/policies", "Directory of the policy files applied as CompositionPolicies")
	flag.StringVar(&o.renderedDir, "rendered-policies", "test/bench/renderedpolicies", "With -constraints, also measure with this directory's CompositionPolicies of target rendered (the five policies rewritten over the rendered objects) added to -policies, the baseline a library that judges rendered objects is compared with too; empty skips it")
	flag.StringVar(&o.constraintDir, "constraints", "", "Measure composition /validate before and after applying this directory's Gatekeeper ConstraintTemplates and Constraints (make bench-constraints) instead; -peer takes the peer run's -constraints JSON; -out gets only its marked section")
	flag.StringVar(&o.out, "out", "", "Write the report (Markdown) here; empty prints it")
	flag.StringVar(&o.jsonOut, "json", "", "Also write every figure as JSON here")
	rerender := flag.String("scale-from-json", "", "Render the scale section again from this -scale run's -json output, into -out, without measuring")
	constraintsFromJSON := flag.String("constraints-from-json", "", "Render the constraints section again from this -constraints run's -json output (and the profiles of -profile-dir), into -out, without measuring")
	flag.StringVar(&o.profileDir, "profile-dir", "", "Save a CPU profile of Compositor under load here")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "How long each load run is measured")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "Unmeasured load before each run")
	flag.IntVar(&o.e2eCreates, "e2e-creates", 400, "Compositions created through the API server per end-to-end run (0 skips it)")
	flag.IntVar(&o.e2eConcurrency, "e2e-concurrency", 8, "Concurrent creates through the API server")
	flag.BoolVar(&o.bounds, "bounds", true, "Also measure the composition /validate workloads against a compositor dev with --unbounded-admission (issue #26)")
	flag.IntVar(&o.definitions, "definitions", 1000, "Definitions present for the last /validate run (0 skips it)")
	flag.DurationVar(&o.scaleWait, "scale-wait", 5*time.Minute, "How long to wait for those definitions to be Ready")
	flag.StringVar(&o.peerJSON, "peer", "", "JSON output of the Gatekeeper peer run (test/tools/gatekeeper -json) to include")
	floodCallers := flag.Int("flood", 0, "Measure creates through the API server quiet and while this many callers without a client certificate hammer the webhook port instead; -out gets only its marked section")
	only := flag.String("only", "", "Run only the admission workloads whose name matches this regular expression")
	var so scaleOptions
	flag.BoolVar(&o.scale, "scale", false, "Run the scale curve (make bench-scale) instead: definitions and compositions in steps; -out gets only its marked section")
	steps := flag.String("steps", "10,100,1000", "-scale: the numbers of definitions, in rising order")
	flag.IntVar(&so.perDefinition, "per-definition", 10, "-scale: compositions per definition")
	flag.IntVar(&so.probes, "probes", 10, "-scale: definitions, then compositions, applied one at a time per step for the new-object p50s")
	flag.DurationVar(&so.budget, "scale-budget", 40*time.Minute, "-scale: the whole curve stops after this, reporting what it reached")
	flag.DurationVar(&so.readyWait, "ready-wait", 10*time.Minute, "-scale: the most a step waits for its definitions to be Ready")
	flag.DurationVar(&so.installWait, "install-wait", 15*time.Minute, "-scale: the most a step waits for its compositions to be installed")
	flag.DurationVar(&so.probeWait, "probe-wait", time.Minute, "-scale: the most one new definition or composition is waited for")
	flag.IntVar(&so.reconcileRate, "max-reconcile-rate", 100, "-scale, -rollout: passed to compositor dev as --max-reconcile-rate (0 leaves its default, 3/s)")
	flag.DurationVar(&so.settle, "settle", 5*time.Second, "-scale: the pause before each reading of RSS, goroutines and watches")
	devArgs := flag.String("dev-args", "", "-scale, -rollout: more flags for compositor dev, space-separated")
	var ro rolloutOptions
	flag.IntVar(&ro.compositions, "rollout", 0, "Measure a rollout's plan (make bench-rollout) instead, with this many compositions; -out gets only its marked section")
	flag.IntVar(&ro.namespaces, "rollout-namespaces", 4, "-rollout: namespaces the compositions are spread over")
	flag.IntVar(&ro.concurrency, "rollout-concurrency", 4, "-rollout: clients sending dry-run creates through the API server")
	flag.Float64Var(&ro.rate, "rollout-rate", 20, "-rollout: dry-run creates per second, on a fixed schedule (0: each client writes again at once, which saturates two cores)")
	flag.DurationVar(&ro.baseline, "rollout-baseline", 15*time.Second, "-rollout: how long admission is measured before the apply")
	flag.DurationVar(&ro.after, "rollout-after", 5*time.Second, "-rollout: how long admission is measured after the plan")
	flag.DurationVar(&ro.wait, "rollout-wait", 5*time.Minute, "-rollout: the most the compositions, then the plan, are waited for")
	flag.DurationVar(&ro.poll, "rollout-poll", 50*time.Millisecond, "-rollout: how often the definition is read for its status.rollout")
	flag.Parse()
	if *only != "" {
		var err error
		if o.only, err = regexp.Compile(*only); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -only:", err)
			os.Exit(2)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *rerender != "" {
		if err := rerenderScale(*rerender, o.out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *constraintsFromJSON != "" {
		if err := rerenderConstraints(*constraintsFromJSON, o); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *floodCallers > 0 {
		if err := runFlood(ctx, o, *floodCallers); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if o.constraintDir != "" {
		if err := runConstraints(ctx, o); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if ro.compositions > 0 {
		ro.reconcileRate = so.reconcileRate
		ro.devArgs = strings.Fields(*devArgs)
		if err := runRollout(ctx, o, ro); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if o.scale {
		var err error
		if so.steps, err = parseSteps(*steps); err != nil {
			fmt.Fprintln(os.Stderr, "bench: -steps:", err)
			os.Exit(2)
		}
		so.devArgs = strings.Fields(*devArgs)
		if err := runScale(ctx, o, so); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := runBench(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func runBench(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "compositor-bench-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	rep := &report{Started: time.Now(), Options: o}
	if err := rep.describeMachine(o.compositor, o.controlPlaneDir); err != nil {
		return err
	}

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
	w, err := setUp(ctx, d, o.policyDir)
	if err != nil {
		return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
	}

	if err := measureAdmission(ctx, o, rep, fl.endpoint, d, w); err != nil {
		return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
	}
	if o.bounds && (o.only == nil || o.only.MatchString("composition create /validate") || o.only.MatchString("composition update /validate")) {
		if err := measureBounds(ctx, o, rep, d, dir); err != nil {
			return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
		}
	}
	if o.e2eCreates > 0 {
		if err := measureThroughAPIServer(ctx, o, rep, d, w); err != nil {
			return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
		}
	}
	if o.definitions > 0 {
		if err := measureManyDefinitions(ctx, o, rep, d, w, dir); err != nil {
			return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
		}
	}
	if o.peerJSON != "" {
		if err := rep.readPeer(o.peerJSON); err != nil {
			return err
		}
	}
	rep.Finished = time.Now()
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	text := rep.markdown()
	if o.out == "" {
		fmt.Print(text)
		return nil
	}
	// The scale curve's, the rollout's and the constraints' sections (make bench-scale,
	// bench-rollout, bench-constraints) stay.
	old, err := os.ReadFile(o.out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	text = carryRolloutSection(string(old), carryScaleSection(string(old), text))
	return os.WriteFile(o.out, []byte(carryFloodSection(string(old), carryConstraintsSection(string(old), text))), 0o644)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// parseSteps reads a comma-separated rising list of positive numbers.
func parseSteps(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("%d does not rise above %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}
