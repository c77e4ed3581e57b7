package policies

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/compositor-dev/compositor/policies/builtin"
)

// BuiltinIDs lists the ids of the built-in policies, sorted: chart-url-scheme,
// credentials-namespace, exact-chart-version, no-insecure-tls and the opt-in
// require-chart-verification.
func BuiltinIDs() []string {
	ids, _ := builtinIDs()
	return ids
}

func builtinIDs() ([]string, error) {
	files, err := fs.Glob(builtin.FS, "*.rego")
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.rego") {
			ids = append(ids, strings.TrimSuffix(f, ".rego"))
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// OptInBuiltinIDs lists the built-in policies that are off unless switched on
// (Options.EnabledBuiltins, --enable-builtin-policy): rules a platform chooses, such as
// require-chart-verification.
func OptInBuiltinIDs() []string { return []string{"require-chart-verification"} }

// Builtins returns the built-in policies except the disabled ones and the opt-in ones
// (OptInBuiltinIDs). Naming an id that does not exist is an error wrapping
// ErrUnknownBuiltin, so a mistyped flag is caught.
func Builtins(disabled ...string) ([]Policy, error) {
	return SelectBuiltins(nil, disabled)
}

// SelectBuiltins returns the built-in policies that are on: the default ones not in
// disabled, and the opt-in ones in enabled (disabled wins). An unknown id in either
// list, or an id in enabled that is on by default, is an error wrapping
// ErrUnknownBuiltin.
func SelectBuiltins(enabled, disabled []string) ([]Policy, error) {
	ids, err := builtinIDs()
	if err != nil {
		return nil, err
	}
	for _, d := range disabled {
		if !slices.Contains(ids, d) {
			return nil, fmt.Errorf("%w: %q (have %s)", ErrUnknownBuiltin, d, strings.Join(ids, ", "))
		}
	}
	optIn := OptInBuiltinIDs()
	for _, e := range enabled {
		if !slices.Contains(optIn, e) {
			return nil, fmt.Errorf("%w: %q is not a built-in policy to switch on (those off by default are %s)", ErrUnknownBuiltin, e, strings.Join(optIn, ", "))
		}
	}
	var out []Policy
	for _, id := range ids {
		if slices.Contains(disabled, id) || (slices.Contains(optIn, id) && !slices.Contains(enabled, id)) {
			continue
		}
		src, err := fs.ReadFile(builtin.FS, id+".rego")
		if err != nil {
			return nil, err
		}
		p, err := ParsePolicyFile(id, id+".rego", src, nil)
		if err != nil {
			return nil, fmt.Errorf("built-in policy %s: %w", id, err)
		}
		p.Origin = OriginBuiltin
		out = append(out, p)
	}
	return out, nil
}
