// Package samplecharts gives tests and `compositor dev` the sample chart fireworks-app
// (test/testdata/charts) in every version it exists in: loaded as Helm charts, as their
// example values files, or packaged into a Helm chart repository directory.
//
// Version 1.1.6 has no directory of its own: it is the 1.1.5 chart with its version
// changed, so the two can never drift apart.
package samplecharts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/provenance"
	"helm.sh/helm/v3/pkg/repo"
)

// ChartName is the name of the sample chart, in Chart.yaml and in the repository index.
const ChartName = "fireworks-app"

// ErrUnknownVersion is returned for a chart version that is not one of Versions().
var ErrUnknownVersion = errors.New("unknown sample chart version")

// ErrNoRepoRoot is returned when the repository's test/testdata/charts cannot be found.
var ErrNoRepoRoot = errors.New("cannot find the compositor repository root")

// sourceDirs maps each published version to the directory its files come from.
var sourceDirs = map[string]string{
	"1.1.5": "1.1.5",
	"1.1.6": "1.1.5",
	"2.0.0": "2.0.0",
}

// Versions returns the published versions of fireworks-app, oldest first.
func Versions() []string {
	vs := make([]string, 0, len(sourceDirs))
	for v := range sourceDirs {
		vs = append(vs, v)
	}
	sort.Strings(vs) // the versions compare correctly as strings
	return vs
}

// ChartsDir returns the absolute path of test/testdata/charts.
func ChartsDir() (string, error) {
	// The source file's own location works from any package of this module built on
	// this machine; the walk from the working directory covers -trimpath builds.
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "..", "testdata", "charts")
		if isDir(dir) {
			return filepath.Clean(dir), nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoRepoRoot, err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isFile(filepath.Join(dir, "go.mod")) {
			charts := filepath.Join(dir, "test", "testdata", "charts")
			if isDir(charts) {
				return charts, nil
			}
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("%w: no go.mod with test/testdata/charts above %s", ErrNoRepoRoot, wd)
		}
	}
}

// Dir returns the chart directory that version is built from (1.1.6 → the 1.1.5 directory).
func Dir(version string) (string, error) {
	src, ok := sourceDirs[version]
	if !ok {
		return "", fmt.Errorf("%w: %q (have %s)", ErrUnknownVersion, version, strings.Join(Versions(), ", "))
	}
	charts, err := ChartsDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(charts, ChartName, src), nil
}

// Load returns fireworks-app at version, loaded by Helm's chart loader.
func Load(version string) (*chart.Chart, error) {
	dir, err := Dir(version)
	if err != nil {
		return nil, err
	}
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load %s %s: %w", ChartName, version, err)
	}
	ch.Metadata.Version = version
	return ch, nil
}

// Example is one example values file for a chart version.
type Example struct {
	// Name is the file name, e.g. "values-full.yaml".
	Name string
	// Valid tells whether the values are valid under that version's values.schema.json
	// (files named values-*.yaml) or not (invalid-*.yaml).
	Valid bool
	// Values is the file's YAML.
	Values []byte
}

// Examples returns the example values files of version, sorted by name.
func Examples(version string) ([]Example, error) {
	src, ok := sourceDirs[version]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownVersion, version)
	}
	charts, err := ChartsDir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(charts, ChartName, "examples", src)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read examples of %s: %w", version, err)
	}
	var out []Example
	for _, e := range entries {
		name := e.Name()
		valid := strings.HasPrefix(name, "values-")
		if e.IsDir() || !strings.HasSuffix(name, ".yaml") || (!valid && !strings.HasPrefix(name, "invalid-")) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Example{Name: name, Valid: valid, Values: b})
	}
	slices.SortFunc(out, func(a, b Example) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Package writes fireworks-app-<version>.tgz for every version into dir, plus a Helm
// repository index.yaml whose URLs are relative to dir, so any HTTP server serving dir is
// a chart repository. dir is created if needed.
func Package(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	index := repo.NewIndexFile()
	for _, v := range Versions() {
		ch, err := Load(v)
		if err != nil {
			return err
		}
		archive, err := chartutil.Save(ch, dir)
		if err != nil {
			return fmt.Errorf("package %s %s: %w", ChartName, v, err)
		}
		digest, err := provenance.DigestFile(archive)
		if err != nil {
			return fmt.Errorf("digest %s: %w", archive, err)
		}
		if err := index.MustAdd(ch.Metadata, filepath.Base(archive), "", digest); err != nil {
			return fmt.Errorf("index %s: %w", archive, err)
		}
	}
	index.SortEntries()
	return index.WriteFile(filepath.Join(dir, "index.yaml"), 0o644)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
