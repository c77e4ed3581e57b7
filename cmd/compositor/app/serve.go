package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/compositor-dev/compositor/api"
)

// leaderElectionID names the lease that replicas of Compositor compete for.
const leaderElectionID = "compositor.compositor.dev"

func newServeCommand() *cobra.Command {
	opts := NewServeOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the webhooks and the CompositionDefinition reconciler",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.complete(cmd.Flags()); err != nil {
				return err
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("loading kubeconfig: %w", err)
			}
			return RunServe(cmd.Context(), cfg, opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	return cmd
}

// RunServe starts the manager against cfg and blocks until ctx is done.
func RunServe(ctx context.Context, cfg *rest.Config, opts *ServeOptions) error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(opts.Debug)))

	scheme, err := api.NewScheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cache.Options{SyncPeriod: &opts.Sync},
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:  opts.HealthProbeAddr,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		// Stepping down at once on shutdown lets the next replica take over without
		// waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
