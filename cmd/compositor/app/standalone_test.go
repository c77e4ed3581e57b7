package app

import (
	"errors"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/samples"
)

// The compositor binary stands alone: no package under test/ is linked into it, so
// nothing it does depends on the source checkout (issue #16).
func TestBinaryLinksNoTestPackage(t *testing.T) {
	const module = "github.com/compositor-dev/compositor"
	cmd := exec.Command("go", "list", "-deps", module+"/cmd/compositor")
	out, err := cmd.Output()
	var stderr []byte
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "go list: %s", stderr)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, module+"/samples", "go list saw the binary's dependencies")
	for _, dep := range deps {
		assert.False(t, dep == module+"/test" || strings.HasPrefix(dep, module+"/test/"),
			"cmd/compositor links %s", dep)
	}
}

// dev's sample chart repository is the charts built into the binary, over HTTP.
func TestServeSampleCharts(t *testing.T) {
	url, stop, err := serveSampleCharts("127.0.0.1:0")
	require.NoError(t, err)
	res, err := http.Get(url + "/index.yaml")
	require.NoError(t, err)
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	var index repo.IndexFile
	require.NoError(t, yaml.Unmarshal(b, &index))
	var versions []string
	for _, cv := range index.Entries[samples.ChartName] {
		versions = append(versions, cv.Version)
	}
	assert.ElementsMatch(t, samples.Versions(), versions)

	stop()
	_, err = http.Get(url + "/index.yaml")
	assert.Error(t, err, "stopped")
}
