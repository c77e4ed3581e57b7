package samples

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/provenance"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"
)

// Repository is every version of fireworks-app packaged as a Helm chart repository in
// memory: an index.yaml whose URLs are relative, and one fireworks-app-<version>.tgz per
// version. As an http.Handler it serves those files at the root of its path.
type Repository struct {
	files   map[string][]byte // file name → content
	created time.Time
}

var _ http.Handler = (*Repository)(nil)

// NewRepository packages every version of the sample chart.
func NewRepository() (*Repository, error) {
	// Helm packages charts into a directory only; read them back and drop it.
	dir, err := os.MkdirTemp("", "compositor-samples-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	r := &Repository{files: map[string][]byte{}, created: time.Now()}
	index := repo.NewIndexFile()
	for _, v := range Versions() {
		ch, err := Load(v)
		if err != nil {
			return nil, err
		}
		archive, err := chartutil.Save(ch, dir)
		if err != nil {
			return nil, fmt.Errorf("package %s %s: %w", ChartName, v, err)
		}
		digest, err := provenance.DigestFile(archive)
		if err != nil {
			return nil, fmt.Errorf("digest %s: %w", archive, err)
		}
		name := filepath.Base(archive)
		if err := index.MustAdd(ch.Metadata, name, "", digest); err != nil {
			return nil, fmt.Errorf("index %s: %w", name, err)
		}
		if r.files[name], err = os.ReadFile(archive); err != nil {
			return nil, err
		}
	}
	index.SortEntries()
	b, err := yaml.Marshal(index)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	r.files["index.yaml"] = b
	return r, nil
}

// Package writes the repository's files into dir, so any HTTP server serving dir is a
// chart repository. dir is created if needed.
func Package(dir string) error {
	r, err := NewRepository()
	if err != nil {
		return err
	}
	return r.WriteDir(dir)
}

// WriteDir writes the repository's files into dir, created if needed.
func (r *Repository) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, b := range r.files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ServeHTTP serves GET and HEAD of index.yaml and the chart archives.
func (r *Repository) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(req.URL.Path, "/")
	b, ok := r.files[name]
	if !ok {
		http.NotFound(w, req)
		return
	}
	if strings.HasSuffix(name, ".yaml") {
		w.Header().Set("Content-Type", "application/x-yaml")
	} else {
		w.Header().Set("Content-Type", "application/gzip")
	}
	http.ServeContent(w, req, name, r.created, bytes.NewReader(b))
}
