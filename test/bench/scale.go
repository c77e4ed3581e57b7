package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"

	"github.com/compositor-dev/compositor/test/chartserver"
)

// scaleNamespace holds the many definitions.
const scaleNamespace = "scale"

// manyDefinitions is /validate with one definition of interest and then with n more
// present, each of a chart of its own.
type manyDefinitions struct {
	Definitions int `json:"definitions"`
	// Ready is how many of them were Ready when measured, after ReadySeconds.
	Ready        int     `json:"ready"`
	ReadySeconds float64 `json:"readySeconds"`
	Before       result  `json:"before"`
	After        result  `json:"after"`
	// RSSBefore and RSSAfter are Compositor's resident memory, in MiB.
	RSSBefore float64 `json:"rssBeforeMiB"`
	RSSAfter  float64 `json:"rssAfterMiB"`
}

// measureManyDefinitions measures /validate at concurrency 1, then creates o.definitions
// definitions of distinct generated charts, waits for them (at most o.scaleWait), and
// measures again.
func measureManyDefinitions(ctx context.Context, o options, rep *report, d *dev, w *world, dir string) error {
	calls := compositionCreates(benchNamespace, 200, w.spec)
	m := &manyDefinitions{Definitions: o.definitions}
	var err error
	logf("composition create /validate at concurrency 1 before adding %d definitions", o.definitions)
	if m.Before, err = drive(ctx, d.endpoint, "composition create /validate", calls, 1, o.warmup, o.duration); err != nil {
		return err
	}
	if m.RSSBefore, err = rssMiB(d.pid); err != nil {
		return err
	}

	chartDir := filepath.Join(dir, "scale-charts")
	if err := generateCharts(chartDir, o.definitions); err != nil {
		return err
	}
	repo, err := chartserver.StartRepository(chartserver.RepositoryOptions{Dir: chartDir, Addr: "127.0.0.1:0"})
	if err != nil {
		return err
	}
	defer repo.Close()
	if err := d.createNamespace(ctx, scaleNamespace, nil); err != nil {
		return err
	}
	logf("creating %d definitions", o.definitions)
	start := time.Now()
	if err := createDefinitions(ctx, d, repo.URL, o.definitions); err != nil {
		return err
	}
	waitErr := d.waitDefinitionsReady(ctx, scaleNamespace, o.definitions, o.scaleWait)
	m.ReadySeconds = time.Since(start).Seconds()
	if m.Ready, _, err = d.readyDefinitions(ctx, scaleNamespace); err != nil {
		return err
	}
	if waitErr != nil {
		logf("measuring with %d of %d definitions Ready: %v", m.Ready, o.definitions, waitErr)
	}
	logf("composition create /validate at concurrency 1 with %d more definitions", o.definitions)
	if m.After, err = drive(ctx, d.endpoint, "composition create /validate", calls, 1, o.warmup, o.duration); err != nil {
		return err
	}
	if m.RSSAfter, err = rssMiB(d.pid); err != nil {
		return err
	}
	rep.ManyDefinitions = m
	return nil
}

// createDefinitions creates n definitions, chart i of repoURL each, eight at a time.
func createDefinitions(ctx context.Context, d *dev, repoURL string, n int) error {
	var (
		mu       sync.Mutex
		firstErr error
	)
	inParallel(ctx, n, func(i int) {
		name := scaleChartName(i)
		if err := d.applyDefinition(ctx, scaleNamespace, name, repoURL, name, "1.0.0"); err != nil {
			mu.Lock()
			firstErr = cmpErr(firstErr, fmt.Errorf("creating definition %s: %w", name, err))
			mu.Unlock()
		}
	})
	return firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func scaleChartName(i int) string { return fmt.Sprintf("scale-%04d", i) }

// generateCharts writes n small charts into dir: one ConfigMap template and a
// two-key schema each, every one with a name (and so a kind) of its own.
func generateCharts(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	schema := []byte(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "message": {"type": "string", "maxLength": 64},
    "replicas": {"type": "integer", "minimum": 1, "maximum": 5}
  }
}`)
	template := []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
data:
  message: {{ .Values.message | quote }}
  replicas: {{ .Values.replicas | quote }}
`)
	for i := range n {
		ch := &chart.Chart{
			Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: scaleChartName(i), Version: "1.0.0", Type: "application"},
			Values:    map[string]any{"message": "hello", "replicas": 1},
			Raw:       []*chartcommon.File{{Name: chartutil.ValuesfileName, Data: []byte("message: hello\nreplicas: 1\n")}},
			Schema:    schema,
			Templates: []*chartcommon.File{{Name: "templates/configmap.yaml", Data: template}},
		}
		if _, err := chartutil.Save(ch, dir); err != nil {
			return fmt.Errorf("packaging chart %s: %w", ch.Name(), err)
		}
	}
	return nil
}

// rssMiB is the resident memory of process pid, in MiB.
func rssMiB(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	stat, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return float64(stat.ResidentMemory()) / (1 << 20), nil
}
