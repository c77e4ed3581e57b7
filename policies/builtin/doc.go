// Package builtin holds Compositor's built-in policies: Rego v1 files embedded in the
// binary, each beside its _test.rego. A policy's id is its file name without .rego;
// its match, action and target are in the custom section of its package's # METADATA
// block, as for any file of --policy-dir. Package policies loads them (Builtins) and
// tests them with OPA's tester under the server's capabilities, in strict mode.
package builtin

import "embed"

// FS holds every built-in policy and its test.
//
//go:embed *.rego
var FS embed.FS
