package chartfetch

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// Fetcher fetches, checks, caches and loads charts. It is safe for concurrent use.
type Fetcher struct {
	opts  Options
	cache *diskCache // nil: no disk cache

	// Memo of what sources fetched with credentials served (direct URLs, repository
	// archive URLs, OCI manifests): kept in memory only, keyed by an HMAC so the map
	// never holds a password.
	memoKey []byte
	mu      sync.Mutex
	memo    map[string]string
}

// New returns a Fetcher; it creates Options.CacheDir when set.
func New(opts Options) (*Fetcher, error) {
	opts.Limits = opts.Limits.withDefaults()
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.DialGuard == nil {
		opts.DialGuard = NewAddressGuard(opts.AllowNetworks)
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	switch {
	case opts.MaxRedirects == 0:
		opts.MaxRedirects = DefaultMaxRedirects
	case opts.MaxRedirects < 0:
		opts.MaxRedirects = 0
	}
	f := &Fetcher{opts: opts, memo: map[string]string{}, memoKey: make([]byte, 32)}
	if _, err := rand.Read(f.memoKey); err != nil {
		return nil, err
	}
	if opts.CacheDir != "" {
		c, err := newDiskCache(opts.CacheDir)
		if err != nil {
			return nil, err
		}
		f.cache = c
	}
	return f, nil
}

// Fetch downloads (or takes from the cache), checks and loads the chart ref points at.
// Every error matches one of the package's sentinels where one applies and names the
// reference without its credentials.
func (f *Fetcher) Fetch(ctx context.Context, ref Ref) (*Result, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()

	res, err := f.fetch(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("fetching chart %s: %w", ref, err)
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("chart fetched",
		"url", ref.URL, "chart", res.Chart.Name(), "version", res.Chart.Metadata.Version,
		"digest", res.Digest, "packageURL", res.PackageURL, "fromCache", res.FromCache)
	return res, nil
}

// parseRefURL parses ref's URL; an error never quotes it.
func parseRefURL(ref Ref) (*url.URL, error) {
	if ref.URL == "" {
		return nil, fmt.Errorf("%w: no URL", ErrInvalidRef)
	}
	u, err := url.Parse(ref.URL)
	if err != nil {
		// url.Error quotes the input, which could hold user:pass@; keep only the reason.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("%w: unparsable URL: %w", ErrUnsupportedURL, err)
	}
	return u, nil
}

func (f *Fetcher) fetch(ctx context.Context, ref Ref) (*Result, error) {
	u, err := parseRefURL(ref)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(u.Scheme, "oci") {
		return f.fetchOCI(ctx, ref, u)
	}
	if err := checkURL(u, f.opts.DialGuard); err != nil {
		return nil, err
	}
	if ref.Repo != "" {
		return f.fetchRepo(ctx, ref, u)
	}
	if p := strings.ToLower(u.Path); strings.HasSuffix(p, ".tgz") || strings.HasSuffix(p, ".tar.gz") {
		return f.fetchDirect(ctx, ref, u)
	}
	return nil, fmt.Errorf("%w: %s is neither an oci:// reference, nor a .tgz archive, nor a repository (set spec.chart.repo)",
		ErrUnsupportedURL, u.Redacted())
}

// fetchDirect downloads a .tgz URL. Nothing tells its digest before the download, so
// a URL→digest memo stands in: on disk for anonymous URLs, in memory otherwise.
func (f *Fetcher) fetchDirect(ctx context.Context, ref Ref, u *url.URL) (*Result, error) {
	memoKey := memoKey("url", u.String(), "", ref.Version, "")
	if res, ok := f.cachedFor(memoKey, ref, "", u.String()); ok {
		return res, nil
	}
	s, err := f.newSession(ctx, ref, f.opts.Limits.MaxArchiveBytes)
	if err != nil {
		return nil, err
	}
	defer s.close()
	data, err := s.get(u, u, ref, f.opts.Limits.MaxArchiveBytes, ErrArchiveTooLarge)
	if err != nil {
		return nil, err
	}
	res, err := f.store(ctx, ref, data, "", u.String())
	if err != nil {
		return nil, err
	}
	f.storeMemo(ctx, memoKey, ref, res.Digest)
	return res, nil
}

// cachedFor returns the cached archive that the source named by key served before to
// a caller with ref's credentials: the memo under key, looked up with those
// credentials, names its digest, which must equal wantDigest when the source states
// one now. The archive is loaded against ref. A digest alone never opens the cache: a
// repository's index or a registry can name any digest, and digests are not secret
// (definitions' status and events show them), so answering from it would hand
// another tenant's private archive to whoever names its digest.
func (f *Fetcher) cachedFor(key string, ref Ref, wantDigest, packageURL string) (*Result, bool) {
	digest, ok := f.lookupMemo(key, ref)
	if !ok || !validDigest(digest) || wantDigest != "" && digest != wantDigest {
		return nil, false
	}
	return f.fromCache(ref, digest, packageURL)
}

// fromCache loads the cached archive with this digest, if there is one. Callers go
// through cachedFor, which decides whether this caller may have it.
func (f *Fetcher) fromCache(ref Ref, digest, packageURL string) (*Result, bool) {
	data, ok := f.cache.blob(digest, f.opts.Limits.MaxArchiveBytes)
	if !ok {
		return nil, false
	}
	ch, err := f.load(ref, data)
	if err != nil {
		return nil, false // let the caller download again and report what is wrong
	}
	return &Result{Chart: ch, Digest: digest, PackageURL: packageURL, FromCache: true, Archive: data}, true
}

// store verifies a downloaded archive against wantDigest (when known), checks and
// loads it, then caches it. A cache write failure only costs a later download.
func (f *Fetcher) store(ctx context.Context, ref Ref, data []byte, wantDigest, packageURL string) (*Result, error) {
	digest := digestOf(data)
	if wantDigest != "" && digest != wantDigest {
		return nil, fmt.Errorf("%w: %s has %s, expected %s", ErrDigestMismatch, packageURL, digest, wantDigest)
	}
	ch, err := f.load(ref, data)
	if err != nil {
		return nil, err
	}
	if err := f.cache.putBlob(digest, data); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "cannot write chart cache", "digest", digest)
	}
	return &Result{Chart: ch, Digest: digest, PackageURL: packageURL, Archive: data}, nil
}

// Load checks an archive already fetched once (kept elsewhere, such as in the
// cluster) as a downloaded one is checked, and loads it. The caller verifies its
// digest.
func (f *Fetcher) Load(ref Ref, data []byte) (*chart.Chart, error) {
	return f.load(ref, data)
}

// load checks an archive against the limits before Helm's loader sees it, then checks
// that it holds the chart and version asked for.
func (f *Fetcher) load(ref Ref, data []byte) (*chart.Chart, error) {
	if err := CheckArchive(bytes.NewReader(data), f.opts.Limits); err != nil {
		return nil, err
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("loading chart archive: %w", err)
	}
	if ref.Version != "" && ch.Metadata.Version != ref.Version {
		return nil, fmt.Errorf("%w: archive holds version %s, not %s", ErrChartMismatch, ch.Metadata.Version, ref.Version)
	}
	if ref.Repo != "" && ch.Name() != ref.Repo {
		return nil, fmt.Errorf("%w: archive holds chart %q, not %q", ErrChartMismatch, ch.Name(), ref.Repo)
	}
	return ch, nil
}

// memoKey names what a URL→digest memo entry stands for: the kind of source, its
// origin URL, the chart and version, and the archive URL. Two entries share a key only
// when they name the same thing the same way.
func memoKey(kind, origin, chart, version, archive string) string {
	return strings.Join([]string{kind, origin, chart, version, archive}, "\x00")
}

// credentialedKey keys a memo entry by the credentials that fetched it as well: an
// HMAC of the key, the username and the password, so the map never holds a password
// and a caller without the same credentials never finds the entry.
func (f *Fetcher) credentialedKey(key string, ref Ref) string {
	mac := hmac.New(sha256.New, f.memoKey)
	for _, s := range []string{key, ref.Username, ref.Password} {
		mac.Write([]byte(s))
		mac.Write([]byte{0})
	}
	return hex.EncodeToString(mac.Sum(nil))
}

// lookupMemo returns the digest memoised under key for a caller with ref's
// credentials: from the disk for anonymous fetches, from memory otherwise.
func (f *Fetcher) lookupMemo(key string, ref Ref) (string, bool) {
	if ref.Username == "" && ref.Password == "" {
		return f.cache.memo(key)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.memo[f.credentialedKey(key, ref)]
	return d, ok
}

// storeMemo memoises digest under key for callers with ref's credentials; credentials
// never reach the disk, so credentialed entries live in memory only.
func (f *Fetcher) storeMemo(ctx context.Context, key string, ref Ref, digest string) {
	if f.cache == nil {
		return
	}
	if ref.Username == "" && ref.Password == "" {
		if err := f.cache.putMemo(key, digest); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "cannot write chart cache memo")
		}
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.memo[f.credentialedKey(key, ref)] = digest
}
