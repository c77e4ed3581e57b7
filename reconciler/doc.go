// Package reconciler holds no code: it maps the rooms of Compositor's controllers,
// which apply what generators/ produces and install one Helm release per composition.
// test/maps checks that every package below is named here, and nothing else.
//
//   - definition: the CompositionDefinition reconciler. It fetches the chart (through
//     chartstore), serves its version in the generated CRD, generates the RBAC and
//     controller Deployments, and retires the versions a definition no longer serves;
//     its ConversionKeeper keeps the generated CRDs' conversion webhooks pointed at
//     Compositor.
//   - composition: the composition controller. It installs, upgrades and uninstalls
//     one Helm release per composition through the install gate and a transport
//     confined to the composition's namespace; NewManager runs it alone, in a
//     generated Deployment.
//   - kinds: the one runtime that serves every generated kind in Compositor's process,
//     running their composition controllers and release bindings.
//   - binding: the release RoleBinding of a served version in the namespaces of its
//     compositions.
//   - audit: the periodic evaluation of existing objects against the policies in force.
//   - policy: the CompositionPolicy reconciler, which keeps the policy engine current.
//   - constraints: the Gatekeeper ConstraintTemplate and Constraint reconciler, which
//     keeps the policy engine's constraints current.
//   - internal/ssa: server-side apply of the objects Compositor owns, as one field
//     manager, for every room above.
//
// A definition's chart (fetched with its credentials, pinned to its digest and kept in
// memory) is package chartstore, outside this tree.
package reconciler
