package policies

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// moreCharts names a folder of unpacked charts (their dependencies in charts/) to
// measure the unread-values warnings on too: public charts, for the numbers of issue
// #49's note. The repository's own charts are always measured.
var moreCharts = flag.String("unread.charts", "", "a folder of unpacked charts to measure the unread-values warnings on")

// TestUnreadValuesOnCharts measures the unread-values warnings on real charts: on the
// chart's own values.yaml and on every values path its templates name (.Values.a.b in
// the text, which a user may set), any warning is a false positive; and of the
// one-letter typos of the keys of values.yaml, those warned with the right
// suggestion are counted.
func TestUnreadValuesOnCharts(t *testing.T) {
	dirs := []string{"../samples/charts/fireworks-app/1.1.5", "../samples/charts/fireworks-app/2.0.0",
		"../test/e2e/testdata/sub-app", "../test/e2e/testdata/typo-app"}
	if *moreCharts != "" {
		entries, err := os.ReadDir(*moreCharts)
		require.NoError(t, err)
		for _, e := range entries {
			dirs = append(dirs, filepath.Join(*moreCharts, e.Name()))
		}
	}
	var charts, falsePositives, typos, caught, wrong, topTypos, topCaught int
	for i, dir := range dirs {
		ch, err := loader.LoadDir(dir)
		if err != nil {
			t.Logf("%s: not a chart: %v", dir, err)
			continue
		}
		charts++
		known := chartKnownValues(ch)
		fp := told(known.unread(ch.Values, nil, nil, nil, nil), -1)
		fp = append(fp, told(known.unread(templatePaths(ch), nil, nil, nil, nil), -1)...)
		for _, u := range fp {
			t.Logf("%s: false positive: %s", ch.Name(), strings.Join(u.Path, "."))
		}
		falsePositives += len(fp)
		if i < 4 {
			assert.Empty(t, fp, "the repository's chart %s", ch.Name())
		}
		for _, path := range typoCandidates(ch.Values, nil) {
			typo := slices.Clone(path)
			typo[len(typo)-1] = oneLetterTypo(path[len(path)-1])
			spec := map[string]any{}
			setPath(spec, typo, "x")
			typos++
			if len(path) == 1 {
				topTypos++
			}
			for _, u := range told(known.unread(spec, nil, nil, nil, nil), -1) {
				switch {
				case slices.Equal(u.Path, typo) && slices.Equal(u.Suggestion, path):
					caught++
					if len(path) == 1 {
						topCaught++
					}
				case slices.Equal(u.Path, typo):
				default:
					wrong++
					t.Logf("%s: typo %s warned as %s", ch.Name(), strings.Join(typo, "."), strings.Join(u.Path, "."))
				}
			}
		}
	}
	t.Logf("%d charts: %d false positives; %d of %d one-letter typos of values.yaml keys warned with the right suggestion (%d of %d top-level keys); %d other warnings",
		charts, falsePositives, caught, typos, topCaught, topTypos, wrong)
	assert.Zero(t, wrong, "a typo is warned at its own path only")
	if *moreCharts == "" {
		assert.Greater(t, caught, typos/2, "most typos of the repository's charts are caught")
	}
}

var (
	valuesRef      = regexp.MustCompile(`\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)`)
	templateAction = regexp.MustCompile(`(?s)\{\{(.*?)\}\}`)
	commentAction  = regexp.MustCompile(`^-?\s*/\*`)
)

// templatePaths are the values the actions of every template of ch (not its
// subcharts, not in comments) name as .Values.a.b, set to a string each: what a user
// reading the templates may set.
func templatePaths(ch *chart.Chart) map[string]any {
	var paths [][]string
	for _, f := range ch.Templates {
		for _, a := range templateAction.FindAllStringSubmatch(string(f.Data), -1) {
			if commentAction.MatchString(a[1]) {
				continue
			}
			for _, m := range valuesRef.FindAllStringSubmatch(a[1], -1) {
				paths = append(paths, strings.Split(strings.TrimPrefix(m[1], "."), "."))
			}
		}
	}
	// Longest first: a path that is the prefix of another is a map, not a string.
	slices.SortFunc(paths, func(a, b []string) int { return len(b) - len(a) })
	spec := map[string]any{}
	for _, p := range paths {
		setPath(spec, p, "x")
	}
	return spec
}

// typoCandidates are the paths of values' keys, at any depth, of five letters or more.
func typoCandidates(values map[string]any, prefix []string) [][]string {
	var out [][]string
	for k, v := range values {
		path := append(slices.Clone(prefix), k)
		if len(k) >= 5 && oneLetterTypo(k) != k {
			if _, clash := values[oneLetterTypo(k)]; !clash {
				out = append(out, path)
			}
		}
		if m, ok := v.(map[string]any); ok {
			out = append(out, typoCandidates(m, path)...)
		}
	}
	return out
}

// oneLetterTypo swaps the two letters in the middle of key: replicaCount, replicCaount.
func oneLetterTypo(key string) string {
	b := []byte(key)
	i := len(b)/2 - 1
	b[i], b[i+1] = b[i+1], b[i]
	return string(b)
}

// setPath sets path in m to v, making maps as needed; a value in the way is left.
func setPath(m map[string]any, path []string, v any) {
	for _, seg := range path[:len(path)-1] {
		next, ok := m[seg].(map[string]any)
		if !ok {
			if _, taken := m[seg]; taken {
				return
			}
			next = map[string]any{}
			m[seg] = next
		}
		m = next
	}
	if _, taken := m[path[len(path)-1]]; !taken {
		m[path[len(path)-1]] = v
	}
}
