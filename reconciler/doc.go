// Package reconciler holds no code: it maps the rooms of Compositor's controllers,
// which apply what generators/ produces and install one Helm release per composition.
//
//   - definition: the CompositionDefinition reconciler. It fetches the chart, serves
//     its version in the generated CRD, generates the RBAC and controller Deployments,
//     and retires the versions a definition no longer serves.
//   - composition: the composition controller. It installs, upgrades and uninstalls
//     one Helm release per composition through the install gate and a transport
//     confined to the composition's namespace; NewManager runs it alone, in a
//     generated Deployment.
//   - kinds: the one runtime that serves every generated kind in Compositor's process,
//     running their composition controllers and release bindings.
//   - binding: the release RoleBinding of a served version in the namespaces of its
//     compositions.
//   - charts: a definition's chart, fetched with its credentials, pinned to its
//     digest and kept in memory.
//   - audit: the periodic evaluation of existing objects against the policies in force.
//   - policy: the CompositionPolicy reconciler, which keeps the policy engine current.
package reconciler
