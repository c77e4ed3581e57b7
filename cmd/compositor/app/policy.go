package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/compositor-dev/compositor/policies"
)

// ErrTestsFailed means at least one policy test failed or could not run.
var ErrTestsFailed = errors.New("policy tests failed")

// PolicyTestOptions configure `compositor policy test`.
type PolicyTestOptions struct {
	// Dir holds the .rego files (searched recursively), or is one .rego file.
	Dir string
	// Run selects tests by a regular expression on data.<package>.<rule>.
	Run string
	// Verbose prints what every test printed, not only the failing ones.
	Verbose bool
	// Strict compiles with `opa check --strict` semantics.
	Strict bool
	// Timeout bounds each test.
	Timeout time.Duration
}

func newPolicyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with Rego policies",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newPolicyTestCommand(), newPolicyVerifyCommand())
	return cmd
}

func newPolicyTestCommand() *cobra.Command {
	opts := &PolicyTestOptions{Timeout: policies.DefaultTestTimeout}
	cmd := &cobra.Command{
		Use:   "test DIR",
		Short: "Run the test_ rules of Rego policies, like opa test",
		Long: `test runs every test_ rule of the .rego files under DIR (or of one .rego file), as
'opa test' does, but compiled with the capabilities the server gives policies: a test
cannot pass by calling a built-in (http.send, net.*, time.now_ns, ...) that Compositor
refuses at run time.

It prints one line per test (PASS, FAIL, ERROR or SKIP, the rule, its duration),
what failing tests printed, and a summary. The exit code is 1 when any test fails.`,
		Example: `  compositor policy test policies/
  compositor policy test policies/ --run 'registries' -v`,
		Args: func(_ *cobra.Command, args []string) error {
			switch len(args) {
			case 0:
				return usageErrorf("missing argument DIR: the directory (or .rego file) with the tests")
			case 1:
				return nil
			default:
				return usageErrorf("one DIR at a time, got %d arguments", len(args))
			}
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Dir = args[0]
			return RunPolicyTest(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts)
		},
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	fs := cmd.Flags()
	fs.StringVar(&opts.Run, "run", opts.Run, "Run only the tests whose data.<package>.<rule> matches this regular expression")
	fs.BoolVarP(&opts.Verbose, "verbose", "v", opts.Verbose, "Print what every test printed, and where every test is")
	fs.BoolVar(&opts.Strict, "strict", opts.Strict, "Compile with opa check --strict semantics")
	fs.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "Deadline of each test")
	return cmd
}

// RunPolicyTest runs the tests of opts.Dir and prints one line per test to out. The
// error matches ErrTestsFailed when a test fails or errs, or when none ran.
func RunPolicyTest(ctx context.Context, out, _ io.Writer, opts *PolicyTestOptions) error {
	if opts.Timeout <= 0 {
		return usageErrorf("--timeout must be positive, got %s", opts.Timeout)
	}
	results, err := policies.RunTests(ctx, opts.Dir, policies.TestOptions{Run: opts.Run, Strict: opts.Strict, Timeout: opts.Timeout})
	if err != nil {
		return err
	}
	// Locations are relative to the directory tests were read from.
	base := opts.Dir
	if info, err := os.Stat(opts.Dir); err == nil && !info.IsDir() {
		base = filepath.Dir(opts.Dir)
	}
	var passed, failed, skipped int
	for _, r := range results {
		fmt.Fprintln(out, r)
		ok := r.Pass && r.Err == nil
		switch {
		case r.Skip:
			skipped++
		case ok:
			passed++
		default:
			failed++
		}
		if !r.Skip && (!ok || opts.Verbose) {
			if r.File != "" {
				fmt.Fprintf(out, "  at %s:%d\n", filepath.Join(base, r.File), r.Line)
			}
			for line := range bytes.Lines(r.Output) {
				fmt.Fprintf(out, "  %s", line)
				if !bytes.HasSuffix(line, []byte("\n")) {
					fmt.Fprintln(out)
				}
			}
		}
	}
	summary := fmt.Sprintf("%d passed, %d failed", passed, failed)
	if skipped > 0 {
		summary += fmt.Sprintf(", %d skipped", skipped)
	}
	fmt.Fprintln(out, summary)
	switch {
	case failed > 0:
		return fmt.Errorf("%w: %d of %d", ErrTestsFailed, failed, len(results))
	case passed == 0:
		return fmt.Errorf("%w: no test ran in %s", ErrTestsFailed, opts.Dir)
	}
	return nil
}
