package chartserver

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"

	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"
)

// RepositoryOptions configure a Helm HTTP repository.
type RepositoryOptions struct {
	// Dir is served as the repository root: packaged charts (*.tgz) and, unless
	// AbsoluteURLs is set, its index.yaml (generated with relative URLs if missing).
	Dir string
	// AbsoluteURLs serves an index generated from Dir's archives whose URLs are
	// absolute (this server's URL) instead of relative.
	AbsoluteURLs bool
	// TLS serves https with a self-signed certificate for 127.0.0.1 (Repository.CAPEM).
	TLS bool
	// Username and Password, when set, are required (basic auth) on every path.
	Username string
	Password string
	// Addr is the listen address; default 127.0.0.1 on a free port.
	Addr string
}

// Repository is a running Helm HTTP repository.
type Repository struct {
	// URL is the repository URL (no trailing slash), e.g. http://127.0.0.1:41234.
	URL string
	// Host is host:port.
	Host string
	// CAPEM is the server certificate in PEM when TLS is on; trust it as a CA.
	CAPEM []byte
	// Log records every request, including refused ones.
	*RequestLog

	opts RepositoryOptions
	srv  *httptest.Server
	mux  *http.ServeMux

	mu    sync.RWMutex
	index []byte // generated index; nil serves Dir/index.yaml
}

// NewRepository starts a repository and stops it when the test ends.
func NewRepository(t TB, opts RepositoryOptions) *Repository {
	t.Helper()
	r, err := StartRepository(opts)
	if err != nil {
		t.Fatalf("starting chart repository: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// StartRepository starts a repository; call Close when done.
func StartRepository(opts RepositoryOptions) (*Repository, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("chartserver: RepositoryOptions.Dir is required")
	}
	r := &Repository{RequestLog: &RequestLog{}, opts: opts, mux: http.NewServeMux()}
	r.mux.HandleFunc("/index.yaml", r.serveIndex)
	r.mux.Handle("/", http.FileServerFS(os.DirFS(opts.Dir)))

	srv, caPEM, err := start(opts.Addr, opts.TLS, r.wrap(basicAuth(opts.Username, opts.Password, r.mux)))
	if err != nil {
		return nil, err
	}
	r.srv, r.CAPEM, r.URL, r.Host = srv, caPEM, srv.URL, hostOf(srv.URL)
	if err := r.Reindex(); err != nil {
		srv.Close()
		return nil, err
	}
	return r, nil
}

// Reindex regenerates the served index from Dir's archives (only needed after adding
// archives when the index is generated: AbsoluteURLs, or Dir had no index.yaml).
func (r *Repository) Reindex() error {
	_, statErr := os.Stat(filepath.Join(r.opts.Dir, "index.yaml"))
	if !r.opts.AbsoluteURLs && statErr == nil {
		r.mu.Lock()
		r.index = nil
		r.mu.Unlock()
		return nil
	}
	base := ""
	if r.opts.AbsoluteURLs {
		base = r.URL
	}
	idx, err := repo.IndexDirectory(r.opts.Dir, base)
	if err != nil {
		return fmt.Errorf("indexing %s: %w", r.opts.Dir, err)
	}
	idx.SortEntries()
	b, err := yaml.Marshal(idx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.index = b
	r.mu.Unlock()
	return nil
}

func (r *Repository) serveIndex(w http.ResponseWriter, req *http.Request) {
	r.mu.RLock()
	b := r.index
	r.mu.RUnlock()
	if b == nil {
		http.ServeFile(w, req, filepath.Join(r.opts.Dir, "index.yaml"))
		return
	}
	w.Header().Set("Content-Type", "application/x-yaml")
	_, _ = w.Write(b)
}

// Handle adds a route (behind the same auth and request log), e.g. a redirect or a
// misbehaving endpoint. More specific patterns win over the file server.
func (r *Repository) Handle(pattern string, h http.Handler) { r.mux.Handle(pattern, h) }

// Client returns an HTTP client that trusts the repository's certificate.
func (r *Repository) Client() *http.Client { return r.srv.Client() }

// Close stops the server.
func (r *Repository) Close() { r.srv.Close() }
