// Package samplecharts gives tests the sample chart fireworks-app in every version it
// exists in: loaded as Helm charts, as their example values files, packaged into a Helm
// chart repository directory, or as the chart directory in the source checkout for tests
// that hand a path to Helm or to the compositor binary.
//
// The charts and everything but the paths come from package samples, which builds them
// into the compositor binary; this package adds what only a source checkout has.
package samplecharts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/samples"
)

// ChartName is the name of the sample chart, in Chart.yaml and in the repository index.
const ChartName = samples.ChartName

// ErrUnknownVersion is returned for a chart version that is not one of Versions().
var ErrUnknownVersion = samples.ErrUnknownVersion

// ErrNoRepoRoot is returned when the checkout's samples/charts cannot be found.
var ErrNoRepoRoot = errors.New("cannot find the compositor repository root")

// Example is one example values file for a chart version.
type Example = samples.Example

// Versions returns the published versions of fireworks-app, oldest first.
func Versions() []string { return samples.Versions() }

// Load returns fireworks-app at version, loaded by Helm's chart loader.
func Load(version string) (*chart.Chart, error) { return samples.Load(version) }

// Examples returns the example values files of version, sorted by name.
func Examples(version string) ([]Example, error) { return samples.Examples(version) }

// Package writes fireworks-app-<version>.tgz for every version into dir, plus a Helm
// repository index.yaml whose URLs are relative to dir, so any HTTP server serving dir is
// a chart repository. dir is created if needed.
func Package(dir string) error { return samples.Package(dir) }

// chartsRel is where package samples keeps the charts, from the repository root.
var chartsRel = filepath.Join("samples", "charts")

// ChartsDir returns the absolute path of samples/charts in the source checkout.
func ChartsDir() (string, error) {
	// The source file's own location works from any package of this module built on
	// this machine; the walk from the working directory covers -trimpath builds.
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "..", "..", chartsRel)
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
			charts := filepath.Join(dir, chartsRel)
			if isDir(charts) {
				return charts, nil
			}
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("%w: no go.mod with %s above %s", ErrNoRepoRoot, chartsRel, wd)
		}
	}
}

// Dir returns the chart directory that version is built from (1.1.6 → the 1.1.5 directory).
func Dir(version string) (string, error) {
	src, err := samples.SourceDir(version)
	if err != nil {
		return "", err
	}
	charts, err := ChartsDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(charts, filepath.FromSlash(src)), nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
