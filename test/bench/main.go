// Command bench measures Compositor's admission path as users meet it: its webhooks
// over HTTPS, served by a running `compositor dev` with a chart and five
// CompositionPolicies, at fixed concurrency, each workload first against a do-nothing
// webhook on the same server stack (the floor) in the same run, so that every figure
// is also a ratio to what TLS, HTTP and decoding alone cost on this machine. Then the
// same writes through the API server with Compositor's webhooks and without them, and
// /validate again with many definitions present.
//
//	make bench                      # builds, runs everything, writes BENCHMARKS.md
//	go run ./test/bench -h          # the knobs
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"
)

type options struct {
	compositor      string
	controlPlaneDir string
	policyDir       string
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
	flag.StringVar(&o.out, "out", "", "Write the report (Markdown) here; empty prints it")
	flag.StringVar(&o.jsonOut, "json", "", "Also write every figure as JSON here")
	flag.StringVar(&o.profileDir, "profile-dir", "", "Save a CPU profile of Compositor under load here")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "How long each load run is measured")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "Unmeasured load before each run")
	flag.IntVar(&o.e2eCreates, "e2e-creates", 400, "Compositions created through the API server per end-to-end run (0 skips it)")
	flag.IntVar(&o.e2eConcurrency, "e2e-concurrency", 8, "Concurrent creates through the API server")
	flag.IntVar(&o.definitions, "definitions", 1000, "Definitions present for the last /validate run (0 skips it)")
	flag.DurationVar(&o.scaleWait, "scale-wait", 5*time.Minute, "How long to wait for those definitions to be Ready")
	flag.StringVar(&o.peerJSON, "peer", "", "JSON output of the Gatekeeper peer run (test/tools/gatekeeper -json) to include")
	only := flag.String("only", "", "Run only the admission workloads whose name matches this regular expression")
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
	return os.WriteFile(o.out, []byte(text), 0o644)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
