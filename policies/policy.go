package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

// Origin says where a policy comes from. Policies of different origins never replace
// one another, even with the same name.
type Origin string

const (
	// OriginBuiltin: the built-in policy library embedded in the binary.
	OriginBuiltin Origin = "builtin"
	// OriginObject: a CompositionPolicy object.
	OriginObject Origin = "object"
	// OriginDir: a file of --policy-dir.
	OriginDir Origin = "dir"
)

// Policy is one Rego policy with what it applies to and what it does, whatever its
// origin.
type Policy struct {
	// Name identifies the policy in messages ("[policy <name>]").
	Name string
	// Origin is where the policy comes from.
	Origin Origin
	// Rego is one Rego v1 module defining deny and/or warn.
	Rego string
	// File is the file name compile errors refer to; "spec.rego" for objects.
	File string
	// Match selects the requests the policy is evaluated on.
	Match v1alpha1.Match
	// Action is deny (the default when empty), warn or dryrun.
	Action v1alpha1.EnforcementAction
	// Target is object (the default when empty) or rendered.
	Target v1alpha1.Target
	// Parameters are exposed as input.parameters.
	Parameters map[string]any
}

// FromCompositionPolicy turns a CompositionPolicy object into a Policy. Positions in
// its compile errors are relative to spec.rego.
func FromCompositionPolicy(p *v1alpha1.CompositionPolicy) (Policy, error) {
	out := Policy{
		Name:   p.Name,
		Origin: OriginObject,
		Rego:   p.Spec.Rego,
		File:   "spec.rego",
		Match:  p.Spec.Match,
		Action: p.Spec.EnforcementAction,
		Target: p.Spec.Target,
	}
	if p.Spec.Parameters != nil && len(p.Spec.Parameters.Raw) > 0 {
		if err := json.Unmarshal(p.Spec.Parameters.Raw, &out.Parameters); err != nil {
			return out, &CompileError{Policy: p.Name, File: out.File, Errors: []v1alpha1.CompileError{{
				Message: fmt.Sprintf("spec.parameters must be an object: %v", err)}}}
		}
	}
	return out, nil
}

// policyMeta is what a policy file says about itself, in the custom section of its
// package's # METADATA block or in its sidecar YAML: the CompositionPolicy spec minus
// the Rego.
type policyMeta struct {
	Match             v1alpha1.Match             `json:"match,omitempty"`
	EnforcementAction v1alpha1.EnforcementAction `json:"enforcementAction,omitempty"`
	Target            v1alpha1.Target            `json:"target,omitempty"`
	Parameters        map[string]any             `json:"parameters,omitempty"`
}

// metaKeys are the keys of a METADATA custom section Compositor reads; other keys
// belong to other tools and are left alone.
var metaKeys = []string{"match", "enforcementAction", "target", "parameters"}

// ParsePolicyFile reads one policy file: src is its Rego, sidecar the content of its
// <name>.yaml (nil when there is none). Match, action, target and parameters come from
// the custom section of a # METADATA block scoped to the package, or from the sidecar;
// giving them in both places is an error. A Rego syntax error is a *CompileError; a
// malformed METADATA or sidecar wraps ErrInvalidMetadata.
func ParsePolicyFile(name, file string, src, sidecar []byte) (Policy, error) {
	p := Policy{Name: name, Origin: OriginDir, Rego: string(src), File: file}
	mod, err := parseModule(file, p.Rego)
	if err != nil {
		return p, &CompileError{Policy: name, File: file, Errors: astErrors(err)}
	}
	custom, err := packageCustom(mod)
	if err != nil {
		return p, fmt.Errorf("%s: %w: %w", file, ErrInvalidMetadata, err)
	}
	var meta policyMeta
	switch {
	case custom != nil && sidecar != nil:
		return p, fmt.Errorf("%s: %w: both a METADATA custom section and a sidecar YAML describe the policy; keep one", file, ErrInvalidMetadata)
	case custom != nil:
		raw, err := json.Marshal(custom)
		if err == nil {
			err = decodeStrict(raw, &meta)
		}
		if err != nil {
			return p, fmt.Errorf("%s: %w: METADATA custom: %w", file, ErrInvalidMetadata, err)
		}
	case sidecar != nil:
		raw, err := yaml.YAMLToJSON(sidecar)
		if err == nil {
			err = decodeStrict(raw, &meta)
		}
		if err != nil {
			return p, fmt.Errorf("%s: %w: sidecar YAML: %w", file, ErrInvalidMetadata, err)
		}
	}
	p.Match, p.Action, p.Target, p.Parameters = meta.Match, meta.EnforcementAction, meta.Target, meta.Parameters
	return p, nil
}

func decodeStrict(raw []byte, into any) error {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// packageCustom returns the Compositor keys of the custom section of the module's
// package-scoped METADATA, or nil when there are none.
func packageCustom(mod *ast.Module) (map[string]any, error) {
	var found map[string]any
	for _, a := range mod.Annotations {
		if a.Scope != "package" && a.Scope != "subpackages" {
			continue
		}
		for _, k := range metaKeys {
			v, ok := a.Custom[k]
			if !ok {
				continue
			}
			if found == nil {
				found = map[string]any{}
			}
			if _, dup := found[k]; dup {
				return nil, errors.New("two METADATA blocks of the package both set " + k)
			}
			found[k] = v
		}
	}
	return found, nil
}

// parseModule parses Rego v1 with its annotations.
func parseModule(file, src string) (*ast.Module, error) {
	mod, err := ast.ParseModuleWithOpts(file, src, ast.ParserOptions{
		RegoVersion:       ast.RegoV1,
		ProcessAnnotation: true,
		Capabilities:      Capabilities(),
	})
	var errs ast.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			placeAtOffset(e.Location, src)
		}
	}
	return mod, err
}

// placeAtOffset gives a parse error that OPA placed at column 0 of a line, which it
// does when the unexpected token is a line break, the line and column of its byte
// offset: right after the last character of the line where something was missing.
func placeAtOffset(loc *ast.Location, src string) {
	if loc == nil || loc.Col > 0 || loc.Offset <= 0 || loc.Offset > len(src) {
		return
	}
	before := src[:loc.Offset]
	loc.Row = strings.Count(before, "\n") + 1
	loc.Col = utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:]) + 1
}

// astErrors turns OPA errors into CompileErrors with positions, naming a disabled
// built-in plainly rather than as an undefined function.
func astErrors(err error) []v1alpha1.CompileError {
	var errs ast.Errors
	if !errors.As(err, &errs) {
		return []v1alpha1.CompileError{{Message: err.Error()}}
	}
	out := make([]v1alpha1.CompileError, 0, len(errs))
	for _, e := range errs {
		ce := v1alpha1.CompileError{Message: e.Code + ": " + e.Message}
		if fn, ok := undefinedFunction(e); ok && isDisabledBuiltin(fn) {
			ce.Message = fmt.Sprintf("%s is not allowed in Compositor policies: network, clock, randomness and runtime built-ins are disabled", fn)
		}
		if e.Location != nil {
			ce.Line, ce.Column = int32(e.Location.Row), int32(e.Location.Col)
		}
		out = append(out, ce)
	}
	return out
}

func undefinedFunction(e *ast.Error) (string, bool) {
	const prefix = "undefined function "
	if len(e.Message) > len(prefix) && e.Message[:len(prefix)] == prefix {
		return e.Message[len(prefix):], true
	}
	return "", false
}
