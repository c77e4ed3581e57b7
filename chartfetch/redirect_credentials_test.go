package chartfetch_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/chartfetch"
)

// loggingServer records the Authorization header of every request it receives and
// answers with handler (404 when nil): where a stolen password would end up.
type loggingServer struct {
	*httptest.Server
	mu            sync.Mutex
	paths         []string
	authorization []string
}

func newLoggingServer(t *testing.T, handler http.Handler) *loggingServer {
	t.Helper()
	l := &loggingServer{}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.paths = append(l.paths, r.URL.Path)
		l.authorization = append(l.authorization, r.Header.Get("Authorization"))
		l.mu.Unlock()
		if handler == nil {
			http.NotFound(w, r)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(l.Close)
	return l
}

// requests returns the paths asked for and the Authorization headers sent with them.
func (l *loggingServer) requests() ([]string, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.paths...), append([]string(nil), l.authorization...)
}

// noCredentials asserts that l was asked something and never saw an Authorization
// header.
func (l *loggingServer) noCredentials(t *testing.T) {
	t.Helper()
	paths, authorization := l.requests()
	require.NotEmpty(t, paths, "the redirect was followed to the logging server")
	for i, a := range authorization {
		assert.Empty(t, a, "%s carried an Authorization header", paths[i])
	}
}

// privateOrigin is a chart source behind basic auth (user "u", password
// "origin-pass") that serves routes; every request that reaches a route carried the
// credentials.
func privateOrigin(t *testing.T, routes map[string]http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "u" || p != "origin-pass" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func redirectTo(to string, code int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, code) })
}

func serveBytes(b []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(b) })
}

// indexOf is a repository index.yaml naming app 0.3.0 at archiveURL.
func indexOf(t *testing.T, archive []byte, archiveURL string) []byte {
	t.Helper()
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	require.NoError(t, err)
	idx := repo.NewIndexFile()
	require.NoError(t, idx.MustAdd(ch.Metadata, "app-0.3.0.tgz", "", sha(archive)))
	idx.Entries["app"][0].URLs = []string{archiveURL}
	b, err := yaml.Marshal(idx)
	require.NoError(t, err)
	return b
}

// The credentials of a chart source go to its origin (scheme, host and port) and to no
// other, whatever the source answers: net/http itself forwards an Authorization header
// on a redirect to the same host name on another port, to a subdomain, and after 307
// and 308, so the fetcher strips it on every redirect that leaves the origin.
func TestRedirectsNeverCarryCredentialsToAnotherOrigin(t *testing.T) {
	archive := tinyChart(t, "app", "0.3.0")
	creds := chartfetch.Ref{Username: "u", Password: "origin-pass"}

	t.Run("the index, to another port of the same host", func(t *testing.T) {
		logger := newLoggingServer(t, nil)
		origin := privateOrigin(t, map[string]http.Handler{"/index.yaml": redirectTo(logger.URL+"/index.yaml", http.StatusFound)})
		requireSameHostOtherPort(t, origin.URL, logger.URL)
		ref := creds
		ref.URL, ref.Repo, ref.Version = origin.URL, "app", "0.3.0"
		_, err := newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), ref)
		require.ErrorIs(t, err, chartfetch.ErrNotFound)
		logger.noCredentials(t)
	})
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run("the archive, "+http.StatusText(code), func(t *testing.T) {
			logger := newLoggingServer(t, serveBytes(archive))
			origin := privateOrigin(t, map[string]http.Handler{
				"/index.yaml":    serveBytes(indexOf(t, archive, "app-0.3.0.tgz")),
				"/app-0.3.0.tgz": redirectTo(logger.URL+"/app-0.3.0.tgz", code),
			})
			ref := creds
			ref.URL, ref.Repo, ref.Version = origin.URL, "app", "0.3.0"
			res, err := newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), ref)
			require.NoError(t, err, "followed")
			assert.Equal(t, sha(archive), res.Digest)
			logger.noCredentials(t)
		})
	}
	t.Run("a chain through two other origins", func(t *testing.T) {
		last := newLoggingServer(t, serveBytes(archive))
		middle := newLoggingServer(t, redirectTo(last.URL+"/app-0.3.0.tgz", http.StatusTemporaryRedirect))
		origin := privateOrigin(t, map[string]http.Handler{"/app.tgz": redirectTo(middle.URL+"/hop", http.StatusFound)})
		ref := creds
		ref.URL = origin.URL + "/app.tgz"
		_, err := newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), ref)
		require.NoError(t, err)
		middle.noCredentials(t)
		last.noCredentials(t)
	})
	t.Run("credentials written into the redirect's URL", func(t *testing.T) {
		logger := newLoggingServer(t, serveBytes(archive))
		target, err := url.Parse(logger.URL + "/app-0.3.0.tgz")
		require.NoError(t, err)
		target.User = url.UserPassword("u", "origin-pass")
		origin := privateOrigin(t, map[string]http.Handler{"/app.tgz": redirectTo(target.String(), http.StatusFound)})
		ref := creds
		ref.URL = origin.URL + "/app.tgz"
		_, err = newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), ref)
		require.ErrorIs(t, err, chartfetch.ErrUnsupportedURL)
		assert.NotContains(t, err.Error(), "origin-pass")
		paths, _ := logger.requests()
		assert.Empty(t, paths, "never asked")
	})
	t.Run("a signed redirect that is refused is not repeated in the error", func(t *testing.T) {
		origin := privateOrigin(t, map[string]http.Handler{
			"/app.tgz": redirectTo("http://169.254.169.254/blob?X-Amz-Signature=secret-signature", http.StatusFound),
		})
		ref := creds
		ref.URL = origin.URL + "/app.tgz"
		_, err := newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), ref)
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress)
		assert.NotContains(t, err.Error(), "secret-signature")
		assert.Contains(t, err.Error(), "169.254.169.254", "the refused address is still named")
	})
	t.Run("within the origin they are kept", func(t *testing.T) {
		origin := privateOrigin(t, map[string]http.Handler{
			"/old.tgz":       redirectTo("/app-0.3.0.tgz", http.StatusMovedPermanently),
			"/app-0.3.0.tgz": serveBytes(archive),
		})
		ref := creds
		ref.URL = origin.URL + "/old.tgz"
		res, err := newFetcher(t, chartfetch.Options{}).Fetch(ctx(t), ref)
		require.NoError(t, err, "the origin, which requires them, got them after the redirect too")
		assert.Equal(t, sha(archive), res.Digest)
	})
}

// requireSameHostOtherPort checks the premise of a case: both servers share a host
// name, the case net/http's own redirect rule lets an Authorization header through.
func requireSameHostOtherPort(t *testing.T, a, b string) {
	t.Helper()
	ua, err := url.Parse(a)
	require.NoError(t, err)
	ub, err := url.Parse(b)
	require.NoError(t, err)
	require.Equal(t, ua.Hostname(), ub.Hostname())
	require.NotEqual(t, ua.Port(), ub.Port())
	require.False(t, strings.EqualFold(ua.Host, ub.Host))
}
