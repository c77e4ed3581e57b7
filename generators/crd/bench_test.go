package crd

import (
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/test/samplecharts"
)

// BenchmarkBuildFireworksApp measures what the reconciler does per definition change:
// translate the three chart versions (subchart included) and build the validated CRD.
func BenchmarkBuildFireworksApp(b *testing.B) {
	var charts []*chart.Chart
	for _, v := range samplecharts.Versions() {
		ch, err := samplecharts.Load(v)
		if err != nil {
			b.Fatal(err)
		}
		charts = append(charts, ch)
	}
	b.ReportAllocs()
	for b.Loop() {
		var versions []ServedVersion
		for _, ch := range charts {
			spec, _, err := TranslateChart(ch)
			if err != nil {
				b.Fatal(err)
			}
			versions = append(versions, ServedVersion{ChartVersion: ch.Metadata.Version, Spec: spec})
		}
		if _, _, err := Build(BuildOptions{ChartName: samplecharts.ChartName, Versions: versions, Conversion: fireworksWebhook}); err != nil {
			b.Fatal(err)
		}
	}
}
