package chartstore

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// secretReader serves one Secret, as the API server would to Compositor.
type secretReader struct{ secret *corev1.Secret }

func (r secretReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if key != client.ObjectKeyFromObject(r.secret) {
		return errors.New("no such Secret")
	}
	r.secret.DeepCopyInto(obj.(*corev1.Secret))
	return nil
}

func (secretReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not listed")
}

// authorizationLog is a server that records the Authorization header of every request
// and answers 404.
type authorizationLog struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newAuthorizationLog(t *testing.T) *authorizationLog {
	l := &authorizationLog{}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.seen = append(l.seen, r.Header.Get("Authorization"))
		l.mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(l.Close)
	return l
}

func (l *authorizationLog) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

// The controller sends a definition's credentials to the source its spec names, the
// spec admission judged (webhooks/definitions.go re-checks every change of it), and to
// nothing else it holds: not to status.packageUrl, which records where an earlier
// archive came from and is not judged, and a chart known by digest is served without
// any request.
func TestCredentialsGoOnlyToTheSpecSource(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	origin := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir, Username: "platform", Password: "s3cret"})
	elsewhere := newAuthorizationLog(t)
	fetcher, err := chartfetch.New(chartfetch.Options{AllowNetworks: chartfetch.LoopbackNetworks()})
	require.NoError(t, err)
	source := &Source{Fetcher: fetcher, Live: secretReader{&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-s", Name: "repo-password"},
		Data:       map[string][]byte{"password": []byte("s3cret")},
	}}}
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-s", Name: "fireworks"},
		Spec: corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{
			URL: origin.URL, Repo: "fireworks-app", Version: "1.1.5",
			Credentials: &corev1alpha1.Credentials{Username: "platform", PasswordRef: corev1alpha1.SecretKeySelector{Namespace: "team-s", Name: "repo-password", Key: "password"}},
		}},
		// Written by someone with rights on the status: where an archive came from.
		Status: corev1alpha1.CompositionDefinitionStatus{PackageURL: elsewhere.URL + "/fireworks-app-1.1.5.tgz"},
	}
	ctx := context.Background()

	fetched, err := source.Fetch(ctx, def)
	require.NoError(t, err)
	assert.Positive(t, origin.CountFunc(func(r chartserver.Request) bool { return r.Authorization }), "the spec's source gets the credentials")

	// A digest the status records and memory does not hold: the chart is fetched again
	// from the spec's source, never from the status's package URL.
	def.Status.Digest = "sha256:" + "00000000000000000000000000000000000000000000000000000000000000ff"
	_, _, err = source.Chart(ctx, def)
	require.ErrorIs(t, err, ErrChartChanged)
	// The digest it does hold: no request at all.
	origin.Reset()
	def.Status.Digest = fetched.Digest
	_, _, err = source.Chart(ctx, def)
	require.NoError(t, err)
	assert.Empty(t, origin.Requests(), "served from memory")
	def.Status.Managed.VersionInfo = []corev1alpha1.VersionInfo{{Version: "v1-1-5", Served: true, Stored: true, Chart: "1.1.5"}}
	kept, err := source.Kept(ctx, def)
	require.NoError(t, err)
	assert.Equal(t, fetched.Digest, kept.Digest)
	assert.Empty(t, origin.Requests(), "what the reconciler goes on with in an outage needs no request")

	assert.Empty(t, elsewhere.requests(), "status.packageUrl is never asked")
}
