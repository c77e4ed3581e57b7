package chartfetch

import "errors"

// Sentinel errors. Fetch wraps them with %w and adds the host, chart and version
// involved; test with errors.Is. Credentials never appear in an error.
var (
	// ErrUnsupportedURL: the URL's scheme or shape is not allowed (see the package
	// documentation), e.g. file://, ftp://, http:// to a non-loopback host, user:pass@
	// in the URL, or an https URL that is neither a .tgz nor used with a chart name.
	ErrUnsupportedURL = errors.New("unsupported chart URL")
	// ErrBlockedAddress: a connection would go to an address the dial guard refuses
	// (link-local, cloud metadata, multicast, ...; loopback and private ranges unless allowed).
	ErrBlockedAddress = errors.New("address blocked by the chart source network policy")
	// ErrTooManyRedirects: more redirects than Options.MaxRedirects.
	ErrTooManyRedirects = errors.New("too many redirects")
	// ErrUnauthorized: the server refused the request (HTTP 401 or 403), with or
	// without credentials.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrNotFound: the repository index, the archive, the chart name in the index or
	// the OCI repository does not exist.
	ErrNotFound = errors.New("chart not found")
	// ErrVersionNotFound: the chart exists but not in the requested version.
	ErrVersionNotFound = errors.New("chart version not found")
	// ErrTimeout: the source did not answer within Options.Timeout (or the caller's
	// context deadline).
	ErrTimeout = errors.New("chart source timed out")
	// ErrTLSVerification: the server's certificate is not trusted (set CAData, or
	// InsecureSkipVerifyTLS where policy allows it).
	ErrTLSVerification = errors.New("chart source certificate not trusted")
	// ErrUnreachable: no connection could be made (refused, no route, DNS failure).
	ErrUnreachable = errors.New("chart source unreachable")
	// ErrDigestMismatch: the downloaded archive does not have the digest its
	// repository index or registry announced.
	ErrDigestMismatch = errors.New("chart archive digest mismatch")
	// ErrChartMismatch: the archive holds a different chart name or version than the
	// one requested.
	ErrChartMismatch = errors.New("chart archive does not match the requested chart")
	// ErrIndexTooLarge: a repository's index.yaml exceeds Limits.MaxIndexBytes.
	ErrIndexTooLarge = errors.New("repository index too large")
	// ErrArchiveTooLarge: the archive exceeds Limits.MaxArchiveBytes (compressed),
	// Limits.MaxUncompressedBytes (all entries) or Limits.MaxFileBytes (one entry).
	ErrArchiveTooLarge = errors.New("chart archive too large")
	// ErrTooManyFiles: the archive has more entries than Limits.MaxFiles.
	ErrTooManyFiles = errors.New("chart archive has too many files")
	// ErrUnsafeArchive: the archive is not a gzipped tar, or holds an absolute path, a
	// path with "..", a link or any other entry that is not a regular file or directory.
	ErrUnsafeArchive = errors.New("unsafe chart archive")
	// ErrInvalidRef: the Ref itself is incomplete or malformed (no URL, no version
	// where one is needed, CAData without a certificate, ...).
	ErrInvalidRef = errors.New("invalid chart reference")
)
