package chartfetch

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	repo "helm.sh/helm/v4/pkg/repo/v1"
)

// fetchRepo resolves ref.Repo@ref.Version in a Helm repository's index.yaml and
// downloads the archive the index names. The index is read on every call, with the
// caller's credentials. The digest the index states is no reason to skip the download
// on its own: the index is whatever its repository says, and digests are not secret.
// The cache answers only when this repository's index already named this archive URL
// to a caller with the same credentials and the download gave the bytes the index
// now names (see cachedFor).
func (f *Fetcher) fetchRepo(ctx context.Context, ref Ref, repoURL *url.URL) (*Result, error) {
	if ref.Version == "" {
		return nil, fmt.Errorf("%w: a Helm repository needs an exact chart version", ErrInvalidRef)
	}
	lim := f.opts.Limits
	s, err := f.newSession(ctx, ref, max(lim.MaxIndexBytes, lim.MaxArchiveBytes))
	if err != nil {
		return nil, err
	}
	defer s.close()

	indexURL, baseURL := indexLocation(repoURL)
	raw, err := s.get(indexURL, repoURL, ref, lim.MaxIndexBytes, ErrIndexTooLarge)
	if err != nil {
		return nil, err
	}
	index, err := parseIndex(f.opts.CacheDir, raw)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", indexURL.Redacted(), err)
	}

	versions, ok := index.Entries[ref.Repo]
	if !ok {
		return nil, fmt.Errorf("%w: no chart %q in repository %s", ErrNotFound, ref.Repo, repoURL.Redacted())
	}
	i := slices.IndexFunc(versions, func(cv *repo.ChartVersion) bool { return cv.Version == ref.Version })
	if i < 0 {
		var all []string
		for _, cv := range versions {
			all = append(all, cv.Version)
		}
		return nil, versionNotFound(ref.Repo, ref.Version, repoURL.Redacted(), all)
	}
	cv := versions[i]
	if len(cv.URLs) == 0 {
		return nil, fmt.Errorf("%w: index entry %s-%s lists no archive URL", ErrNotFound, ref.Repo, ref.Version)
	}
	resolved, err := repo.ResolveReferenceURL(baseURL.String(), cv.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("%w: archive URL %q in the index: %w", ErrUnsupportedURL, cv.URLs[0], err)
	}
	archiveURL, err := url.Parse(resolved)
	if err != nil {
		return nil, fmt.Errorf("%w: archive URL %q in the index: %w", ErrUnsupportedURL, cv.URLs[0], err)
	}
	if err := checkURL(archiveURL, f.opts.DialGuard); err != nil {
		return nil, fmt.Errorf("archive URL in the index: %w", err)
	}
	packageURL := archiveURL.String()

	// The memo records what this repository's archive URL served, for this chart and
	// version, to a caller with these credentials (on disk when anonymous, in memory
	// otherwise). It never answers a direct fetch of the archive URL, another
	// repository whose index names the same URL or digest, nor a caller with other
	// credentials: they download, and the archive's origin decides.
	indexDigest := normalizeDigest(cv.Digest)
	memoKey := memoKey("repo", repoURL.String(), ref.Repo, ref.Version, packageURL)
	if res, ok := f.cachedFor(memoKey, ref, indexDigest, packageURL); ok {
		return res, nil
	}

	data, err := s.get(archiveURL, repoURL, ref, lim.MaxArchiveBytes, ErrArchiveTooLarge)
	if err != nil {
		return nil, err
	}
	res, err := f.store(ctx, ref, data, indexDigest, packageURL)
	if err != nil {
		return nil, err
	}
	f.storeMemo(ctx, memoKey, ref, res.Digest)
	return res, nil
}

// indexLocation returns the index.yaml URL of a repository URL and the base that
// relative archive URLs resolve against. A URL that already names index.yaml is
// accepted as is.
func indexLocation(repoURL *url.URL) (index, base *url.URL) {
	base = &url.URL{}
	*base = *repoURL
	if strings.HasSuffix(base.Path, "/index.yaml") {
		base.Path = strings.TrimSuffix(base.Path, "index.yaml")
		base.RawPath = ""
	}
	index = base.JoinPath("index.yaml")
	return index, base
}

// parseIndex hands the index to Helm's own parser, which validates and sorts entries.
// Helm only parses indexes from files, so it goes through a temporary one.
func parseIndex(cacheDir string, raw []byte) (*repo.IndexFile, error) {
	dir := cacheDir
	if dir == "" {
		dir = os.TempDir()
	}
	tmp, err := os.CreateTemp(dir, ".index-*.yaml")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(raw)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, werr
	}
	return repo.LoadIndexFile(tmp.Name())
}

// versionNotFound names the chart and version and lists the versions nearest to it.
func versionNotFound(name, version, where string, available []string) error {
	near := nearbyVersions(available, version, 5)
	if len(near) == 0 {
		return fmt.Errorf("%w: %s has no versions of %s", ErrVersionNotFound, where, name)
	}
	return fmt.Errorf("%w: %s has no %s %s; nearby versions: %s",
		ErrVersionNotFound, where, name, version, strings.Join(near, ", "))
}

// nearbyVersions returns up to n versions around want in semver order (or the newest
// ones when want is not a version).
func nearbyVersions(available []string, want string, n int) []string {
	type v struct {
		raw string
		sv  *semver.Version
	}
	var vs []v
	for _, a := range available {
		if sv, err := semver.NewVersion(a); err == nil {
			vs = append(vs, v{a, sv})
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].sv.LessThan(vs[j].sv) })
	pos := len(vs)
	if w, err := semver.NewVersion(want); err == nil {
		pos = sort.Search(len(vs), func(i int) bool { return !vs[i].sv.LessThan(w) })
	}
	lo := max(0, pos-n/2-n%2)
	hi := min(len(vs), lo+n)
	lo = max(0, hi-n)
	out := make([]string, 0, hi-lo)
	for _, x := range vs[lo:hi] {
		out = append(out, x.raw)
	}
	return out
}
