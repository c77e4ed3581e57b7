package samples

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/cli"
	"helm.sh/helm/v4/pkg/engine"
	"helm.sh/helm/v4/pkg/getter"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

func TestVersions(t *testing.T) {
	assert.Equal(t, []string{"1.1.5", "1.1.6", "2.0.0"}, Versions())
}

func TestLoad(t *testing.T) {
	for _, v := range Versions() {
		t.Run(v, func(t *testing.T) {
			ch, err := Load(v)
			require.NoError(t, err)
			assert.Equal(t, ChartName, ch.Name())
			assert.Equal(t, v, ch.Metadata.Version)
			assert.Equal(t, chart.APIVersionV2, ch.Metadata.APIVersion)
			assert.NotEmpty(t, ch.Schema, "values.schema.json")
			require.Len(t, ch.Dependencies(), 1)
			cache := ch.Dependencies()[0]
			assert.Equal(t, "cache", cache.Name())
			assert.NotEmpty(t, cache.Schema, "subchart values.schema.json")
			require.Len(t, ch.Metadata.Dependencies, 1)
			assert.Equal(t, "cache.enabled", ch.Metadata.Dependencies[0].Condition)
		})
	}
}

func TestLoadUnknownVersion(t *testing.T) {
	_, err := Load("9.9.9")
	assert.True(t, errors.Is(err, ErrUnknownVersion), "got %v", err)
	_, err = Examples("1.0.0")
	assert.True(t, errors.Is(err, ErrUnknownVersion), "got %v", err)
}

// 1.1.6 must be 1.1.5 with only the version changed.
func TestVersion116IsVersion115(t *testing.T) {
	a, err := Load("1.1.5")
	require.NoError(t, err)
	b, err := Load("1.1.6")
	require.NoError(t, err)
	assert.Equal(t, "1.1.6", b.Metadata.Version)
	b.Metadata.Version = "1.1.5"
	assert.Equal(t, a.Metadata, b.Metadata)
	assert.Equal(t, a.Values, b.Values)
	assert.Equal(t, a.Schema, b.Schema)
	assert.Equal(t, a.Templates, b.Templates)
}

// render does what `helm template` does with values: dependency conditions, coalescing,
// schema validation, then the template engine.
func render(t *testing.T, ch *chart.Chart, valuesYAML []byte) (map[string]runtime.Object, error) {
	t.Helper()
	vals, err := chartcommon.ReadValues(valuesYAML)
	require.NoError(t, err)
	if err := chartutil.ProcessDependencies(ch, vals); err != nil {
		return nil, err
	}
	rv, err := chartvalues.ToRenderValues(ch, vals, chartcommon.ReleaseOptions{Name: "demo", Namespace: "apps", IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(clientgoscheme.Scheme, serializer.EnableStrict)
	objs := map[string]runtime.Object{}
	for name, content := range files {
		if strings.HasSuffix(name, "NOTES.txt") || strings.TrimSpace(content) == "" {
			continue
		}
		for _, doc := range releaseutil.SplitManifests(content) {
			obj, gvk, err := codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
			require.NoError(t, err, "%s:\n%s", name, doc)
			meta, err := runtimeMetaName(obj)
			require.NoError(t, err)
			objs[gvk.GroupVersion().String()+"/"+gvk.Kind+"/"+meta] = obj
		}
	}
	return objs, nil
}

func runtimeMetaName(obj runtime.Object) (string, error) {
	acc, ok := obj.(interface{ GetName() string })
	if !ok {
		return "", errors.New("object without a name")
	}
	return acc.GetName(), nil
}

func keys(m map[string]runtime.Object) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestRenderDefaults(t *testing.T) {
	want := []string{
		"apps/v1/Deployment/demo-fireworks-app",
		"v1/ConfigMap/demo-config",
		"v1/Service/demo-fireworks-app",
	}
	for _, v := range Versions() {
		t.Run(v, func(t *testing.T) {
			ch, err := Load(v)
			require.NoError(t, err)
			objs, err := render(t, ch, nil)
			require.NoError(t, err)
			assert.Equal(t, want, keys(objs))
		})
	}
}

func TestRenderOptionalObjects(t *testing.T) {
	ch, err := Load("1.1.5")
	require.NoError(t, err)
	objs, err := render(t, ch, []byte("cache:\n  enabled: true\n"))
	require.NoError(t, err)
	assert.Contains(t, keys(objs), "v1/ConfigMap/demo-cache")

	ch, err = Load("2.0.0")
	require.NoError(t, err)
	objs, err = render(t, ch, []byte("exposure: public\n"))
	require.NoError(t, err)
	assert.Contains(t, keys(objs), "networking.k8s.io/v1/Ingress/demo-fireworks-app")
	assert.NotContains(t, keys(objs), "v1/ConfigMap/demo-cache")
}

func TestExamples(t *testing.T) {
	for _, v := range Versions() {
		examples, err := Examples(v)
		require.NoError(t, err)
		var valid, invalid int
		for _, ex := range examples {
			t.Run(v+"/"+ex.Name, func(t *testing.T) {
				ch, err := Load(v)
				require.NoError(t, err)
				_, err = render(t, ch, ex.Values)
				if ex.Valid {
					valid++
					assert.NoError(t, err)
				} else {
					invalid++
					assert.ErrorContains(t, err, "values don't meet the specifications of the schema")
				}
			})
		}
		assert.GreaterOrEqual(t, valid, 3, v)
		assert.GreaterOrEqual(t, invalid, 3, v)
	}
}

func TestPackage(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, Package(dir))

	index, err := repo.LoadIndexFile(filepath.Join(dir, "index.yaml"))
	require.NoError(t, err)
	entries := index.Entries[ChartName]
	require.Len(t, entries, len(Versions()))
	var seen []string
	for _, e := range entries {
		seen = append(seen, e.Version)
		require.Len(t, e.URLs, 1)
		assert.Equal(t, ChartName+"-"+e.Version+".tgz", e.URLs[0], "relative URL")

		archive := filepath.Join(dir, e.URLs[0])
		b, err := os.ReadFile(archive)
		require.NoError(t, err)
		sum := sha256.Sum256(b)
		assert.Equal(t, hex.EncodeToString(sum[:]), e.Digest)

		ch, err := loader.Load(archive)
		require.NoError(t, err)
		assert.Equal(t, e.Version, ch.Metadata.Version)
		assert.Len(t, ch.Dependencies(), 1)
		assert.NotEmpty(t, ch.Schema)
	}
	sort.Strings(seen)
	assert.Equal(t, Versions(), seen)
}

// The embedded chart is what Helm loads from the chart directory in the checkout.
func TestLoadMatchesDirectory(t *testing.T) {
	for _, v := range Versions() {
		t.Run(v, func(t *testing.T) {
			src, err := SourceDir(v)
			require.NoError(t, err)
			want, err := loader.LoadDir(filepath.Join("charts", filepath.FromSlash(src)))
			require.NoError(t, err)
			want.Metadata.Version = v
			got, err := Load(v)
			require.NoError(t, err)
			assert.Equal(t, want.Metadata, got.Metadata)
			assert.Equal(t, want.Values, got.Values)
			assert.Equal(t, want.Schema, got.Schema)
			assert.Equal(t, contents(want.Templates), contents(got.Templates))
			assert.Equal(t, contents(want.Files), contents(got.Files))
			assert.Equal(t, contents(want.Raw), contents(got.Raw))
			require.Len(t, got.Dependencies(), len(want.Dependencies()))
			for i, dep := range want.Dependencies() {
				assert.Equal(t, dep.Metadata, got.Dependencies()[i].Metadata)
				assert.Equal(t, contents(dep.Templates), contents(got.Dependencies()[i].Templates))
				assert.Equal(t, dep.Schema, got.Dependencies()[i].Schema)
			}
		})
	}
}

// A .helmignore pattern, or one of Helm's defaults, keeps a file or a directory out of
// the loaded chart, as it does from a chart directory; the embedded charts keep the files
// go:embed leaves out by default.
func TestLoadAppliesHelmignore(t *testing.T) {
	fsys := fstest.MapFS{
		"c/Chart.yaml":             {Data: []byte("apiVersion: v2\nname: c\nversion: 1.0.0\n")},
		"c/.helmignore":            {Data: []byte("*.bak\nscratch/\n")},
		"c/templates/cm.yaml":      {Data: []byte("kind: ConfigMap\n")},
		"c/templates/cm.yaml.bak":  {Data: []byte("old\n")},
		"c/scratch/notes.txt":      {Data: []byte("x\n")},
		"c/templates/_helpers.tpl": {Data: []byte("")},
	}
	got, err := chartFiles(fsys, "c")
	require.NoError(t, err)
	var names []string
	for _, f := range got {
		names = append(names, f.Name)
	}
	assert.ElementsMatch(t, []string{"Chart.yaml", ".helmignore", "templates/cm.yaml", "templates/_helpers.tpl"}, names)

	ch, err := Load("1.1.5")
	require.NoError(t, err)
	names = nil
	for _, f := range ch.Templates {
		names = append(names, f.Name)
	}
	assert.Contains(t, names, "templates/_helpers.tpl", "files starting with _ are embedded")
}

// The repository, served over HTTP, is one Helm's own client can use.
func TestRepositoryServesHelm(t *testing.T) {
	r, err := NewRepository()
	require.NoError(t, err)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)

	chartRepo, err := repo.NewChartRepository(&repo.Entry{Name: "samples", URL: srv.URL}, getter.All(&cli.EnvSettings{}))
	require.NoError(t, err)
	chartRepo.CachePath = t.TempDir()
	indexPath, err := chartRepo.DownloadIndexFile()
	require.NoError(t, err)
	index, err := repo.LoadIndexFile(indexPath)
	require.NoError(t, err)
	for _, v := range Versions() {
		cv, err := index.Get(ChartName, v)
		require.NoError(t, err, v)
		res, err := srv.Client().Get(srv.URL + "/" + cv.URLs[0])
		require.NoError(t, err)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, cv.URLs[0])
		sum := sha256.Sum256(b)
		assert.Equal(t, cv.Digest, hex.EncodeToString(sum[:]), v)
		ch, err := loader.LoadArchive(bytes.NewReader(b))
		require.NoError(t, err)
		assert.Equal(t, v, ch.Metadata.Version)
	}

	for path, status := range map[string]int{"/nothing.tgz": http.StatusNotFound, "/": http.StatusNotFound} {
		res, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, status, res.StatusCode, path)
	}
	res, err := srv.Client().Post(srv.URL+"/index.yaml", "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
}

// contents are the files' names and data, in order: Helm 4 also records when a file
// on disk was modified, which an embedded chart does not know.
func contents(files []*chartcommon.File) []string {
	out := make([]string, 0, 2*len(files))
	for _, f := range files {
		out = append(out, f.Name, string(f.Data))
	}
	return out
}
