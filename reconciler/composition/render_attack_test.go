package composition

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/compositor-dev/compositor/policies"
)

// lookupHelm is a Helm whose API server is srv, that knows ConfigMaps, Services and
// Pods: enough for the templates' lookup, without a cluster.
func lookupHelm(srv *httptest.Server) *Helm {
	mapper := meta.NewDefaultRESTMapper(nil)
	for _, kind := range []string{"ConfigMap", "Service", "Pod"} {
		mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: kind}, meta.RESTScopeNamespace)
	}
	return &Helm{config: &rest.Config{Host: srv.URL}, mapper: mapper, log: logr.Discard()}
}

func askingChart(tpl string) *chart.Chart {
	return &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "asks", Version: "0.1.0"},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(tpl)}},
	}
}

// The install render's lookups are requests that end at the render's deadline: an API
// server (or an aggregated API) slow to answer a template's lookup does not keep a
// request, and the render's slot, after the render was refused.
func TestInstallLookupsEndAtTheRenderDeadline(t *testing.T) {
	asked := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-release:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	defer close(release)
	h := lookupHelm(srv)
	ch := askingChart(`x: {{ lookup "v1" "ConfigMap" "team-a" "slow" | toJson | quote }}`)
	engine, err := policies.NewEngine(context.Background(), policies.Options{Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	opts := InstallOptions{Gate: &installGate{judge: policies.NewJudge(policies.JudgeOptions{Engine: engine})}}
	_, err = h.render(context.Background(), ch, opts, nil, policies.RenderOptions{ReleaseName: "r", Namespace: "team-a"})
	require.Error(t, err)
	select {
	case <-asked:
	default:
		t.Fatal("the template's lookup asked nothing of the API server")
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the lookup's request was still open 5s after the render's deadline of 300ms")
	}
}

// A lookup names one object: a name (or namespace) that is no path segment would have
// the request reach a subresource (a Service's proxy, a Pod's log) or another path,
// and is refused before any request is made.
func TestInstallLookupNamesAreObjectNames(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer srv.Close()
	lookup := lookupHelm(srv).lookup(context.Background(), "team-a", nil, lookupBoundsOf(0))
	for _, q := range [][4]string{
		{"v1", "Service", "team-a", "web:80/proxy/admin"},
		{"v1", "Pod", "team-a", "p/log"},
		{"v1", "ConfigMap", "team-a", ".."},
		{"v1", "ConfigMap", "team-a/configmaps/x", ""},
		{"v1", "ConfigMap", "..", ""},
	} {
		_, err := lookup(q[0], q[1], q[2], q[3])
		assert.Error(t, err, "%v", q)
	}
	mu.Lock()
	assert.Empty(t, paths, "requests made")
	mu.Unlock()

	// A plain lookup still asks, and finds nothing.
	obj, err := lookup("v1", "ConfigMap", "team-a", "plain")
	require.NoError(t, err)
	assert.Nil(t, obj)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"/api/v1/namespaces/team-a/configmaps/plain"}, paths)
}

// Whatever text the sandbox rendered, Helm's render of the prerendered chart gives it
// back unchanged, under the same name: braces, trim markers, comments, backquotes and
// what looks like Helm's own actions included.
func TestPrerenderedGivesBackAnyText(t *testing.T) {
	alphabet := []string{"{", "{", "}", "}", "-", " ", "`", "/*", "*/", "a", "\n", "\"", "|", "(", ")", ".Values", "template", "define", "end", "<no", "value>"}
	rng := rand.New(rand.NewPCG(47, 47))
	ch := &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "c", Version: "0.1.0"}}
	for i := range 3000 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		text := b.String()
		if strings.Contains(text, "<no value>") {
			continue // refused: errNoValue
		}
		files := map[string]string{"c/templates/x.yaml": text, "c/charts/sub/templates/y.yaml": text + "!", "c/templates/NOTES.txt": "n" + text}
		out, err := prerendered(ch, files)
		require.NoError(t, err)
		vals, err := chartutilValues(out)
		require.NoError(t, err)
		got, err := engine.Render(out, vals)
		require.NoError(t, err, "case %d: %q", i, text)
		assert.Equal(t, files, got, "case %d: %q", i, text)
	}
}

func chartutilValues(ch *chart.Chart) (chartcommon.Values, error) {
	return chartutil.ToRenderValues(ch, map[string]any{}, chartcommon.ReleaseOptions{Name: "r", Namespace: "n", Revision: 1, IsInstall: true}, nil)
}
