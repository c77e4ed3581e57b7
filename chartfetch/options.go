package chartfetch

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
)

// Ref says where a chart is; it mirrors a CompositionDefinition's spec.chart with the
// credentials already read from their Secret by the caller.
type Ref struct {
	// URL is oci://host/path/name, an https (or loopback http) Helm repository URL
	// (with Repo), or a direct https URL of a .tgz archive.
	URL string
	// Repo is the chart name inside a Helm repository; empty for OCI and direct URLs.
	Repo string
	// Version is the exact chart version; required for OCI and repositories. For a
	// direct URL it is optional and, when set, checked against the archive.
	Version string
	// InsecureSkipVerifyTLS turns off server certificate verification.
	InsecureSkipVerifyTLS bool
	// Username and Password are sent as basic auth, only to the host of URL.
	Username string
	Password string
	// CAData is an optional PEM bundle trusted in addition to the system roots.
	CAData []byte
}

// String describes the reference for logs and errors, without credentials.
func (r Ref) String() string {
	s := "(unparsable URL)"
	if u, err := url.Parse(r.URL); err == nil {
		s = u.Redacted()
	}
	if r.Repo != "" {
		s += " chart " + r.Repo
	}
	if r.Version != "" {
		s += " version " + r.Version
	}
	return s
}

// GoString keeps %#v from printing the password.
func (r Ref) GoString() string { return fmt.Sprintf("chartfetch.Ref(%q)", r.String()) }

// Result is a fetched and loaded chart.
type Result struct {
	Chart *chart.Chart
	// Digest is "sha256:<hex>" of the chart archive (.tgz); the cache key.
	Digest string
	// PackageURL is where the archive came from: the resolved archive URL for a
	// repository, oci://host/path/name:version for OCI, the URL itself otherwise.
	PackageURL string
	// FromCache is true when no archive was downloaded.
	FromCache bool
	// Archive is the chart archive itself, whose sha256 is Digest.
	Archive []byte
}

// Limits bound what an archive may contain. Zero fields take the defaults.
type Limits struct {
	// MaxArchiveBytes bounds the compressed archive. Default 20 MiB.
	MaxArchiveBytes int64
	// MaxUncompressedBytes bounds the sum of all entries' contents. Default 100 MiB.
	MaxUncompressedBytes int64
	// MaxFileBytes bounds one entry's contents. Default 5 MiB (Helm's loader limit).
	MaxFileBytes int64
	// MaxFiles bounds the number of tar entries, directories included. Default 5000.
	MaxFiles int
	// MaxIndexBytes bounds a repository's index.yaml. Default 50 MiB.
	MaxIndexBytes int64
}

// Default limits.
const (
	DefaultMaxArchiveBytes      = 20 << 20
	DefaultMaxUncompressedBytes = 100 << 20
	DefaultMaxFileBytes         = 5 << 20
	DefaultMaxFiles             = 5000
	DefaultMaxIndexBytes        = 50 << 20
)

// DefaultLimits returns the default Limits.
func DefaultLimits() Limits { return Limits{}.withDefaults() }

func (l Limits) withDefaults() Limits {
	if l.MaxArchiveBytes <= 0 {
		l.MaxArchiveBytes = DefaultMaxArchiveBytes
	}
	if l.MaxUncompressedBytes <= 0 {
		l.MaxUncompressedBytes = DefaultMaxUncompressedBytes
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.MaxIndexBytes <= 0 {
		l.MaxIndexBytes = DefaultMaxIndexBytes
	}
	return l
}

// DialGuard decides whether a connection to a resolved address ("ip:port") may be
// made. It runs for every connection, after DNS resolution. CheckAddress is the
// default.
type DialGuard func(network, address string) error

// Options configure a Fetcher. The zero value works: no disk cache, default limits.
type Options struct {
	// CacheDir holds the content-addressed archive cache. Empty disables caching.
	CacheDir string
	// Limits bound archives and indexes; zero fields take the defaults.
	Limits Limits
	// Timeout bounds one Fetch from start to loaded chart. Default 60s.
	Timeout time.Duration
	// RegistryConfigPath is Helm's registry credentials file (HELM_REGISTRY_CONFIG_PATH),
	// used for OCI references that carry no Username. Empty means Helm's default.
	RegistryConfigPath string
	// AllowNetworks are the ranges refused by default (loopback, RFC 1918, CGNAT, ULA,
	// ...) that chart sources may be reached at nonetheless: on-premises registries
	// (--allow-chart-network), LoopbackNetworks for `compositor dev` and tests. Link-local,
	// metadata, unspecified, multicast and broadcast addresses stay refused. Ignored when
	// DialGuard is set.
	AllowNetworks []netip.Prefix
	// DialGuard vets every connection; nil means NewAddressGuard(AllowNetworks). A
	// refusal surfaces as ErrBlockedAddress.
	DialGuard DialGuard
	// Resolver resolves host names before the dial guard sees their addresses; nil means
	// net.DefaultResolver. Tests inject one so that names never reach real DNS.
	Resolver Resolver
	// MaxRedirects bounds redirects per request. Default 5; negative forbids them.
	MaxRedirects int
}

// Resolver looks up the addresses of a host; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DefaultTimeout is the Fetch timeout when Options.Timeout is zero.
const DefaultTimeout = 60 * time.Second

// DefaultMaxRedirects is the redirect bound when Options.MaxRedirects is zero.
const DefaultMaxRedirects = 5
