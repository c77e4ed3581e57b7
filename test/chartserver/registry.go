package chartserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/bcrypt"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	helmregistry "helm.sh/helm/v4/pkg/registry"

	// The storage driver and auth backend register themselves by name.
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

// RegistryOptions configure an OCI registry.
type RegistryOptions struct {
	// Username and Password, when set, are required (htpasswd basic auth).
	Username string
	Password string
	// TLS serves https with a self-signed certificate for 127.0.0.1 (Registry.CAPEM);
	// without it the registry speaks plain HTTP.
	TLS bool
	// Addr is the listen address; default 127.0.0.1 on a free port.
	Addr string
}

// Registry is a running distribution registry with in-memory storage.
type Registry struct {
	// Host is host:port, e.g. 127.0.0.1:41234.
	Host string
	// URL is oci://Host.
	URL string
	// CAPEM is the server certificate in PEM when TLS is on.
	CAPEM []byte
	// Log records every request, pushes included (Reset it after pushing).
	*RequestLog

	opts RegistryOptions
	srv  *httptest.Server
	app  *handlers.App
	dir  string // htpasswd and Helm's credentials file
}

var quietLogrus sync.Once

// NewRegistry starts a registry and stops it when the test ends.
func NewRegistry(t TB, opts RegistryOptions) *Registry {
	t.Helper()
	r, err := StartRegistry(opts)
	if err != nil {
		t.Fatalf("starting OCI registry: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// StartRegistry starts a registry; call Close when done. distribution logs every
// refused or missing lookup through logrus' standard logger; StartRegistry silences it
// below fatal once per process (the registry's own main sets the same global).
func StartRegistry(opts RegistryOptions) (*Registry, error) {
	quietLogrus.Do(func() { logrus.SetLevel(logrus.FatalLevel) })

	dir, err := os.MkdirTemp("", "chartserver-registry-")
	if err != nil {
		return nil, err
	}
	r := &Registry{RequestLog: &RequestLog{}, opts: opts, dir: dir}

	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cfg := &configuration.Configuration{}
	cfg.HTTP.Secret = hex.EncodeToString(secret)
	cfg.Storage = configuration.Storage{
		"inmemory": configuration.Parameters{},
		// No background purger goroutine outliving the test.
		"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
	}
	if opts.Username != "" || opts.Password != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(opts.Password), bcrypt.MinCost)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(opts.Username+":"+string(hash)+"\n"), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		cfg.Auth = configuration.Auth{"htpasswd": configuration.Parameters{"realm": "chartserver", "path": htpasswd}}
	}

	r.app = handlers.NewApp(context.Background(), cfg)
	srv, caPEM, err := start(opts.Addr, opts.TLS, r.wrap(r.app))
	if err != nil {
		_ = r.app.Shutdown()
		os.RemoveAll(dir)
		return nil, err
	}
	r.srv, r.CAPEM, r.Host = srv, caPEM, hostOf(srv.URL)
	r.URL = "oci://" + r.Host
	return r, nil
}

// Push pushes a packaged chart (.tgz bytes) with Helm's registry client to
// <Host>/<repoPath>/<chart name>:<chart version> and returns the chart's oci:// URL
// without the tag (what spec.chart.url holds), e.g. oci://127.0.0.1:41234/charts/app.
func (r *Registry) Push(archive []byte, repoPath string) (string, error) {
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return "", fmt.Errorf("reading chart to push: %w", err)
	}
	client, err := r.client()
	if err != nil {
		return "", err
	}
	repository := r.Host + "/" + strings.Trim(repoPath, "/") + "/" + ch.Name()
	if strings.Trim(repoPath, "/") == "" {
		repository = r.Host + "/" + ch.Name()
	}
	tag := strings.ReplaceAll(ch.Metadata.Version, "+", "_")
	if _, err := client.Push(archive, repository+":"+tag, helmregistry.PushOptStrictMode(false)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", repository, err)
	}
	return "oci://" + repository, nil
}

// PushFile pushes the packaged chart at path; see Push.
func (r *Registry) PushFile(path, repoPath string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return r.Push(b, repoPath)
}

// MustPush is Push that fails the test on error.
func (r *Registry) MustPush(t TB, archive []byte, repoPath string) string {
	t.Helper()
	u, err := r.Push(archive, repoPath)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return u
}

func (r *Registry) client() (*helmregistry.Client, error) {
	opts := []helmregistry.ClientOption{
		helmregistry.ClientOptHTTPClient(r.srv.Client()),
		helmregistry.ClientOptWriter(io.Discard),
		// A file of our own, so pushing never reads or writes the user's Helm config.
		helmregistry.ClientOptCredentialsFile(filepath.Join(r.dir, "helm-registry.json")),
	}
	if !r.opts.TLS {
		opts = append(opts, helmregistry.ClientOptPlainHTTP())
	}
	if r.opts.Username != "" || r.opts.Password != "" {
		opts = append(opts, helmregistry.ClientOptBasicAuth(r.opts.Username, r.opts.Password))
	}
	return helmregistry.NewClient(opts...)
}

// BlobGets counts GET requests for blobs (config and chart layers): the archive
// downloads.
func (r *Registry) BlobGets() int {
	return r.CountFunc(func(q Request) bool {
		return q.Method == http.MethodGet && strings.Contains(q.Path, "/blobs/")
	})
}

// Client returns an HTTP client that trusts the registry's certificate.
func (r *Registry) Client() *http.Client { return r.srv.Client() }

// Close stops the server and the registry.
func (r *Registry) Close() {
	r.srv.Close()
	_ = r.app.Shutdown()
	os.RemoveAll(r.dir)
}
