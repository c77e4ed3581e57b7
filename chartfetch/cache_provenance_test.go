package chartfetch_test

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/test/chartserver"
)

// TestCacheNeverServesAnArchiveForItsDigestAlone: the disk cache holds archives by
// digest, and digests are not secret (definitions' status and events show them). A
// tenant's own repository, whose index lists a private chart's name and version with
// the digest of the archive another team fetched with credentials, gets no archive
// from the cache: the fetcher downloads from the URL that index names, and that
// download fails (nothing there, other bytes, or the private origin refusing a caller
// without its credentials). The same after a restart, and for a tenant with
// credentials of their own. (Regression test for a security review finding: the cache
// answered by the index's digest alone, without the private origin ever being asked.)
func TestCacheNeverServesAnArchiveForItsDigestAlone(t *testing.T) {
	private := tinyChart(t, "app", "0.3.0")
	origin := privateOrigin(t, map[string]http.Handler{
		"/index.yaml":    serveBytes(indexOf(t, private, "app-0.3.0.tgz")),
		"/app-0.3.0.tgz": serveBytes(private),
	})
	cacheDir := t.TempDir()
	f := newFetcher(t, chartfetch.Options{CacheDir: cacheDir})
	owner, err := f.Fetch(ctx(t), chartfetch.Ref{URL: origin.URL, Repo: "app", Version: "0.3.0", Username: "u", Password: "origin-pass"})
	require.NoError(t, err, "the team that may read the private repository")
	require.Equal(t, sha(private), owner.Digest)

	attacks := []struct {
		name       string
		archiveURL string       // what the attacker's index names, with the private digest
		archive    http.Handler // what the attacker's server answers for anything but the index
		want       error
		asked      string // the path the attacker's server must be asked for
		refusedBy  string // the host whose refusal the error reports, if any
	}{
		{
			name:       "no archive behind the URL",
			archiveURL: "nothing-here.tgz",
			archive:    http.NotFoundHandler(),
			want:       chartfetch.ErrNotFound,
			asked:      "/nothing-here.tgz",
		},
		{
			name:       "other bytes behind the URL",
			archiveURL: "app-0.3.0.tgz",
			archive:    serveBytes([]byte("not the private chart")),
			want:       chartfetch.ErrDigestMismatch,
			asked:      "/app-0.3.0.tgz",
		},
		{
			name:       "the private archive's own URL",
			archiveURL: origin.URL + "/app-0.3.0.tgz",
			archive:    http.NotFoundHandler(),
			want:       chartfetch.ErrUnauthorized, // credentials never leave their origin
			asked:      "/index.yaml",
			refusedBy:  strings.TrimPrefix(origin.URL, "http://"),
		},
	}
	callers := map[string]chartfetch.Ref{
		"anonymously":            {Repo: "app", Version: "0.3.0"},
		"with other credentials": {Repo: "app", Version: "0.3.0", Username: "mallory", Password: "mallory-pass"},
	}
	for _, a := range attacks {
		for who, ref := range callers {
			t.Run(a.name+", "+who, func(t *testing.T) {
				attacker := newLoggingServer(t, wrapIndex(a.archive, indexOf(t, private, a.archiveURL)))
				ref.URL = attacker.URL
				for i, fetcher := range []*chartfetch.Fetcher{f, newFetcher(t, chartfetch.Options{CacheDir: cacheDir})} {
					got, err := fetcher.Fetch(ctx(t), ref)
					require.ErrorIs(t, err, a.want, "fetcher %d", i)
					assert.Nil(t, got)
					if a.refusedBy != "" {
						assert.Contains(t, err.Error(), a.refusedBy, "the private origin was asked, and refused")
					}
					paths, _ := attacker.requests()
					assert.Contains(t, paths, a.asked, "the attacker's own source was asked")
				}
			})
		}
	}

	t.Run("the owner's resync is still served from the cache", func(t *testing.T) {
		again, err := f.Fetch(ctx(t), chartfetch.Ref{URL: origin.URL, Repo: "app", Version: "0.3.0", Username: "u", Password: "origin-pass"})
		require.NoError(t, err)
		assert.True(t, again.FromCache)
		assert.Equal(t, owner.Digest, again.Digest)
	})
}

// TestCacheNeverServesAnOCIArchiveForAManifestDigestAlone: resolving a tag is a HEAD
// request whose Docker-Content-Digest header the client cannot check, so a tenant's
// own registry can answer its tag with the manifest digest of another team's private
// chart. The fetcher then pulls that manifest from the tenant's registry, which has
// nothing, instead of answering from the cache, in this process and after a restart.
func TestCacheNeverServesAnOCIArchiveForAManifestDigestAlone(t *testing.T) {
	reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{Username: "ci", Password: "oci-pass"})
	chartURL := reg.MustPush(t, tinyChart(t, "app", "0.3.0"), "private")
	cacheDir := t.TempDir()
	f := newFetcher(t, chartfetch.Options{CacheDir: cacheDir})
	_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: chartURL, Version: "0.3.0", Username: "ci", Password: "oci-pass"})
	require.NoError(t, err, "the team that may read the private repository")
	manifest := manifestDigest(t, reg, "private/app", "0.3.0")

	attacker := newLoggingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && r.URL.Path == "/v2/mine/app/manifests/0.3.0" {
			w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
			w.Header().Set("Docker-Content-Digest", manifest)
			w.Header().Set("Content-Length", "500")
			return
		}
		http.NotFound(w, r)
	}))
	u, err := url.Parse(attacker.URL)
	require.NoError(t, err)
	ref := chartfetch.Ref{URL: "oci://" + u.Host + "/mine/app", Version: "0.3.0"}

	for i, fetcher := range []*chartfetch.Fetcher{f, newFetcher(t, chartfetch.Options{CacheDir: cacheDir})} {
		got, err := fetcher.Fetch(ctx(t), ref)
		require.ErrorIs(t, err, chartfetch.ErrNotFound, "fetcher %d", i)
		assert.Nil(t, got)
		paths, _ := attacker.requests()
		assert.Contains(t, paths, "/v2/mine/app/manifests/"+manifest, "the manifest was pulled from the attacker's registry")
	}
}

// manifestDigest asks the registry, with its credentials, which manifest a tag names.
func manifestDigest(t *testing.T, reg *chartserver.Registry, repository, tag string) string {
	t.Helper()
	scheme := "http"
	if reg.CAPEM != nil {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx(t), http.MethodHead, scheme+"://"+reg.Host+"/v2/"+repository+"/manifests/"+tag, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", ocispec.MediaTypeImageManifest)
	req.SetBasicAuth("ci", "oci-pass")
	resp, err := reg.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	d := resp.Header.Get("Docker-Content-Digest")
	require.True(t, strings.HasPrefix(d, "sha256:"), d)
	return d
}

// TestResyncServesFromTheCacheWithoutADownload: the same definition fetching the same
// source again reads the index (access is checked every time) and not the archive. An
// anonymous source is remembered on disk, across a restart; one with credentials only
// in memory (credentials never reach the disk), so a restart costs one download.
func TestResyncServesFromTheCacheWithoutADownload(t *testing.T) {
	for _, tc := range []struct {
		name               string
		username, password string
		afterRestart       int // archive downloads once a restarted fetcher has fetched
	}{
		{name: "anonymous", afterRestart: 1},
		{name: "with credentials", username: "team-a", password: "a-secret", afterRestart: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{
				Dir:      chartsDir(t, map[string][]byte{"app-1.0.0.tgz": tinyChart(t, "app", "1.0.0")}),
				Username: tc.username, Password: tc.password,
			})
			cacheDir := t.TempDir()
			f := newFetcher(t, chartfetch.Options{CacheDir: cacheDir})
			ref := chartfetch.Ref{URL: srv.URL, Repo: "app", Version: "1.0.0", Username: tc.username, Password: tc.password}

			first, err := f.Fetch(ctx(t), ref)
			require.NoError(t, err)
			assert.False(t, first.FromCache)
			for range 2 {
				again, err := f.Fetch(ctx(t), ref)
				require.NoError(t, err)
				assert.True(t, again.FromCache)
				assert.Equal(t, first.Digest, again.Digest)
			}
			assert.Equal(t, 1, srv.Count("/app-1.0.0.tgz"), "archive downloads")
			assert.Equal(t, 3, srv.Count("/index.yaml"), "index reads")

			restarted := newFetcher(t, chartfetch.Options{CacheDir: cacheDir})
			res, err := restarted.Fetch(ctx(t), ref)
			require.NoError(t, err)
			assert.Equal(t, first.Digest, res.Digest)
			assert.Equal(t, tc.afterRestart, srv.Count("/app-1.0.0.tgz"), "archive downloads after a restart")
			res, err = restarted.Fetch(ctx(t), ref)
			require.NoError(t, err)
			assert.True(t, res.FromCache)
			assert.Equal(t, tc.afterRestart, srv.Count("/app-1.0.0.tgz"), "and none on the next resync")
		})
	}
}

// TestCacheAnswersEachSourceForItself: two repositories serving the same archive each
// download it once (the second only proves its repository serves those bytes by
// serving them), then resync from the cache; a version republished with other bytes
// is downloaded again.
func TestCacheAnswersEachSourceForItself(t *testing.T) {
	archive := tinyChart(t, "app", "1.0.0")
	a := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: chartsDir(t, map[string][]byte{"app-1.0.0.tgz": archive})})
	bDir := chartsDir(t, map[string][]byte{"app-1.0.0.tgz": archive})
	b := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: bDir})
	f := newFetcher(t, chartfetch.Options{CacheDir: t.TempDir()})

	for _, srv := range []*chartserver.Repository{a, b} {
		ref := chartfetch.Ref{URL: srv.URL, Repo: "app", Version: "1.0.0"}
		first, err := f.Fetch(ctx(t), ref)
		require.NoError(t, err)
		assert.False(t, first.FromCache)
		assert.Equal(t, sha(archive), first.Digest)
		again, err := f.Fetch(ctx(t), ref)
		require.NoError(t, err)
		assert.True(t, again.FromCache)
		assert.Equal(t, 1, srv.Count("/app-1.0.0.tgz"), "%s: archive downloads", srv.URL)
	}

	republished := tarGz(t,
		entry{name: "app/Chart.yaml", body: []byte("apiVersion: v2\nname: app\nversion: 1.0.0\n")},
		entry{name: "app/templates/cm.yaml", body: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: republished\n")},
	)
	require.NoError(t, os.WriteFile(filepath.Join(bDir, "app-1.0.0.tgz"), republished, 0o600))
	require.NoError(t, b.Reindex())
	res, err := f.Fetch(ctx(t), chartfetch.Ref{URL: b.URL, Repo: "app", Version: "1.0.0"})
	require.NoError(t, err)
	assert.False(t, res.FromCache)
	assert.Equal(t, sha(republished), res.Digest)
	assert.Equal(t, 2, b.Count("/app-1.0.0.tgz"))
	require.Len(t, res.Chart.Templates, 1)
	assert.Contains(t, string(res.Chart.Templates[0].Data), "republished")
}

// wrapIndex answers /index.yaml with index and anything else with next.
func wrapIndex(next http.Handler, index []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/index.yaml" {
			_, _ = w.Write(index)
			return
		}
		next.ServeHTTP(w, r)
	})
}
