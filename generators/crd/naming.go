package crd

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/Masterminds/semver/v3"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrInvalidChartName means a chart name cannot become a Kind and plural that the API
// server accepts: after splitting on '-', '_' and '.', it must be ASCII letters and
// digits, start with a letter (a name like "2048-game" is refused rather than renamed,
// so two charts can never be mapped to the same kind by an invented prefix), and give a
// plural of at most 63 characters.
var ErrInvalidChartName = errors.New("chart name cannot become a Kubernetes kind")

// ErrInvalidChartVersion means a chart version is not semantic versioning, or its
// served version name would not be a DNS-1035 label (at most 63 characters).
var ErrInvalidChartVersion = errors.New("chart version cannot become a CRD version name")

// Kind returns the PascalCase kind for a chart name: "fireworks-app" → "FireworksApp",
// "x-app" → "XApp". Letters after the first of each part keep their case.
func Kind(chartName string) (string, error) {
	if chartName == "" {
		return "", fmt.Errorf("%w: empty name", ErrInvalidChartName)
	}
	parts := strings.FieldsFunc(chartName, func(r rune) bool { return r == '-' || r == '_' || r == '.' })
	var b strings.Builder
	for _, p := range parts {
		for i, r := range p {
			if r > unicode.MaxASCII || !(unicode.IsLetter(r) || unicode.IsDigit(r)) {
				return "", fmt.Errorf("%w: %q contains %q", ErrInvalidChartName, chartName, r)
			}
			if i == 0 {
				r = unicode.ToUpper(r)
			}
			b.WriteRune(r)
		}
	}
	kind := b.String()
	if kind == "" {
		return "", fmt.Errorf("%w: %q has no letters or digits", ErrInvalidChartName, chartName)
	}
	if !unicode.IsLetter(rune(kind[0])) {
		return "", fmt.Errorf("%w: %q must start with a letter", ErrInvalidChartName, chartName)
	}
	if errs := validation.IsDNS1035Label(plural(strings.ToLower(kind))); len(errs) > 0 {
		return "", fmt.Errorf("%w: %q: plural %s", ErrInvalidChartName, chartName, strings.Join(errs, "; "))
	}
	return kind, nil
}

// Plural returns the resource name for a chart name: the lower-case kind with an
// English plural ending ("fireworksapps", "redises", "policies").
func Plural(chartName string) (string, error) {
	kind, err := Kind(chartName)
	if err != nil {
		return "", err
	}
	return plural(strings.ToLower(kind)), nil
}

func plural(s string) string {
	switch {
	case strings.HasSuffix(s, "s"), strings.HasSuffix(s, "x"), strings.HasSuffix(s, "z"),
		strings.HasSuffix(s, "ch"), strings.HasSuffix(s, "sh"):
		return s + "es"
	case strings.HasSuffix(s, "y") && len(s) > 1 && !strings.ContainsRune("aeiou", rune(s[len(s)-2])):
		return s[:len(s)-1] + "ies"
	}
	return s + "s"
}

// VersionName returns the served version name for a chart version:
// v<major>-<minor>-<patch>[-<prerelease>], with build metadata dropped and the
// pre-release lower-cased with '.' turned into '-' ("1.0.0-rc.1" → "v1-0-0-rc-1",
// "1.2.3+build.7" → "v1-2-3"). Versions differing only in build metadata or in the
// case of their pre-release share a name.
func VersionName(chartVersion string) (string, error) {
	v, err := semver.NewVersion(chartVersion)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrInvalidChartVersion, chartVersion, err)
	}
	name := fmt.Sprintf("v%d-%d-%d", v.Major(), v.Minor(), v.Patch())
	if pre := v.Prerelease(); pre != "" {
		name += "-" + strings.ToLower(strings.ReplaceAll(pre, ".", "-"))
	}
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return "", fmt.Errorf("%w: %q gives %q: %s", ErrInvalidChartVersion, chartVersion, name, strings.Join(errs, "; "))
	}
	return name, nil
}
