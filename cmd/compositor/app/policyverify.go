package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// ErrSuitesFailed means a Gatekeeper suite case failed or a suite could not be read.
var ErrSuitesFailed = errors.New("suites failed")

// PolicyVerifyOptions configure `compositor policy verify`.
type PolicyVerifyOptions struct {
	// Paths are Suite files, or directories searched recursively for them.
	Paths []string
	// Verbose prints every case, not only those that did not pass.
	Verbose bool
}

func newPolicyVerifyCommand() *cobra.Command {
	opts := &PolicyVerifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify SUITE...",
		Short: "Run Gatekeeper test suites, as gator verify does",
		Long: `verify runs Gatekeeper suite files (test.gatekeeper.sh/v1alpha1 Suite) with the engine
that enforces ConstraintTemplates and Constraints in Compositor: for each test its
template and constraint, for each case its object (or AdmissionReview) with its
inventory, and every assertion (violations: yes, no or a count; message: a regular
expression), as 'gator verify' does.

A directory argument is searched recursively for Suite files. Cases Compositor cannot
run as written are reported as unsupported with the reason: tests with an expansion
file, templates with only CEL (K8sNativeValidation) code.

It prints each suite with its counts, each case that did not pass with why, and a
summary. The exit code is 1 when a case fails or a suite cannot be read (a SUITE
that does not exist too), 2 when the command line is wrong (no SUITE, an unknown flag).`,
		Example: `  compositor policy verify library/general/requiredlabels/suite.yaml
  compositor policy verify ../gatekeeper-library/library`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("missing argument SUITE: a Suite file or a directory of them")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Paths = args
			return RunPolicyVerify(cmd.Context(), cmd.OutOrStdout(), opts)
		},
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	cmd.Flags().BoolVarP(&opts.Verbose, "verbose", "v", false, "Print every case, passed ones too")
	return cmd
}

// RunPolicyVerify runs the suites of opts.Paths and prints their results to out.
func RunPolicyVerify(ctx context.Context, out io.Writer, opts *PolicyVerifyOptions) error {
	files, err := suiteFiles(opts.Paths)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%w: no Suite file under %v", ErrSuitesFailed, opts.Paths)
	}
	total := map[gatekeeper.Outcome]int{}
	broken := 0
	for _, f := range files {
		r := gatekeeper.Verify(ctx, f, gatekeeper.Options{Capabilities: policies.Capabilities()})
		if r.Err != nil {
			broken++
			fmt.Fprintf(out, "ERROR %s: %v\n", f, r.Err)
			continue
		}
		status := "ok   "
		switch {
		case r.Count(gatekeeper.Failed) > 0:
			status = "FAIL "
		case r.Count(gatekeeper.Passed) == 0 && r.Count(gatekeeper.Unsupported) > 0:
			status = "UNSUP"
		}
		fmt.Fprintf(out, "%s %s  passed %d, failed %d, unsupported %d, skipped %d\n", status, f,
			r.Count(gatekeeper.Passed), r.Count(gatekeeper.Failed), r.Count(gatekeeper.Unsupported), r.Count(gatekeeper.Skipped))
		for _, c := range r.Cases {
			total[c.Outcome]++
			if c.Outcome == gatekeeper.Passed && !opts.Verbose {
				continue
			}
			name := c.Test
			if c.Case != "" {
				name += "/" + c.Case
			}
			line := fmt.Sprintf("    %-11s %s", c.Outcome, name)
			if c.Reason != "" {
				line += ": " + c.Reason
			}
			fmt.Fprintln(out, line)
		}
	}
	fmt.Fprintf(out, "%d suites: %d cases passed, %d failed, %d unsupported, %d skipped", len(files),
		total[gatekeeper.Passed], total[gatekeeper.Failed], total[gatekeeper.Unsupported], total[gatekeeper.Skipped])
	if broken > 0 {
		fmt.Fprintf(out, "; %d suites could not be read", broken)
	}
	fmt.Fprintln(out)
	if broken > 0 || total[gatekeeper.Failed] > 0 {
		return ErrSuitesFailed
	}
	return nil
}

// suiteFiles expands the arguments: a file is taken as given, a directory is searched
// for YAML files that are Suites. A path that cannot be read, missing or not, is a suite
// that cannot be read (ErrSuitesFailed, exit 1), as the help says, not a wrong command
// line: `validate -f` and `policy test` treat their missing files alike.
func suiteFiles(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			var pathErr *fs.PathError
			if errors.As(err, &pathErr) {
				err = pathErr.Err // the path is named already
			}
			return nil, fmt.Errorf("%w: SUITE %s cannot be read: %w", ErrSuitesFailed, p, err)
		}
		if !info.IsDir() {
			out = append(out, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if gatekeeper.IsSuite(data) {
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%w: searching %s for suites: %w", ErrSuitesFailed, p, err)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
