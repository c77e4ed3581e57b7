package chartfetch_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	repo "helm.sh/helm/v4/pkg/repo/v1"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/test/chartserver"
)

// TestCachedChartsRememberWhoFetchedThem fetches a chart from a basic-auth repository
// whose index gives no digest, so the archive URL is memoised. The memo answers only
// the same repository, chart, version and credentials: a caller naming the archive URL
// directly, or the repository without (or with other) credentials, goes to the
// repository and is refused there, in this process and after a restart.
func TestCachedChartsRememberWhoFetchedThem(t *testing.T) {
	dir := chartsDir(t, map[string][]byte{"app-1.0.0.tgz": tinyChart(t, "app", "1.0.0")})
	writeIndex(t, dir, func(idx *repo.IndexFile) { idx.Entries["app"][0].Digest = "" })
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir, Username: "team-a", Password: "a-secret"})
	cacheDir := t.TempDir()
	f := newFetcher(t, chartfetch.Options{CacheDir: cacheDir})
	owner := chartfetch.Ref{URL: srv.URL, Repo: "app", Version: "1.0.0", Username: "team-a", Password: "a-secret"}

	first, err := f.Fetch(ctx(t), owner)
	require.NoError(t, err)
	again, err := f.Fetch(ctx(t), owner)
	require.NoError(t, err)
	require.True(t, again.FromCache, "the owner's second fetch is served from the cache")
	require.Equal(t, 1, srv.Count("/app-1.0.0.tgz"))

	others := map[string]chartfetch.Ref{
		"the archive URL, anonymously":      {URL: first.PackageURL},
		"the archive URL, other password":   {URL: first.PackageURL, Username: "team-a", Password: "guess"},
		"the repository, anonymously":       {URL: srv.URL, Repo: "app", Version: "1.0.0"},
		"the repository, other credentials": {URL: srv.URL, Repo: "app", Version: "1.0.0", Username: "team-b", Password: "b-secret"},
	}
	for name, ref := range others {
		t.Run(name, func(t *testing.T) {
			for _, fetcher := range []*chartfetch.Fetcher{f, newFetcher(t, chartfetch.Options{CacheDir: cacheDir})} {
				srv.Reset()
				_, err := fetcher.Fetch(ctx(t), ref)
				require.ErrorIs(t, err, chartfetch.ErrUnauthorized)
				assert.NotEmpty(t, srv.Requests(), "asked the repository, which refused")
			}
		})
	}

	t.Run("the owner after a restart downloads again: credentials never reach the disk", func(t *testing.T) {
		res, err := newFetcher(t, chartfetch.Options{CacheDir: cacheDir}).Fetch(ctx(t), owner)
		require.NoError(t, err)
		assert.False(t, res.FromCache)
	})
}

// TestCredentialsGoOnlyToTheirOrigin serves an index whose archive URL is on another
// loopback server: the index request carries the credentials, the archive request
// does not.
func TestCredentialsGoOnlyToTheirOrigin(t *testing.T) {
	archive := tinyChart(t, "app", "1.0.0")
	elsewhere := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: chartsDir(t, map[string][]byte{"app-1.0.0.tgz": archive})})
	dir := chartsDir(t, map[string][]byte{"app-1.0.0.tgz": archive})
	writeIndex(t, dir, func(idx *repo.IndexFile) { idx.Entries["app"][0].URLs = []string{elsewhere.URL + "/app-1.0.0.tgz"} })
	require.NoError(t, os.Remove(filepath.Join(dir, "app-1.0.0.tgz")))
	origin := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir, Username: "u", Password: "origin-pass"})

	_, err := newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), chartfetch.Ref{URL: origin.URL, Repo: "app", Version: "1.0.0", Username: "u", Password: "origin-pass"})
	require.NoError(t, err)
	for _, r := range origin.Requests() {
		assert.True(t, r.Authorization, "the origin gets the credentials: %s", r.Path)
	}
	reqs := elsewhere.Requests()
	require.Len(t, reqs, 1)
	assert.False(t, reqs[0].Authorization, "another host never sees them")
}
