package chartfetch_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/signing"
)

// signedSample pushes the sample charts to reg and signs 2.0.0 with key both ways: a
// bundle among the referrers and a legacy .sig tag. It returns the chart URL and the
// signed manifest's digest.
func signedSample(t *testing.T, reg *chartserver.Registry, username, password string) (string, string) {
	t.Helper()
	chartURL, _ := pushSamples(t, reg)
	key, err := signing.NewCosignKey()
	require.NoError(t, err)
	target := signing.CosignTargetOf(reg, chartURL, "2.0.0")
	target.Username, target.Password = username, password
	digest, err := signing.CosignSignChart(ctx(t), target, key)
	require.NoError(t, err)
	_, err = signing.CosignSignChartLegacy(ctx(t), target, key)
	require.NoError(t, err)
	reg.Reset()
	return chartURL, digest
}

func TestFetchSignaturesFromOCI(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts chartserver.RegistryOptions
		ref  func(*chartserver.Registry) chartfetch.Ref
	}{
		{name: "plain http on loopback, anonymous", ref: func(*chartserver.Registry) chartfetch.Ref { return chartfetch.Ref{} }},
		{
			name: "tls with a custom CA and basic auth",
			opts: chartserver.RegistryOptions{TLS: true, Username: "ci", Password: "oci-pass"},
			ref: func(r *chartserver.Registry) chartfetch.Ref {
				return chartfetch.Ref{CAData: r.CAPEM, Username: "ci", Password: "oci-pass"}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := chartserver.NewRegistry(t, tc.opts)
			chartURL, manifestDigest := signedSample(t, reg, tc.opts.Username, tc.opts.Password)
			f := newFetcher(t, chartfetch.Options{})
			ref := tc.ref(reg)
			ref.URL, ref.Version = chartURL, "2.0.0"
			res, err := f.Fetch(ctx(t), ref)
			require.NoError(t, err)

			sigs, err := f.FetchSignatures(ctx(t), ref, res)
			require.NoError(t, err)
			assert.Equal(t, manifestDigest, sigs.ManifestDigest)
			assert.Equal(t, manifestDigest, sha(sigs.Manifest), "the raw manifest")
			assert.Contains(t, string(sigs.Manifest), strings.TrimPrefix(res.Digest, "sha256:"), "its chart layer is the archive")
			require.Len(t, sigs.Bundles, 1)
			assert.Contains(t, string(sigs.Bundles[0]), "dsseEnvelope")
			require.Len(t, sigs.Legacy, 1)
			assert.Contains(t, string(sigs.Legacy[0].Payload), manifestDigest)
			_, err = base64.StdEncoding.DecodeString(sigs.Legacy[0].Signature)
			assert.NoError(t, err)
			assert.Nil(t, sigs.Legacy[0].Certificate, "signed with a key")
			assert.Nil(t, sigs.Provenance)

			if tc.opts.Username != "" {
				for _, r := range reg.Requests() {
					if r.Authorization {
						return
					}
				}
				t.Fatal("the credentials were used")
			}
		})
	}

	t.Run("unsigned", func(t *testing.T) {
		reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{})
		chartURL, _ := pushSamples(t, reg)
		f := newFetcher(t, chartfetch.Options{})
		ref := chartfetch.Ref{URL: chartURL, Version: "1.1.5"}
		res, err := f.Fetch(ctx(t), ref)
		require.NoError(t, err)
		sigs, err := f.FetchSignatures(ctx(t), ref, res)
		require.NoError(t, err, "no signature is not an error here")
		assert.NotEmpty(t, sigs.ManifestDigest)
		assert.Empty(t, sigs.Bundles)
		assert.Empty(t, sigs.Legacy)
	})

	t.Run("a version that is gone", func(t *testing.T) {
		reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{})
		chartURL, _ := pushSamples(t, reg)
		_, err := newFetcher(t, chartfetch.Options{}).FetchSignatures(ctx(t), chartfetch.Ref{URL: chartURL, Version: "9.9.9"}, nil)
		require.ErrorIs(t, err, chartfetch.ErrNotFound)
	})
}

func TestFetchSignaturesHonoursCredentials(t *testing.T) {
	reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{Username: "ci", Password: "oci-pass"})
	chartURL, manifestDigest := signedSample(t, reg, "ci", "oci-pass")
	f := newFetcher(t, chartfetch.Options{RegistryConfigPath: filepath.Join(t.TempDir(), "none.json")})

	_, err := f.FetchSignatures(ctx(t), chartfetch.Ref{URL: chartURL, Version: "2.0.0", Username: "ci", Password: "wrong-oci-pass"}, nil)
	require.ErrorIs(t, err, chartfetch.ErrUnauthorized)
	assert.Contains(t, err.Error(), reg.Host)
	assert.NotContains(t, err.Error(), "wrong-oci-pass")

	_, err = f.FetchSignatures(ctx(t), chartfetch.Ref{URL: chartURL, Version: "2.0.0"}, nil)
	require.ErrorIs(t, err, chartfetch.ErrUnauthorized, "anonymous")

	t.Run("from Helm's registry configuration", func(t *testing.T) {
		config := map[string]any{"auths": map[string]any{
			reg.Host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("ci:oci-pass"))},
		}}
		b, err := json.Marshal(config)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "config.json")
		require.NoError(t, os.WriteFile(path, b, 0o600))

		sigs, err := newFetcher(t, chartfetch.Options{RegistryConfigPath: path}).
			FetchSignatures(ctx(t), chartfetch.Ref{URL: chartURL, Version: "2.0.0"}, nil)
		require.NoError(t, err)
		assert.Equal(t, manifestDigest, sigs.ManifestDigest)
		assert.Len(t, sigs.Bundles, 1)
	})
}

// referrersAPI serves the OCI 1.1 referrers API in front of a registry that lacks it
// (distribution answers from the referrers tag schema's index) and passes everything
// else through. It counts the API calls, and the requests for a referrers tag schema
// index that passed through.
type referrersAPI struct {
	*httptest.Server
	calls, tagSchema atomic.Int32
}

var referrersPath = regexp.MustCompile(`^/v2/(.+)/referrers/sha256:([0-9a-f]{64})$`)

func newReferrersAPI(t *testing.T, reg *chartserver.Registry) *referrersAPI {
	t.Helper()
	upstream, err := url.Parse("http://" + reg.Host)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	api := &referrersAPI{}
	api.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := referrersPath.FindStringSubmatch(r.URL.Path)
		if m == nil {
			if strings.Contains(r.URL.Path, "/manifests/sha256-") && !strings.HasSuffix(r.URL.Path, ".sig") {
				api.tagSchema.Add(1)
			}
			proxy.ServeHTTP(w, r)
			return
		}
		api.calls.Add(1)
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, upstream.JoinPath("v2", m[1], "manifests", "sha256-"+m[2]).String(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json")
		resp, err := reg.Client().Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
		if resp.StatusCode == http.StatusNotFound {
			_, _ = w.Write([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`))
			return
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		_, _ = w.Write(buf.Bytes())
	}))
	t.Cleanup(api.Close)
	return api
}

func TestFetchSignaturesThroughTheReferrersAPI(t *testing.T) {
	reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{})
	chartURL, manifestDigest := signedSample(t, reg, "", "")
	api := newReferrersAPI(t, reg)
	viaAPI := strings.Replace(chartURL, reg.Host, strings.TrimPrefix(api.URL, "http://"), 1)

	sigs, err := newFetcher(t, chartfetch.Options{}).FetchSignatures(ctx(t), chartfetch.Ref{URL: viaAPI, Version: "2.0.0"}, nil)
	require.NoError(t, err)
	assert.Equal(t, manifestDigest, sigs.ManifestDigest)
	assert.Len(t, sigs.Bundles, 1)
	assert.Len(t, sigs.Legacy, 1)
	assert.Equal(t, int32(1), api.calls.Load(), "the referrers API was asked, once")
	assert.Zero(t, api.tagSchema.Load(), "the fetcher never fell back to the tag schema")
}

func TestFetchSignaturesIsBounded(t *testing.T) {
	reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{})
	chartURL, _ := pushSamples(t, reg)
	key, err := signing.NewCosignKey()
	require.NoError(t, err)
	f := newFetcher(t, chartfetch.Options{})

	t.Run("at most MaxSignatureArtifacts", func(t *testing.T) {
		target := signing.CosignTargetOf(reg, chartURL, "1.1.5")
		digest, _, err := target.Manifest(ctx(t))
		require.NoError(t, err)
		var layers []signing.CosignLegacyLayer
		for range chartfetch.MaxSignatureArtifacts + 4 {
			l, err := signing.CosignLegacyLayerFor(key, target.Repository, digest)
			require.NoError(t, err)
			layers = append(layers, l)
		}
		require.NoError(t, target.AttachLegacy(ctx(t), layers...))
		sigs, err := f.FetchSignatures(ctx(t), chartfetch.Ref{URL: chartURL, Version: "1.1.5"}, nil)
		require.NoError(t, err)
		assert.Len(t, sigs.Legacy, chartfetch.MaxSignatureArtifacts)
	})

	t.Run("a bundle over MaxSignatureBytes", func(t *testing.T) {
		target := signing.CosignTargetOf(reg, chartURL, "2.0.0")
		huge := append([]byte(`{"padding":"`), bytes.Repeat([]byte("x"), chartfetch.MaxSignatureBytes)...)
		require.NoError(t, target.AttachBundle(ctx(t), append(huge, `"}`...)))
		_, err := f.FetchSignatures(ctx(t), chartfetch.Ref{URL: chartURL, Version: "2.0.0"}, nil)
		require.ErrorIs(t, err, chartfetch.ErrArchiveTooLarge)
		assert.Contains(t, err.Error(), "over the 1048576-byte limit")
	})
}

func TestFetchSignaturesProvenance(t *testing.T) {
	archive := tinyChart(t, "app", "1.0.0")
	prov := []byte("-----BEGIN PGP SIGNED MESSAGE-----\n...\n")

	t.Run("beside a repository's archive", func(t *testing.T) {
		srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{
			Dir:      chartsDir(t, map[string][]byte{"app-1.0.0.tgz": archive, "app-1.0.0.tgz.prov": prov}),
			Username: "u", Password: "repo-pass",
		})
		f := newFetcher(t, chartfetch.Options{})
		ref := chartfetch.Ref{URL: srv.URL, Repo: "app", Version: "1.0.0", Username: "u", Password: "repo-pass"}
		res, err := f.Fetch(ctx(t), ref)
		require.NoError(t, err)
		sigs, err := f.FetchSignatures(ctx(t), ref, res)
		require.NoError(t, err)
		assert.Equal(t, prov, sigs.Provenance)
		assert.Empty(t, sigs.ManifestDigest)
		assert.Equal(t, 1, srv.CountFunc(func(r chartserver.Request) bool { return r.Path == "/app-1.0.0.tgz.prov" && r.Authorization }))
	})

	t.Run("none", func(t *testing.T) {
		srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: chartsDir(t, map[string][]byte{"app-1.0.0.tgz": archive})})
		f := newFetcher(t, chartfetch.Options{})
		ref := chartfetch.Ref{URL: srv.URL + "/app-1.0.0.tgz"}
		res, err := f.Fetch(ctx(t), ref)
		require.NoError(t, err)
		sigs, err := f.FetchSignatures(ctx(t), ref, res)
		require.NoError(t, err, "a 404 is no provenance, not an error")
		assert.Nil(t, sigs.Provenance)
		assert.Equal(t, 1, srv.Count("/app-1.0.0.tgz.prov"))
	})

	t.Run("credentials stay with the chart's origin", func(t *testing.T) {
		archive := tinyChart(t, "app", "0.3.0")
		logger := newLoggingServer(t, serveBytes(archive)) // answers every path with the archive
		origin := privateOrigin(t, map[string]http.Handler{
			"/index.yaml": serveBytes(indexOf(t, archive, logger.URL+"/app-0.3.0.tgz")),
		})
		f := newFetcher(t, chartfetch.Options{})
		ref := chartfetch.Ref{URL: origin.URL, Repo: "app", Version: "0.3.0", Username: "u", Password: "origin-pass"}
		res, err := f.Fetch(ctx(t), ref)
		require.NoError(t, err)
		sigs, err := f.FetchSignatures(ctx(t), ref, res)
		require.NoError(t, err)
		assert.Equal(t, archive, sigs.Provenance)
		paths, _ := logger.requests()
		assert.Contains(t, paths, "/app-0.3.0.tgz.prov")
		logger.noCredentials(t)
	})

	t.Run("needs the fetch result", func(t *testing.T) {
		_, err := newFetcher(t, chartfetch.Options{}).FetchSignatures(ctx(t), chartfetch.Ref{URL: "https://charts.example.test/app-1.0.0.tgz"}, nil)
		require.ErrorIs(t, err, chartfetch.ErrInvalidRef)
	})
}

// TestFetchSignaturesRefusesBlockedAddresses resolves names through an injected
// resolver into refused ranges: fetching signatures is refused at dial time, like a
// chart fetch, and nothing is dialled outside loopback.
func TestFetchSignaturesRefusesBlockedAddresses(t *testing.T) {
	resolver := &fakeResolver{hosts: map[string][]string{
		"internal.example.test": {"10.20.30.40"},
		"metadata.example.test": {"169.254.169.254"},
	}}
	for host, want := range map[string]string{"internal.example.test": "10.0.0.0/8", "metadata.example.test": "169.254.0.0/16"} {
		t.Run(host, func(t *testing.T) {
			rec := &dialRecorder{}
			f := newFetcher(t, chartfetch.Options{DialGuard: rec.guard, Resolver: resolver})
			for _, tc := range []struct {
				ref chartfetch.Ref
				res *chartfetch.Result
			}{
				{ref: chartfetch.Ref{URL: "oci://" + host + "/charts/app", Version: "1.0.0"}},
				{ref: chartfetch.Ref{URL: "https://" + host + "/app-1.0.0.tgz"}, res: &chartfetch.Result{PackageURL: "https://" + host + "/app-1.0.0.tgz"}},
			} {
				_, err := f.FetchSignatures(ctx(t), tc.ref, tc.res)
				require.ErrorIs(t, err, chartfetch.ErrBlockedAddress, tc.ref.URL)
				assert.Contains(t, err.Error(), want)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			require.NotEmpty(t, rec.seen)
			for _, a := range rec.seen {
				ip, err := netip.ParseAddrPort(a)
				require.NoError(t, err)
				assert.False(t, ip.Addr().IsLoopback(), "only the resolved addresses were judged: %s", a)
			}
		})
	}

	t.Run("an archive URL that names a refused address", func(t *testing.T) {
		f := newFetcher(t, chartfetch.Options{})
		res := &chartfetch.Result{PackageURL: "http://169.254.169.254/latest/app-1.0.0.tgz"}
		_, err := f.FetchSignatures(ctx(t), chartfetch.Ref{URL: "https://charts.example.test/charts", Repo: "app", Version: "1.0.0"}, res)
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress)
	})

	t.Run("loopback is refused by default", func(t *testing.T) {
		reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{})
		chartURL, _ := pushSamples(t, reg)
		f, err := chartfetch.New(chartfetch.Options{Resolver: resolver})
		require.NoError(t, err)
		_, err = f.FetchSignatures(ctx(t), chartfetch.Ref{URL: chartURL, Version: "2.0.0"}, nil)
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress)
		assert.Contains(t, err.Error(), "--allow-chart-network")
		assert.Empty(t, reg.Requests())

		_, port, err := net.SplitHostPort(reg.Host)
		require.NoError(t, err)
		res := &chartfetch.Result{PackageURL: "http://127.0.0.1:" + port + "/app-1.0.0.tgz"}
		_, err = f.FetchSignatures(ctx(t), chartfetch.Ref{URL: "http://127.0.0.1:" + port + "/app-1.0.0.tgz"}, res)
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress)
		assert.Empty(t, reg.Requests())
	})
}
