package policies

import (
	"slices"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Policies run inside the API server's request path, so they must be fast, repeatable
// and unable to reach anything. Compositor compiles every policy (and runs every policy
// test) against OPA's built-ins minus those OPA itself marks non-deterministic:
//
//   - network: http.send, net.lookup_ip_addr; json.match_schema and json.verify_schema
//     (they may fetch a remote $ref);
//   - clock and randomness: time.now_ns, rand.intn, uuid.rfc4122, and the JWT
//     functions that read the clock or draw random numbers (io.jwt.decode_verify,
//     io.jwt.encode_sign, io.jwt.encode_sign_raw);
//   - the host: opa.runtime.
//
// The pure net.cidr_* functions stay: they do no I/O and a policy about addresses needs
// them. time.parse_*, time.date and friends stay too; only "now" is gone, so an audit
// gives the same answer as admission did. trace and print are allowed (print output is
// discarded by the server and shown by `compositor policy test`). AllowNet is empty, so
// even a built-in that slipped through could reach no host.

var capabilities = sync.OnceValues(func() (*ast.Capabilities, []string) {
	caps := ast.CapabilitiesForThisVersion()
	var kept []*ast.Builtin
	var disabled []string
	for _, b := range caps.Builtins {
		if b.Nondeterministic || b.Name == "net.lookup_ip_addr" || b.Name == "http.send" || b.Name == "opa.runtime" {
			disabled = append(disabled, b.Name)
			continue
		}
		kept = append(kept, b)
	}
	caps.Builtins = kept
	caps.AllowNet = []string{}
	slices.Sort(disabled)
	return caps, slices.Compact(disabled)
})

// Capabilities are the OPA capabilities every policy compiles against. The value is
// shared: do not modify it.
func Capabilities() *ast.Capabilities {
	c, _ := capabilities()
	return c
}

// DisabledBuiltins lists the OPA built-ins a policy may not call, sorted.
func DisabledBuiltins() []string {
	_, d := capabilities()
	return slices.Clone(d)
}

func isDisabledBuiltin(name string) bool {
	_, d := capabilities()
	_, found := slices.BinarySearch(d, name)
	return found
}
