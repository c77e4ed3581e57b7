package policies

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/compositor-dev/compositor/policies/builtin"
)

// BuiltinIDs lists the ids of the built-in policies, sorted: chart-url-scheme,
// credentials-namespace, exact-chart-version, no-insecure-tls.
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

// Builtins returns the built-in policies except the disabled ones. Naming an id that
// does not exist is an error wrapping ErrUnknownBuiltin, so a mistyped flag is caught.
func Builtins(disabled ...string) ([]Policy, error) {
	ids, err := builtinIDs()
	if err != nil {
		return nil, err
	}
	for _, d := range disabled {
		if !slices.Contains(ids, d) {
			return nil, fmt.Errorf("%w: %q (have %s)", ErrUnknownBuiltin, d, strings.Join(ids, ", "))
		}
	}
	var out []Policy
	for _, id := range ids {
		if slices.Contains(disabled, id) {
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
