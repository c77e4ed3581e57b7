package policies

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/tester"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

// DefaultTestTimeout bounds one test rule.
const DefaultTestTimeout = 10 * time.Second

// TestOptions configure RunTests.
type TestOptions struct {
	// Timeout bounds each test (DefaultTestTimeout when zero).
	Timeout time.Duration
	// Run, when set, is a regular expression selecting tests by their full name
	// (data.<package>.test_<name>), as `opa test --run`.
	Run string
	// Strict compiles with `opa check --strict` semantics: unused variables, imports
	// and function arguments, shadowed and deprecated names are errors.
	Strict bool
}

// TestResult is the outcome of one test rule.
type TestResult struct {
	// Package is the test's package, e.g. data.compositor.builtin.no_insecure_tls_test.
	Package string
	// Name is the rule's name, e.g. test_insecure_denied.
	Name string
	// File and Line locate the rule.
	File string
	Line int
	// Pass is true when the rule succeeded.
	Pass bool
	// Skip is true for a rule named todo_..., which is not run.
	Skip bool
	// Duration is how long the rule ran.
	Duration time.Duration
	// Err is set when the rule could not reach a verdict (a runtime error, a timeout).
	Err error
	// Output is what the rule printed with print().
	Output []byte
}

// FullName is data.<package>.<rule>.
func (r TestResult) FullName() string { return r.Package + "." + r.Name }

// String is the line `compositor policy test` prints for the result.
func (r TestResult) String() string {
	status := "FAIL"
	switch {
	case r.Skip:
		status = "SKIP"
	case r.Err != nil:
		status = "ERROR"
	case r.Pass:
		status = "PASS"
	}
	s := fmt.Sprintf("%s: %s (%s)", status, r.FullName(), r.Duration.Round(time.Microsecond))
	if r.Err != nil {
		s += ": " + r.Err.Error()
	}
	return s
}

// RunTests runs the test_ rules of every .rego file under dir (recursively; dir may
// also be one file), as `opa test` does, but under the capabilities the server uses,
// so a test cannot pass with a built-in the server refuses. Only .rego files are read:
// the sidecar YAML of --policy-dir is not data. Results are ordered by file and line.
// A module that does not parse or compile makes the error a join of one *CompileError
// per file.
func RunTests(ctx context.Context, dir string, opts TestOptions) ([]TestResult, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("policy tests: %w", err)
	}
	if !info.IsDir() {
		return RunTestsFS(ctx, os.DirFS(filepath.Dir(dir)), opts, filepath.Base(dir))
	}
	return RunTestsFS(ctx, os.DirFS(dir), opts)
}

// RunTestsFS is RunTests over a file system; with files, only those files are read
// (paths in fsys), else every .rego file of fsys.
func RunTestsFS(ctx context.Context, fsys fs.FS, opts TestOptions, files ...string) ([]TestResult, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTestTimeout
	}
	if len(files) == 0 {
		err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && path.Ext(p) == ".rego" {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("policy tests: %w", err)
		}
	}
	modules := map[string]*ast.Module{}
	var errs []error
	for _, f := range files {
		src, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("policy tests: %w", err)
		}
		mod, err := parseModule(f, string(src))
		if err != nil {
			errs = append(errs, &CompileError{Policy: f, File: f, Errors: astErrors(err)})
			continue
		}
		modules[f] = mod
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	compiler := ast.NewCompiler().
		WithCapabilities(Capabilities()).
		WithEnablePrintStatements(true).
		WithStrict(opts.Strict)
	runner := tester.NewRunner().
		SetCompiler(compiler).
		CapturePrintOutput(true).
		SetTimeout(opts.Timeout).
		Filter(opts.Run)
	ch, err := runner.Run(ctx, modules)
	if err != nil {
		return nil, compileErrorsByFile(err)
	}
	var out []TestResult
	for r := range ch {
		tr := TestResult{Package: r.Package, Name: r.Name, Pass: r.Pass(), Skip: r.Skip, Duration: r.Duration, Err: r.Error, Output: r.Output}
		if r.Location != nil {
			tr.File, tr.Line = r.Location.File, r.Location.Row
		}
		out = append(out, tr)
	}
	slices.SortFunc(out, func(a, b TestResult) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

// compileErrorsByFile splits OPA compile errors into one *CompileError per file.
func compileErrorsByFile(err error) error {
	var aerrs ast.Errors
	if !errors.As(err, &aerrs) {
		return fmt.Errorf("policy tests: %w", err)
	}
	byFile := map[string][]v1alpha1.CompileError{}
	for _, e := range aerrs {
		file := ""
		if e.Location != nil {
			file = e.Location.File
		}
		byFile[file] = append(byFile[file], astErrors(ast.Errors{e})...)
	}
	files := make([]string, 0, len(byFile))
	for f := range byFile {
		files = append(files, f)
	}
	slices.Sort(files)
	errs := make([]error, 0, len(files))
	for _, f := range files {
		errs = append(errs, &CompileError{Policy: f, File: f, Errors: byFile[f]})
	}
	return errors.Join(errs...)
}
