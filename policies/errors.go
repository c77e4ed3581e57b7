package policies

import (
	"errors"
	"fmt"
	"strings"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

var (
	// ErrNoChart: a schema check or a rendered policy needs a chart and none was given.
	ErrNoChart = errors.New("no chart")
	// ErrSchemaCompile: a chart's values.schema.json is not a valid JSON Schema. Helm
	// would refuse the chart too, so the webhook cannot accept its compositions.
	ErrSchemaCompile = errors.New("values.schema.json does not compile")
	// ErrRemoteRef: a chart's schema refers to a schema by URL. Compositor never
	// fetches one while validating (no SSRF, no dependence on a third party at
	// admission time).
	ErrRemoteRef = errors.New("remote $ref not allowed")
	// ErrCompile: a policy's Rego (or its match, action or target) is invalid. The
	// error is a *CompileError with line:col positions.
	ErrCompile = errors.New("policy does not compile")
	// ErrUnknownBuiltin: a built-in policy id that does not exist was asked to be
	// switched off.
	ErrUnknownBuiltin = errors.New("unknown built-in policy")
	// ErrInvalidMetadata: a policy file's METADATA custom section or sidecar YAML is
	// malformed.
	ErrInvalidMetadata = errors.New("invalid policy metadata")
	// ErrRender: the chart does not render with the composition's values.
	ErrRender = errors.New("chart does not render")
)

// renderError is err marked as ErrRender once: an error that already is one (Render's,
// a sandbox worker's) is returned as it is, so that its message says "chart does not
// render" once, whichever way it came.
func renderError(err error) error {
	if err == nil || errors.Is(err, ErrRender) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrRender, err)
}

// CompileError lists why one policy does not compile. It matches ErrCompile.
type CompileError struct {
	// Policy is the policy's name.
	Policy string
	// File is the file name positions refer to (the policy file, or "spec.rego").
	File string
	// Errors are the individual problems with their positions, as written to a
	// CompositionPolicy's status.
	Errors []v1alpha1.CompileError
}

func (e *CompileError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "policy %s does not compile:", e.Policy)
	for _, ce := range e.Errors {
		b.WriteString(" ")
		b.WriteString(FormatCompileError(e.File, ce))
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Is makes errors.Is(err, ErrCompile) true.
func (e *CompileError) Is(target error) bool { return target == ErrCompile }

// FormatCompileError renders one compile error as "file:line:col: message", leaving out
// what is unknown.
func FormatCompileError(file string, ce v1alpha1.CompileError) string {
	var pos []string
	if file != "" {
		pos = append(pos, file)
	}
	if ce.Line > 0 {
		pos = append(pos, fmt.Sprint(ce.Line))
		if ce.Column > 0 {
			pos = append(pos, fmt.Sprint(ce.Column))
		}
	}
	if len(pos) == 0 {
		return ce.Message
	}
	return strings.Join(pos, ":") + ": " + ce.Message
}

// CompileErrorsOf collects the compile errors inside err, also through joined and
// wrapped errors, in order: what a CompositionPolicy's status.errors should hold.
// Errors without positions (no *CompileError inside) give one entry with the message.
func CompileErrorsOf(err error) []v1alpha1.CompileError {
	if err == nil {
		return nil
	}
	var out []v1alpha1.CompileError
	var walk func(error) bool
	walk = func(e error) bool {
		if ce, ok := e.(*CompileError); ok {
			out = append(out, ce.Errors...)
			return true
		}
		found := false
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				found = walk(inner) || found
			}
		case interface{ Unwrap() error }:
			if inner := u.Unwrap(); inner != nil {
				found = walk(inner)
			}
		}
		return found
	}
	if !walk(err) {
		out = append(out, v1alpha1.CompileError{Message: err.Error()})
	}
	return out
}
