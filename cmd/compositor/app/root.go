// Package app holds the compositor command line: one cobra command per subcommand,
// each parsing its flags into an options struct and handing it to a Run function.
package app

import (
	"github.com/spf13/cobra"
)

// NewCommand returns the root `compositor` command with every subcommand.
func NewCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "compositor",
		Short: "Turn Helm charts into Kubernetes APIs and guard them at admission time",
		Long: `Compositor turns Helm charts into Kubernetes APIs. A CompositionDefinition points at a
chart; Compositor generates a CRD from the chart's values.schema.json, RBAC and a
controller that installs one Helm release per composition, and guards every write with
mutating, validating and conversion webhooks.`,
		SilenceUsage: true,
	}
	root.AddCommand(newServeCommand(), newControllerCommand(), newDevCommand(), newPolicyCommand(), newValidateCommand(), newCRDCommand(), newLintCommand(), newConvertCommand(), newPlanCommand(), newRollbackCommand(), newImportCommand(), newSandboxWorkerCommand())
	return root
}
