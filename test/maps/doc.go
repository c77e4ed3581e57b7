// Package maps holds no code: its tests keep the maps of the tree true to it, so that a
// package added without its row, or a row left behind by a package removed, fails
// `make verify` (and `make test`):
//
//   - docs/architecture.md's package table names every package of the module (with the
//     build tag node, test/node too), and only those;
//   - reconciler/doc.go names every package under reconciler/, and only those;
//   - the README's Layout names every top-level folder that holds a Go package.
package maps
