package app

import (
	"os"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

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

// setupSandbox makes every render for policies and every schema check of the process
// run in worker processes, so that work past its deadline stops; when this executable
// cannot serve as a worker (a test binary without sandbox.Main), they stay in-process.
func setupSandbox() error {
	if !sandbox.SelfServes() {
		ctrl.Log.WithName("sandbox").Info("renders and schema checks run in-process: this executable cannot start sandbox workers (no sandbox.Main)")
		return nil
	}
	pool, err := sandbox.Shared()
	if err != nil {
		return err
	}
	policies.SetSandbox(pool)
	return nil
}
