// Package chartfetch fetches Helm charts for CompositionDefinitions
// (docs/architecture.md#chart-sources, docs/tenancy.md#chart-sources-and-the-network):
// from a Helm repository (index.yaml), from an OCI registry through Helm's registry
// client, or from a direct .tgz URL. Archives land in a content-addressed on-disk cache
// keyed by their sha256 digest, so a resync of the same source with the same
// credentials does not download them again (see "Cache and credentials" for who else
// the cache answers, and for restarts).
//
// A chart URL comes from a user's manifest, so everything here treats it as hostile.
//
// # Network policy (no SSRF)
//
//   - Schemes: https and oci anywhere; plain http only to loopback (127.0.0.0/8, ::1,
//     localhost); an OCI registry on loopback may answer plain HTTP. Anything else
//     (file, ftp, gopher, ...) fails with ErrUnsupportedURL before any connection.
//     Credentials inside a URL (user:pass@host) are refused; they belong in
//     spec.chart.credentials.
//   - Every connection, including redirects, token endpoints named by a registry and
//     archive URLs named by an index, is judged by the dial guard (Options.DialGuard,
//     NewAddressGuard(Options.AllowNetworks) by default) three times over: on the URL's
//     host when it is an IP literal, on every address the host name resolves to
//     (through Options.Resolver) before that address is dialled, and in the dialer's
//     Control hook on the socket's very address, so DNS rebinding gains nothing. It
//     always refuses link-local addresses (169.254.0.0/16 with the cloud metadata
//     endpoint, fe80::/10), the AWS IPv6 metadata address, unspecified, "this network"
//     (0.0.0.0/8), broadcast and multicast addresses. It refuses by default loopback,
//     RFC 1918, CGNAT (100.64.0.0/10), unique-local (fc00::/7) and the other
//     special-purpose ranges, which an allow-list opens (--allow-chart-network for
//     on-premises registries, LoopbackNetworks in `compositor dev`): a chart URL comes
//     from a tenant, and Compositor must not be their way into the cluster's network.
//     IPv4-mapped, IPv4-compatible, NAT64, 6to4 and Teredo addresses are judged as the
//     IPv4 address they reach. A refusal (ErrBlockedAddress) names the address, the
//     range and the flag that would allow it.
//   - Redirects are bounded (Options.MaxRedirects) and every hop passes the same checks;
//     the Authorization header is dropped when a redirect changes host, port or scheme.
//   - No proxy from the environment: a proxy would hide the real destination from the
//     dial guard.
//
// # Archive limits
//
// Before an archive reaches Helm's loader, CheckArchive reads it once as a stream and
// refuses it when it breaks Limits: compressed size, uncompressed size (every byte the
// gzip stream inflates to, tar headers, PAX/GNU extended headers and long names
// included, not the sizes the headers claim), per-file size, number of entries, paths that are
// absolute or climb with "..", and any entry that is not a regular file or directory
// (symlinks, hard links, devices, FIFOs). Helm's loader keeps its own limits (100 MiB
// total, 5 MiB per file): raising Limits above those has no effect. The loader is only
// ever given the very bytes CheckArchive passed, cached archives included.
//
// # Cache and credentials
//
// A digest opens nothing. A repository's index and a registry's answer to a tag name
// whatever digest their owner likes (a registry's Docker-Content-Digest header on a
// HEAD cannot even be checked), and digests are not secret: definitions' status and
// events show them. So the cache never serves an archive because a source names its
// digest. It serves one only when a memo records that this very source, asked the
// same way by a caller with the same credentials, served those bytes before:
//
//   - Helm repository: the index is read on every Fetch with the caller's
//     credentials. The memo is keyed by the repository URL, the chart, the version
//     and the resolved archive URL the index names, and holds the digest that
//     download had; it answers only when that digest equals the one the index states
//     now (when it states one). Otherwise the archive is downloaded from that URL and
//     checked against the index's digest, even when the cache already holds those
//     bytes: another repository whose index names a private archive's digest, or its
//     URL, gets a download that the archive's origin refuses or that does not match.
//   - OCI: the manifest is resolved on every Fetch with the caller's credentials (or,
//     without them, Helm's registry config file, which every such caller shares). The
//     memo is keyed by the repository (host:port/path/name), the version and the
//     manifest digest; without it the archive is pulled by manifest digest from that
//     repository.
//   - Direct URL: there is nothing to check first. The memo is keyed by the URL and
//     the version, and a hit does not contact the URL at all, so access revoked there
//     shows only when the memo is gone.
//
// Memos of anonymous fetches are kept on disk (refs/, beside the archives) and
// survive a restart. Memos of fetches with credentials are kept only in memory, keyed
// by an HMAC (with a per-process key) of the memo key, the username and the password:
// credentials never reach the disk, a caller with other credentials or none never
// finds the entry, and after a restart the first fetch with credentials downloads
// again. A memo of anonymous fetches answers only anonymous callers.
package chartfetch
