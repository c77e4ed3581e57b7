// Command compositor turns Helm charts into Kubernetes APIs and guards them at admission
// time. See `compositor --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/policies/sandbox"
)

func main() {
	// A sandbox worker (serve and dev start them) serves here and exits.
	sandbox.Main()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := app.NewCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		os.Exit(app.ExitCode(err))
	}
}
