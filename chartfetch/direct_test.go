package chartfetch_test

import (
	"archive/tar"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/test/chartserver"
)

func TestFetchDirectURL(t *testing.T) {
	archive := tinyChart(t, "app", "0.3.0")
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{
		Dir: chartsDir(t, map[string][]byte{"app-0.3.0.tgz": archive}), TLS: true,
	})
	cacheDir := t.TempDir()
	ref := chartfetch.Ref{URL: srv.URL + "/app-0.3.0.tgz", CAData: srv.CAPEM}

	res, err := newFetcher(t, chartfetch.Options{CacheDir: cacheDir}).Fetch(ctx(t), ref)
	require.NoError(t, err)
	assert.Equal(t, "app", res.Chart.Name())
	assert.Equal(t, sha(archive), res.Digest)
	assert.Equal(t, ref.URL, res.PackageURL)
	assert.False(t, res.FromCache)

	// The memo is on disk: a new Fetcher (a restarted process) still downloads nothing.
	again, err := newFetcher(t, chartfetch.Options{CacheDir: cacheDir}).Fetch(ctx(t), ref)
	require.NoError(t, err)
	assert.True(t, again.FromCache)
	assert.Equal(t, 1, srv.Count("/app-0.3.0.tgz"))

	ref.Version = "9.9.9"
	_, err = newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), ref)
	require.ErrorIs(t, err, chartfetch.ErrChartMismatch)
}

func TestFetchDirectURLWithCredentialsKeepsTheMemoInMemory(t *testing.T) {
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{
		Dir:      chartsDir(t, map[string][]byte{"app-0.3.0.tgz": tinyChart(t, "app", "0.3.0")}),
		Username: "u", Password: "direct-pass",
	})
	cacheDir := t.TempDir()
	ref := chartfetch.Ref{URL: srv.URL + "/app-0.3.0.tgz", Username: "u", Password: "direct-pass"}
	f := newFetcher(t, chartfetch.Options{CacheDir: cacheDir})

	_, err := f.Fetch(ctx(t), ref)
	require.NoError(t, err)
	res, err := f.Fetch(ctx(t), ref)
	require.NoError(t, err)
	assert.True(t, res.FromCache)
	assert.Equal(t, 1, srv.Count("/app-0.3.0.tgz"))

	// Without the credentials nothing is served from the cache.
	anonymous := ref
	anonymous.Username, anonymous.Password = "", ""
	_, err = f.Fetch(ctx(t), anonymous)
	require.ErrorIs(t, err, chartfetch.ErrUnauthorized)
	wrong := ref
	wrong.Password = "guess"
	_, err = f.Fetch(ctx(t), wrong)
	require.ErrorIs(t, err, chartfetch.ErrUnauthorized)
	assert.NotContains(t, err.Error(), "guess")

	// Nothing about the credentials reached the disk, so a new process downloads again.
	res, err = newFetcher(t, chartfetch.Options{CacheDir: cacheDir}).Fetch(ctx(t), ref)
	require.NoError(t, err)
	assert.False(t, res.FromCache)
}

func TestFetchRefusesUnsafeArchives(t *testing.T) {
	small := chartfetch.Limits{MaxUncompressedBytes: 1 << 20, MaxFiles: 10}
	manyFiles := []entry{{name: "evil/Chart.yaml", body: chartYAML}}
	for i := range 20 {
		manyFiles = append(manyFiles, entry{name: fmt.Sprintf("evil/templates/f%d.yaml", i), body: []byte("x")})
	}
	cases := []struct {
		name    string
		archive []byte
		limits  chartfetch.Limits
		want    error
	}{
		{
			name: "tar bomb: small gzip, huge content",
			archive: tarGz(t, entry{name: "evil/Chart.yaml", body: chartYAML},
				entry{name: "evil/a", size: 900 << 10}, entry{name: "evil/b", size: 900 << 10}),
			limits: small,
			want:   chartfetch.ErrArchiveTooLarge,
		},
		{
			name:    "path traversal",
			archive: tarGz(t, entry{name: "evil/Chart.yaml", body: chartYAML}, entry{name: "evil/../../etc/cron.d/x", body: []byte("x")}),
			want:    chartfetch.ErrUnsafeArchive,
		},
		{
			name:    "absolute path",
			archive: tarGz(t, entry{name: "/etc/passwd", body: []byte("x")}),
			want:    chartfetch.ErrUnsafeArchive,
		},
		{
			name:    "symlink",
			archive: tarGz(t, entry{name: "evil/Chart.yaml", body: chartYAML}, entry{name: "evil/values.yaml", typeflag: tar.TypeSymlink, linkname: "/etc/shadow"}),
			want:    chartfetch.ErrUnsafeArchive,
		},
		{
			name:    "hard link",
			archive: tarGz(t, entry{name: "evil/Chart.yaml", body: chartYAML}, entry{name: "evil/values.yaml", typeflag: tar.TypeLink, linkname: "evil/Chart.yaml"}),
			want:    chartfetch.ErrUnsafeArchive,
		},
		{
			name:    "too many files",
			archive: tarGz(t, manyFiles...),
			limits:  small,
			want:    chartfetch.ErrTooManyFiles,
		},
		{
			name:    "not gzip",
			archive: []byte("apiVersion: v2\nname: evil\n"),
			want:    chartfetch.ErrUnsafeArchive,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{
				Dir: chartsDir(t, map[string][]byte{"evil-1.0.0.tgz": tc.archive}),
			})
			f := newFetcher(t, chartfetch.Options{CacheDir: t.TempDir(), Limits: tc.limits})
			_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: srv.URL + "/evil-1.0.0.tgz"})
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestFetchRefusesArchiveOverCompressedLimit(t *testing.T) {
	archive := tinyChart(t, "app", "0.3.0")
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{
		Dir: chartsDir(t, map[string][]byte{"app-0.3.0.tgz": archive}),
	})
	f := newFetcher(t, chartfetch.Options{Limits: chartfetch.Limits{MaxArchiveBytes: int64(len(archive) - 1)}})
	_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: srv.URL + "/app-0.3.0.tgz"})
	require.ErrorIs(t, err, chartfetch.ErrArchiveTooLarge)
}

func TestFetchRefusesBlockedURLsWithoutConnecting(t *testing.T) {
	cases := []struct {
		url  string
		repo string
		want error
	}{
		{url: "http://169.254.169.254/latest/x.tgz", want: chartfetch.ErrBlockedAddress},
		{url: "https://169.254.169.254/x.tgz", want: chartfetch.ErrBlockedAddress},
		{url: "https://[fe80::1]/x.tgz", want: chartfetch.ErrBlockedAddress},
		{url: "https://[::ffff:169.254.169.254]/x.tgz", want: chartfetch.ErrBlockedAddress},
		{url: "https://0.0.0.0/x.tgz", want: chartfetch.ErrBlockedAddress},
		{url: "https://[::]/charts", repo: "app", want: chartfetch.ErrBlockedAddress},
		{url: "oci://169.254.169.254/charts/app", want: chartfetch.ErrBlockedAddress},
		{url: "https://224.0.0.1/x.tgz", want: chartfetch.ErrBlockedAddress},
		{url: "file:///etc/passwd.tgz", want: chartfetch.ErrUnsupportedURL},
		{url: "ftp://127.0.0.1/x.tgz", want: chartfetch.ErrUnsupportedURL},
		{url: "gopher://127.0.0.1:70/x.tgz", want: chartfetch.ErrUnsupportedURL},
		{url: "http://example.com/x.tgz", want: chartfetch.ErrUnsupportedURL},
		{url: "https://user:pa55word@example.com/x.tgz", want: chartfetch.ErrUnsupportedURL},
		{url: "https://example.com/charts", want: chartfetch.ErrUnsupportedURL}, // neither .tgz nor repo
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			g := &recordingGuard{}
			f := newFetcher(t, chartfetch.Options{DialGuard: g.guard})
			_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: tc.url, Repo: tc.repo, Version: "1.0.0"})
			require.ErrorIs(t, err, tc.want)
			assert.NotContains(t, err.Error(), "pa55word")
			g.mu.Lock()
			defer g.mu.Unlock()
			assert.LessOrEqual(t, len(g.seen), 1, "at most the pre-connection check, no dial: %v", g.seen)
		})
	}
}

func TestFetchChecksEveryRedirect(t *testing.T) {
	archive := tinyChart(t, "app", "0.3.0")
	target := chartserver.NewRepository(t, chartserver.RepositoryOptions{
		Dir: chartsDir(t, map[string][]byte{"app-0.3.0.tgz": archive}),
	})
	front := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: t.TempDir(), Username: "u", Password: "front-pass"})
	redirect := func(to string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, http.StatusFound) })
	}
	front.Handle("/elsewhere.tgz", redirect(target.URL+"/app-0.3.0.tgz"))
	front.Handle("/metadata.tgz", redirect("http://169.254.169.254/latest/meta-data/x.tgz"))
	front.Handle("/file.tgz", redirect("file:///etc/passwd"))
	front.Handle("/loop.tgz", redirect("/loop.tgz"))
	creds := chartfetch.Ref{Username: "u", Password: "front-pass"}

	t.Run("followed, credentials not forwarded to another origin", func(t *testing.T) {
		ref := creds
		ref.URL = front.URL + "/elsewhere.tgz"
		res, err := newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), ref)
		require.NoError(t, err)
		assert.Equal(t, sha(archive), res.Digest)
		reqs := target.Requests()
		require.Len(t, reqs, 1)
		assert.False(t, reqs[0].Authorization)
	})
	t.Run("to the metadata address", func(t *testing.T) {
		ref := creds
		ref.URL = front.URL + "/metadata.tgz"
		_, err := newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), ref)
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress)
	})
	t.Run("to file://", func(t *testing.T) {
		ref := creds
		ref.URL = front.URL + "/file.tgz"
		_, err := newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), ref)
		require.ErrorIs(t, err, chartfetch.ErrUnsupportedURL)
	})
	t.Run("redirect loop", func(t *testing.T) {
		ref := creds
		ref.URL = front.URL + "/loop.tgz"
		_, err := newFetcher(t, chartfetch.Options{MaxRedirects: 3}).Fetch(ctx(t), ref)
		require.ErrorIs(t, err, chartfetch.ErrTooManyRedirects)
	})
	t.Run("the dial guard sees the redirect's connection", func(t *testing.T) {
		_, blockedPort, err := net.SplitHostPort(target.Host)
		require.NoError(t, err)
		guard := func(network, address string) error {
			if strings.HasSuffix(address, ":"+blockedPort) {
				return fmt.Errorf("port %s is off limits", blockedPort)
			}
			return loopbackGuard(network, address)
		}
		ref := creds
		ref.URL = front.URL + "/elsewhere.tgz"
		_, err = newFetcher(t, chartfetch.Options{DialGuard: guard}).Fetch(ctx(t), ref)
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress)
		assert.Contains(t, err.Error(), "off limits")
	})
}

func TestFetchUnreachableHost(t *testing.T) {
	t.Run("accepts and never answers", func(t *testing.T) {
		addr := silentListener(t)
		f := newFetcher(t, chartfetch.Options{Timeout: 300 * time.Millisecond})
		_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: "http://" + addr, Repo: "app", Version: "1.0.0"})
		require.ErrorIs(t, err, chartfetch.ErrTimeout)
		assert.Contains(t, err.Error(), addr)
	})
	t.Run("OCI registry that never answers", func(t *testing.T) {
		addr := silentListener(t)
		f := newFetcher(t, chartfetch.Options{Timeout: 300 * time.Millisecond})
		_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: "oci://" + addr + "/charts/app", Version: "1.0.0"})
		require.ErrorIs(t, err, chartfetch.ErrTimeout)
		assert.Contains(t, err.Error(), addr)
	})
	t.Run("closed port", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		ln.Close()
		_, err = newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), chartfetch.Ref{URL: "http://" + addr + "/app-1.0.0.tgz"})
		require.ErrorIs(t, err, chartfetch.ErrUnreachable)
		assert.Contains(t, err.Error(), addr)
	})
}
