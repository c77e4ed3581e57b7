package app

import (
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/sandbox"
)

// newSandboxWorkerCommand is the hidden `compositor sandbox-worker`: serve and dev
// start it (through sandbox.Main in main, or this command) to render charts and check
// values in a process they can kill at the deadline.
func newSandboxWorkerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    sandbox.Subcommand,
		Short:  "Render charts and check values for Compositor's admission (started by serve and dev)",
		Hidden: true,
		Args:   cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			os.Exit(sandbox.RunWorker())
		},
	}
}

// setupSandbox is the Renderer the process's judges and installs render with: in
// worker processes, so that work past its deadline stops, each render within
// maxRenderedBytes (the default when 0). When this executable cannot serve as a worker
// (a test binary without sandbox.Main), renders stay in-process.
func setupSandbox(maxRenderedBytes int) (*policies.Renderer, error) {
	rendersOnce.Do(func() { ctrlmetrics.Registry.MustRegister(policies.RendersTotal) })
	renderer := &policies.Renderer{MaxRenderedBytes: maxRenderedBytes}
	if !sandbox.SelfServes() {
		ctrl.Log.WithName("sandbox").Info("renders and schema checks run in-process: this executable cannot start sandbox workers (no sandbox.Main)")
		return renderer, nil
	}
	pool, err := sandbox.Shared()
	if err != nil {
		return nil, err
	}
	renderer.Sandbox = pool
	registerSandboxMetrics(pool)
	return renderer, nil
}

var sandboxMetricsOnce, rendersOnce sync.Once

// registerSandboxMetrics shows the workers on /metrics: how many started and were
// killed (at a deadline, or after dying), and how many run.
func registerSandboxMetrics(pool *sandbox.Pool) {
	sandboxMetricsOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "compositor_sandbox_workers_started_total",
				Help: "Worker processes started to render charts and check values (one per request stopped at its deadline, plus the pool)",
			}, func() float64 { return float64(pool.Stats().Started) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "compositor_sandbox_workers_killed_total",
				Help: "Worker processes killed: their request passed its deadline, or they died or answered garbage",
			}, func() float64 { return float64(pool.Stats().Killed) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "compositor_sandbox_workers",
				Help: "Worker processes running now",
			}, func() float64 { return float64(pool.Stats().Live) }),
		)
	})
}
