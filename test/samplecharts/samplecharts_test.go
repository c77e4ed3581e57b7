package samplecharts

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

func TestChartsDirFromElsewhere(t *testing.T) {
	want, err := ChartsDir()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join("samples", "charts"), filepath.Join(filepath.Base(filepath.Dir(want)), filepath.Base(want)))
	t.Chdir(t.TempDir())
	got, err := ChartsDir()
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// Dir is the directory a version is built from, and Helm loads the same chart from it
// as Load gives.
func TestDir(t *testing.T) {
	for _, v := range Versions() {
		dir, err := Dir(v)
		require.NoError(t, err)
		fromDir, err := loader.LoadDir(dir)
		require.NoError(t, err)
		ch, err := Load(v)
		require.NoError(t, err)
		fromDir.Metadata.Version = v
		assert.Equal(t, fromDir.Metadata, ch.Metadata, v)
		assert.Equal(t, contents(fromDir.Templates), contents(ch.Templates), v)
	}
	d115, err := Dir("1.1.5")
	require.NoError(t, err)
	d116, err := Dir("1.1.6")
	require.NoError(t, err)
	assert.Equal(t, d115, d116)
	_, err = Dir("9.9.9")
	assert.ErrorIs(t, err, ErrUnknownVersion)
}

// contents are the files' names and data, in order: Helm 4 also records when a file
// on disk was modified, which an embedded chart does not know.
func contents(files []*chartcommon.File) []string {
	out := make([]string, 0, 2*len(files))
	for _, f := range files {
		out = append(out, f.Name, string(f.Data))
	}
	return out
}
