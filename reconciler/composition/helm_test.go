package composition

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// countingListener is a loopback HTTP server that counts the requests it gets.
func countingListener(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var count atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		count.Add(1)
		_, _ = w.Write([]byte(`{"type":"string"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &count
}

// watchedFile is a named pipe whose opening for reading is recorded: a reader that
// opens it blocks until the recorder has written and closed it, so once the reader is
// done, the record is there.
func watchedFile(t *testing.T) (string, *atomic.Bool) {
	path := filepath.Join(t.TempDir(), "secret.json")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	var read atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // blocks until someone reads
		if err != nil {
			return
		}
		read.Store(true)
		_, _ = f.WriteString(`{"type":"string"}`)
		_ = f.Close()
	}()
	t.Cleanup(func() {
		// Open the pipe ourselves, so that the recorder stops waiting.
		if f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			<-done
			_ = f.Close()
		}
	})
	return path, &read
}

// refChart has a values.schema.json whose $refs point to a loopback listener and to
// a local file.
func refChart(httpRef, fileRef string) *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "refs", Version: "0.1.0"},
		Values:   map[string]any{"a": "x", "b": "y"},
		Schema:   []byte(`{"type":"object","properties":{"a":{"$ref":"` + httpRef + `"},"b":{"$ref":"file://` + fileRef + `"}}}`),
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-refs'}\ndata: {a: '{{ .Values.a }}'}\n")}},
	}
}

// Issue 12, item 2: Helm never loads the references of a chart's schema, on install
// or upgrade; Compositor's validator refuses them without loading them either.
func TestHelmNeverLoadsSchemaReferences(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "refs"}}))
	listener, requests := countingListener(t)
	file, read := watchedFile(t)
	ch := refChart(listener.URL+"/a.json", file)

	helm, err := NewHelm(cp.Config, testSeal(t), logr.Discard())
	require.NoError(t, err)
	_, rel, err := helm.UpgradeInstall(ctx, "refs", "r", ch, map[string]any{"a": "one"}, InstallOptions{})
	require.NoError(t, err)
	_, _, err = helm.UpgradeInstall(ctx, "refs", "r", ch, map[string]any{"a": "two"}, InstallOptions{Last: rel})
	require.NoError(t, err)
	cm := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "refs", Name: "r-refs"}, cm))
	assert.Equal(t, "two", cm.Data["a"], "installed, then upgraded")

	vs, err := policies.NewJSONSchemaValidator(0).ValidateValues(ctx, ch, "", map[string]any{"a": "one"})
	assert.ErrorIs(t, err, policies.ErrRemoteRef, "Compositor's validator refuses the references: %v", vs)

	assert.Zero(t, requests.Load(), "the loopback listener got no request")
	assert.False(t, read.Load(), "the referenced file was never read")

	// The listener does count: Helm's own check, which the controller turns off,
	// loads the reference.
	// Only the listener's reference: the schema's properties compile in map order, so a
	// failing file reference could come first and stop Helm before it asks.
	control := refChart(listener.URL+"/a.json", "/nonexistent.json")
	control.Schema = []byte(`{"type":"object","properties":{"a":{"$ref":"` + listener.URL + `/a.json"}}}`)
	_ = chartvalues.ValidateAgainstSchema(control, map[string]any{"a": "one"})
	assert.NotZero(t, requests.Load(), "Helm's own schema check loads $refs")
}

// Issue 15: Helm's client-side check of manifests against the OpenAPI schema is off
// (it kept a copy of every served schema per Helm client); the API server refuses a
// template's unknown fields instead, on install and on upgrade alike, and the release
// says why: server-side apply names the field the schema does not declare.
func TestTheAPIServerRefusesUnknownFieldsOfTemplates(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "strict"}}))
	manifest := func(field string) *chart.Chart {
		return &chart.Chart{
			Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "strict", Version: "0.1.0"},
			Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(
				"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-cm'}\n" + field + ": {a: b}\n")}},
		}
	}
	helm, err := NewHelm(cp.Config, testSeal(t), logr.Discard())
	require.NoError(t, err)

	_, _, err = helm.UpgradeInstall(ctx, "strict", "typo", manifest("dataa"), nil, InstallOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), ".dataa: field not declared in schema")
	assert.Error(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "strict", Name: "typo-cm"}, &corev1.ConfigMap{}), "nothing created")

	_, rel, err := helm.UpgradeInstall(ctx, "strict", "fine", manifest("data"), nil, InstallOptions{})
	require.NoError(t, err)
	_, _, err = helm.UpgradeInstall(ctx, "strict", "fine", manifest("dataa"), nil, InstallOptions{Last: rel})
	require.Error(t, err)
	assert.Contains(t, err.Error(), ".dataa: field not declared in schema")
}
