package policies

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
)

// Until the cluster's capabilities are first read, a caller waits for the read no
// longer than its own deadline, and a discovery that does not answer holds nobody
// else: admission's first writes get an error that says so, not the API server's
// timeout. Once discovery answers, the capabilities are what it said.
func TestCapabilitiesAreWaitedForNoLongerThanTheCallersDeadline(t *testing.T) {
	answer := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-answer:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/version":
			_, _ = w.Write([]byte(`{"major":"1","minor":"99","gitVersion":"v1.99.0"}`))
		case "/api":
			_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
		case "/apis":
			_, _ = w.Write([]byte(`{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`))
		case "/api/v1":
			_, _ = w.Write([]byte(`{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","namespaced":true,"kind":"ConfigMap","verbs":["get"]}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
	require.NoError(t, err)
	caps := NewClusterCapabilities(memory.NewMemCacheClient(dc))
	caps.Warm()

	for range 2 { // the second caller is not held behind the first
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := caps.Get(ctx) // before the fix, this waited for discovery, holding every other caller
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "the cluster's .Capabilities are not read yet")
	}

	close(answer)
	got, err := caps.Get(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "v1.99.0", got.KubeVersion.Version)
	assert.Contains(t, got.APIVersions, "v1/ConfigMap")
}
