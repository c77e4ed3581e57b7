package chartfetch_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// pushSamples pushes every sample chart version under <registry>/charts and returns
// the chart URL and the repository directory the archives came from.
func pushSamples(t *testing.T, reg *chartserver.Registry) (string, string) {
	t.Helper()
	dir := sampleRepoDir(t)
	var chartURL string
	for _, v := range samplecharts.Versions() {
		u, err := reg.PushFile(filepath.Join(dir, samplecharts.ChartName+"-"+v+".tgz"), "charts")
		require.NoError(t, err)
		chartURL = u
	}
	reg.Reset()
	return chartURL, dir
}

func TestFetchFromOCI(t *testing.T) {
	cases := []struct {
		name string
		opts chartserver.RegistryOptions
		ref  func(*chartserver.Registry) chartfetch.Ref
	}{
		{
			name: "plain http on loopback, anonymous",
			ref:  func(*chartserver.Registry) chartfetch.Ref { return chartfetch.Ref{} },
		},
		{
			name: "plain http on loopback, basic auth",
			opts: chartserver.RegistryOptions{Username: "ci", Password: "oci-pass"},
			ref: func(*chartserver.Registry) chartfetch.Ref {
				return chartfetch.Ref{Username: "ci", Password: "oci-pass"}
			},
		},
		{
			name: "tls with a custom CA and basic auth",
			opts: chartserver.RegistryOptions{TLS: true, Username: "ci", Password: "oci-pass"},
			ref: func(r *chartserver.Registry) chartfetch.Ref {
				return chartfetch.Ref{CAData: r.CAPEM, Username: "ci", Password: "oci-pass"}
			},
		},
		{
			name: "tls, insecureSkipVerifyTLS",
			opts: chartserver.RegistryOptions{TLS: true},
			ref: func(*chartserver.Registry) chartfetch.Ref {
				return chartfetch.Ref{InsecureSkipVerifyTLS: true}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := chartserver.NewRegistry(t, tc.opts)
			chartURL, dir := pushSamples(t, reg)
			f := newFetcher(t, chartfetch.Options{CacheDir: t.TempDir()})

			ref := tc.ref(reg)
			ref.URL, ref.Version = chartURL, "2.0.0"
			res, err := f.Fetch(ctx(t), ref)
			require.NoError(t, err)
			assert.Equal(t, samplecharts.ChartName, res.Chart.Name())
			assert.Equal(t, "2.0.0", res.Chart.Metadata.Version)
			assert.Equal(t, fileDigest(t, filepath.Join(dir, "fireworks-app-2.0.0.tgz")), res.Digest)
			assert.Equal(t, chartURL+":2.0.0", res.PackageURL)
			assert.False(t, res.FromCache)
			pulls := reg.BlobGets()
			assert.Positive(t, pulls)

			again, err := f.Fetch(ctx(t), ref)
			require.NoError(t, err)
			assert.True(t, again.FromCache)
			assert.Equal(t, res.Digest, again.Digest)
			assert.Equal(t, pulls, reg.BlobGets(), "no blob downloaded on a cache hit")
		})
	}
}

func TestFetchFromOCIRejectsBadCredentials(t *testing.T) {
	reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{Username: "ci", Password: "oci-pass"})
	chartURL, _ := pushSamples(t, reg)
	f := newFetcher(t, chartfetch.Options{CacheDir: t.TempDir()})

	_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: chartURL, Version: "1.1.5", Username: "ci", Password: "wrong-oci-pass"})
	require.ErrorIs(t, err, chartfetch.ErrUnauthorized)
	assert.Contains(t, err.Error(), reg.Host)
	assert.NotContains(t, err.Error(), "wrong-oci-pass")

	_, err = f.Fetch(ctx(t), chartfetch.Ref{URL: chartURL, Version: "1.1.5"})
	require.ErrorIs(t, err, chartfetch.ErrUnauthorized)
}

func TestFetchFromOCIMissingVersionOrChart(t *testing.T) {
	reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{})
	chartURL, _ := pushSamples(t, reg)
	f := newFetcher(t, chartfetch.Options{})

	_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: chartURL, Version: "3.0.0"})
	require.ErrorIs(t, err, chartfetch.ErrVersionNotFound)
	for _, want := range []string{samplecharts.ChartName, "3.0.0", "2.0.0"} {
		assert.Contains(t, err.Error(), want)
	}

	_, err = f.Fetch(ctx(t), chartfetch.Ref{URL: reg.URL + "/charts/nothing", Version: "1.0.0"})
	require.ErrorIs(t, err, chartfetch.ErrNotFound)

	_, err = f.Fetch(ctx(t), chartfetch.Ref{URL: chartURL})
	require.ErrorIs(t, err, chartfetch.ErrInvalidRef, "OCI needs a version")

	_, err = f.Fetch(ctx(t), chartfetch.Ref{URL: chartURL + ":1.1.5", Version: "2.0.0"})
	require.ErrorIs(t, err, chartfetch.ErrInvalidRef, "tag and version disagree")
}

func TestFetchFromOCIWithRegistryConfigFile(t *testing.T) {
	reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{Username: "ci", Password: "oci-pass"})
	chartURL, _ := pushSamples(t, reg)

	config := map[string]any{"auths": map[string]any{
		reg.Host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("ci:oci-pass"))},
	}}
	b, err := json.Marshal(config)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "config.json")
	require.NoError(t, os.WriteFile(path, b, 0o600))

	f := newFetcher(t, chartfetch.Options{RegistryConfigPath: path})
	res, err := f.Fetch(ctx(t), chartfetch.Ref{URL: chartURL, Version: "1.1.6"})
	require.NoError(t, err)
	assert.Equal(t, "1.1.6", res.Chart.Metadata.Version)
}

func TestFetchFromOCIEnforcesArchiveLimit(t *testing.T) {
	reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{})
	chartURL, _ := pushSamples(t, reg)
	f := newFetcher(t, chartfetch.Options{Limits: chartfetch.Limits{MaxArchiveBytes: 2048}})

	_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: chartURL, Version: "2.0.0"})
	require.ErrorIs(t, err, chartfetch.ErrArchiveTooLarge)
}
