// Package chartverify decides whether a chart archive is the one its publisher signed,
// before it becomes an API (docs/signing.md).
//
// Two schemes are understood:
//
//   - A Helm provenance file (.prov, what `helm package --sign` writes beside the
//     archive): an OpenPGP clear-signed message over the chart's metadata and the
//     archive's sha256, checked against a keyring the platform team provides.
//   - A cosign signature of an OCI chart (what `cosign sign` attaches to the chart's
//     manifest, as a Sigstore bundle among the manifest's OCI referrers or under the
//     legacy `sha256-<digest>.sig` tag), or a Sigstore bundle of the archive itself
//     (`cosign sign-blob --bundle`, for an archive imported without a registry),
//     checked against a public key, or keyless against a certificate issuer and subject
//     and a trusted root that works offline.
//
// Every check fails closed: a signature that cannot be found, read or checked refuses
// the chart, and the refusal says which of the Reasons it is.
//
// What is checked comes from tenants (keyrings, keys, trusted roots, identities in
// Secrets and definitions) and from registries (signatures anyone who may push can
// attach), and the libraries that read it neither bound their work nor can be
// cancelled: so its size is bounded before they see it (keyring.go, the keyless
// identity, the bundles examined), and a refusal quotes none of a Secret's content.
package chartverify
