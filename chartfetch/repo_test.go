package chartfetch_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	repo "helm.sh/helm/v4/pkg/repo/v1"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

func TestFetchFromRepository(t *testing.T) {
	cases := []struct {
		name string
		opts chartserver.RepositoryOptions
		ref  func(*chartserver.Repository) chartfetch.Ref
	}{
		{
			name: "http on loopback, relative URLs",
			ref:  func(r *chartserver.Repository) chartfetch.Ref { return chartfetch.Ref{URL: r.URL} },
		},
		{
			name: "absolute URLs in the index",
			opts: chartserver.RepositoryOptions{AbsoluteURLs: true},
			ref:  func(r *chartserver.Repository) chartfetch.Ref { return chartfetch.Ref{URL: r.URL + "/"} },
		},
		{
			name: "https with a custom CA",
			opts: chartserver.RepositoryOptions{TLS: true},
			ref: func(r *chartserver.Repository) chartfetch.Ref {
				return chartfetch.Ref{URL: r.URL, CAData: r.CAPEM}
			},
		},
		{
			name: "https, insecureSkipVerifyTLS",
			opts: chartserver.RepositoryOptions{TLS: true},
			ref: func(r *chartserver.Repository) chartfetch.Ref {
				return chartfetch.Ref{URL: r.URL, InsecureSkipVerifyTLS: true}
			},
		},
		{
			name: "basic auth over https",
			opts: chartserver.RepositoryOptions{TLS: true, Username: "platform", Password: "s3cret-pw"},
			ref: func(r *chartserver.Repository) chartfetch.Ref {
				return chartfetch.Ref{URL: r.URL, CAData: r.CAPEM, Username: "platform", Password: "s3cret-pw"}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := sampleRepoDir(t)
			tc.opts.Dir = dir
			srv := chartserver.NewRepository(t, tc.opts)
			f := newFetcher(t, chartfetch.Options{CacheDir: t.TempDir()})

			ref := tc.ref(srv)
			ref.Repo, ref.Version = samplecharts.ChartName, "1.1.6"
			res, err := f.Fetch(ctx(t), ref)
			require.NoError(t, err)
			assert.Equal(t, samplecharts.ChartName, res.Chart.Name())
			assert.Equal(t, "1.1.6", res.Chart.Metadata.Version)
			assert.Equal(t, fileDigest(t, filepath.Join(dir, "fireworks-app-1.1.6.tgz")), res.Digest)
			assert.Equal(t, srv.URL+"/fireworks-app-1.1.6.tgz", res.PackageURL)
			assert.False(t, res.FromCache)
			assert.NotEmpty(t, res.Chart.Dependencies(), "subchart loaded")

			// A resync: the index is read again (access is re-checked), the archive is not.
			again, err := f.Fetch(ctx(t), ref)
			require.NoError(t, err)
			assert.True(t, again.FromCache)
			assert.Equal(t, res.Digest, again.Digest)
			assert.Equal(t, 1, srv.Count("/fireworks-app-1.1.6.tgz"), "archive downloads")
			assert.Equal(t, 2, srv.Count("/index.yaml"), "index reads")
		})
	}
}

func TestFetchFromRepositoryRejectsBadCredentials(t *testing.T) {
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{
		Dir: sampleRepoDir(t), TLS: true, Username: "platform", Password: "right-password",
	})
	f := newFetcher(t, chartfetch.Options{CacheDir: t.TempDir()})
	base := chartfetch.Ref{URL: srv.URL, Repo: samplecharts.ChartName, Version: "1.1.5", CAData: srv.CAPEM}

	wrong := base
	wrong.Username, wrong.Password = "platform", "hunter2-wrong"
	_, err := f.Fetch(ctx(t), wrong)
	require.ErrorIs(t, err, chartfetch.ErrUnauthorized)
	assert.Contains(t, err.Error(), srv.Host)
	assert.Contains(t, err.Error(), `"platform"`)
	assert.NotContains(t, err.Error(), "hunter2-wrong")
	assert.NotContains(t, err.Error(), "Basic ")

	_, err = f.Fetch(ctx(t), base)
	require.ErrorIs(t, err, chartfetch.ErrUnauthorized)
	assert.Contains(t, err.Error(), "requires credentials")

	// A chart cached by an authorised caller is not served to one without access.
	right := base
	right.Username, right.Password = "platform", "right-password"
	_, err = f.Fetch(ctx(t), right)
	require.NoError(t, err)
	_, err = f.Fetch(ctx(t), base)
	require.ErrorIs(t, err, chartfetch.ErrUnauthorized)
}

func TestFetchFromRepositoryWithUntrustedCertificate(t *testing.T) {
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: sampleRepoDir(t), TLS: true})
	_, err := newFetcher(t, chartfetch.Options{}).Fetch(ctx(t),
		chartfetch.Ref{URL: srv.URL, Repo: samplecharts.ChartName, Version: "1.1.5"})
	require.ErrorIs(t, err, chartfetch.ErrTLSVerification)
	assert.Contains(t, err.Error(), srv.Host)

	_, err = newFetcher(t, chartfetch.Options{}).Fetch(ctx(t),
		chartfetch.Ref{URL: srv.URL, Repo: samplecharts.ChartName, Version: "1.1.5", CAData: []byte("not PEM")})
	require.ErrorIs(t, err, chartfetch.ErrInvalidRef)
}

func TestFetchFromRepositoryMissingChartOrVersion(t *testing.T) {
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: sampleRepoDir(t)})
	f := newFetcher(t, chartfetch.Options{})

	_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: srv.URL, Repo: samplecharts.ChartName, Version: "1.1.7"})
	require.ErrorIs(t, err, chartfetch.ErrVersionNotFound)
	for _, want := range []string{samplecharts.ChartName, "1.1.7", "1.1.5", "1.1.6", "2.0.0"} {
		assert.Contains(t, err.Error(), want)
	}

	_, err = f.Fetch(ctx(t), chartfetch.Ref{URL: srv.URL, Repo: "nope", Version: "1.0.0"})
	require.ErrorIs(t, err, chartfetch.ErrNotFound)
	assert.Contains(t, err.Error(), `"nope"`)

	_, err = f.Fetch(ctx(t), chartfetch.Ref{URL: srv.URL + "/no-repo-here", Repo: "x", Version: "1.0.0"})
	require.ErrorIs(t, err, chartfetch.ErrNotFound)

	_, err = f.Fetch(ctx(t), chartfetch.Ref{URL: srv.URL, Repo: samplecharts.ChartName})
	require.ErrorIs(t, err, chartfetch.ErrInvalidRef, "a repository needs a version")
}

// writeIndex writes an index for dir's archives and lets edit change it first.
func writeIndex(t *testing.T, dir string, edit func(*repo.IndexFile)) {
	t.Helper()
	idx, err := repo.IndexDirectory(dir, "")
	require.NoError(t, err)
	edit(idx)
	require.NoError(t, idx.WriteFile(filepath.Join(dir, "index.yaml"), 0o600))
}

func TestFetchFromRepositoryChecksTheIndexDigest(t *testing.T) {
	dir := chartsDir(t, map[string][]byte{"app-1.0.0.tgz": tinyChart(t, "app", "1.0.0")})
	writeIndex(t, dir, func(idx *repo.IndexFile) {
		idx.Entries["app"][0].Digest = strings.Repeat("ab", 32)
	})
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
	f := newFetcher(t, chartfetch.Options{CacheDir: t.TempDir()})

	_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: srv.URL, Repo: "app", Version: "1.0.0"})
	require.ErrorIs(t, err, chartfetch.ErrDigestMismatch)
}

func TestFetchFromRepositoryWithoutIndexDigestUsesTheMemo(t *testing.T) {
	dir := chartsDir(t, map[string][]byte{"app-1.0.0.tgz": tinyChart(t, "app", "1.0.0")})
	writeIndex(t, dir, func(idx *repo.IndexFile) { idx.Entries["app"][0].Digest = "" })
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
	f := newFetcher(t, chartfetch.Options{CacheDir: t.TempDir()})
	ref := chartfetch.Ref{URL: srv.URL, Repo: "app", Version: "1.0.0"}

	_, err := f.Fetch(ctx(t), ref)
	require.NoError(t, err)
	res, err := f.Fetch(ctx(t), ref)
	require.NoError(t, err)
	assert.True(t, res.FromCache)
	assert.Equal(t, 1, srv.Count("/app-1.0.0.tgz"))
}

func TestFetchFromRepositoryRefusesBlockedArchiveURL(t *testing.T) {
	dir := chartsDir(t, map[string][]byte{"app-1.0.0.tgz": tinyChart(t, "app", "1.0.0")})
	writeIndex(t, dir, func(idx *repo.IndexFile) {
		idx.Entries["app"][0].URLs = []string{"http://169.254.169.254/latest/meta-data/app-1.0.0.tgz"}
		idx.Entries["app"][0].Digest = ""
	})
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
	g := &recordingGuard{}
	f := newFetcher(t, chartfetch.Options{DialGuard: g.guard})

	_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: srv.URL, Repo: "app", Version: "1.0.0"})
	require.ErrorIs(t, err, chartfetch.ErrBlockedAddress)
	assert.Equal(t, 1, g.count("169.254.169.254:80"), "refused before any dial")
}

func TestFetchConcurrentlyIntoOneCache(t *testing.T) {
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: sampleRepoDir(t)})
	cacheDir := t.TempDir()
	ref := chartfetch.Ref{URL: srv.URL, Repo: samplecharts.ChartName, Version: "2.0.0"}

	// Separate Fetchers on one directory behave like separate processes.
	var wg sync.WaitGroup
	digests := make([]string, 8)
	errs := make([]error, 8)
	for i := range digests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := chartfetch.New(chartfetch.Options{CacheDir: cacheDir, AllowNetworks: chartfetch.LoopbackNetworks()})
			if err != nil {
				errs[i] = err
				return
			}
			res, err := f.Fetch(ctx(t), ref)
			if err == nil {
				digests[i] = res.Digest
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i := range errs {
		require.NoError(t, errs[i])
		assert.Equal(t, digests[0], digests[i])
	}

	leftovers, err := filepath.Glob(filepath.Join(cacheDir, "*", "*", ".tmp-*"))
	require.NoError(t, err)
	assert.Empty(t, leftovers, "temporary files left in the cache")

	res, err := newFetcher(t, chartfetch.Options{CacheDir: cacheDir}).Fetch(ctx(t), ref)
	require.NoError(t, err)
	assert.True(t, res.FromCache)
}

func TestFetchRepairsACorruptCacheEntry(t *testing.T) {
	dir := sampleRepoDir(t)
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
	cacheDir := t.TempDir()
	f := newFetcher(t, chartfetch.Options{CacheDir: cacheDir})
	ref := chartfetch.Ref{URL: srv.URL, Repo: samplecharts.ChartName, Version: "1.1.5"}

	res, err := f.Fetch(ctx(t), ref)
	require.NoError(t, err)
	blob := filepath.Join(cacheDir, "blobs", "sha256", strings.TrimPrefix(res.Digest, "sha256:"))
	require.NoError(t, os.WriteFile(blob, []byte("not the chart"), 0o600))

	again, err := f.Fetch(ctx(t), ref)
	require.NoError(t, err)
	assert.False(t, again.FromCache)
	assert.Equal(t, res.Digest, again.Digest)
	assert.Equal(t, 2, srv.Count("/fireworks-app-1.1.5.tgz"))
}

// BenchmarkFetchCached measures a resync: index read over loopback, archive from the
// disk cache, checked and loaded.
func BenchmarkFetchCached(b *testing.B) {
	srv := chartserver.NewRepository(b, chartserver.RepositoryOptions{Dir: sampleRepoDir(b)})
	f := newFetcher(b, chartfetch.Options{CacheDir: b.TempDir()})
	ref := chartfetch.Ref{URL: srv.URL, Repo: samplecharts.ChartName, Version: "2.0.0"}
	if _, err := f.Fetch(ctx(b), ref); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := f.Fetch(ctx(b), ref)
		if err != nil || !res.FromCache {
			b.Fatal(err, res)
		}
	}
}
