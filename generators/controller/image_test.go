package controller

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestDefaultImageFollowsChart keeps DefaultImage on the image `make image` builds and
// the chart installs: repository from values.yaml, tag from Chart.yaml's appVersion.
func TestDefaultImageFollowsChart(t *testing.T) {
	chartDir := filepath.Join("..", "..", "charts", "compositor")
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &chart))
	var values struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
	}
	data, err = os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &values))
	require.Equal(t, values.Image.Repository+":"+chart.AppVersion, DefaultImage)
}
