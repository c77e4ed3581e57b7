// Package samples is the sample chart fireworks-app, built into the compositor binary, in
// every version it exists in: loaded as Helm charts, as their example values files, or
// packaged into a Helm chart repository (files in a directory, or an HTTP handler that
// `compositor dev` serves). The charts' files are in charts/; nothing here reads the
// source checkout, so a `go install`-ed binary has them too.
//
// Version 1.1.6 has no directory of its own: it is the 1.1.5 chart with its version
// changed, so the two can never drift apart.
package samples

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/ignore"
)

// ChartName is the name of the sample chart, in Chart.yaml and in the repository index.
const ChartName = "fireworks-app"

// ErrUnknownVersion is returned for a chart version that is not one of Versions().
var ErrUnknownVersion = errors.New("unknown sample chart version")

// The all: prefix keeps .helmignore and _helpers.tpl, which go:embed leaves out otherwise.
//
//go:embed all:charts/fireworks-app
var embedded embed.FS

// files is the chart repository's source: fireworks-app/<dir>/ and fireworks-app/examples/.
var files = must(fs.Sub(embedded, "charts"))

func must(f fs.FS, err error) fs.FS {
	if err != nil {
		panic(err)
	}
	return f
}

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

// SourceDir returns the directory, relative to charts/ in this package, that version
// is built from (1.1.6 → fireworks-app/1.1.5).
func SourceDir(version string) (string, error) {
	src, ok := sourceDirs[version]
	if !ok {
		return "", fmt.Errorf("%w: %q (have %s)", ErrUnknownVersion, version, strings.Join(Versions(), ", "))
	}
	return path.Join(ChartName, src), nil
}

// Load returns fireworks-app at version, loaded by Helm's chart loader from the files
// built into the binary, with the chart's .helmignore applied as `helm` applies it to a
// chart directory.
func Load(version string) (*chart.Chart, error) {
	dir, err := SourceDir(version)
	if err != nil {
		return nil, err
	}
	buffered, err := chartFiles(files, dir)
	if err != nil {
		return nil, fmt.Errorf("load %s %s: %w", ChartName, version, err)
	}
	ch, err := loader.LoadFiles(buffered)
	if err != nil {
		return nil, fmt.Errorf("load %s %s: %w", ChartName, version, err)
	}
	ch.Metadata.Version = version
	return ch, nil
}

// chartFiles reads the chart directory dir of fsys the way loader.LoadDir reads one
// from disk: .helmignore rules and Helm's defaults decide what is left out.
func chartFiles(fsys fs.FS, dir string) ([]*archive.BufferedFile, error) {
	rules := ignore.Empty()
	if b, err := fs.ReadFile(fsys, path.Join(dir, ignore.HelmIgnore)); err == nil {
		if rules, err = ignore.Parse(bytes.NewReader(b)); err != nil {
			return nil, fmt.Errorf("%s: %w", ignore.HelmIgnore, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	rules.AddDefaults()

	var out []*archive.BufferedFile
	err := fs.WalkDir(fsys, dir, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(name, dir), "/")
		if rel == "" {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if rules.Ignore(rel, info) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		out = append(out, &archive.BufferedFile{Name: rel, Data: data})
		return nil
	})
	return out, err
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
	dir := path.Join(ChartName, "examples", src)
	entries, err := fs.ReadDir(files, dir)
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
		b, err := fs.ReadFile(files, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Example{Name: name, Valid: valid, Values: b})
	}
	slices.SortFunc(out, func(a, b Example) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
