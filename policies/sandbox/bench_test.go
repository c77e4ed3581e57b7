package sandbox

import (
	"context"
	"os"
	"testing"

	"github.com/compositor-dev/compositor/policies"
)

// BenchmarkRenderFireworks renders fireworks-app 1.1.5 with values-full.yaml in-process
// and through a worker (the chart already in the worker, as after the first request).
func BenchmarkRenderFireworks(b *testing.B) {
	ch := loadChart(b, "1.1.5")
	spec := typicalSpec(b)
	opts := policies.RenderOptions{ReleaseName: "x", Namespace: "team-a"}
	b.Run("in-process", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := policies.Render(ch, spec, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("worker", func(b *testing.B) {
		p := newPool(b, Options{Workers: 1})
		ctx := context.Background()
		if _, err := p.Render(ctx, "warm-up", ch, "sha256:bench", spec, opts); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Render(ctx, "rendering", ch, "sha256:bench", spec, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSchemaFireworks is the schema check of the same values, in-process and
// through a worker.
func BenchmarkSchemaFireworks(b *testing.B) {
	ch := loadChart(b, "1.1.5")
	spec := typicalSpec(b)
	ctx := context.Background()
	b.Run("in-process", func(b *testing.B) {
		v := policies.NewJSONSchemaValidator(0)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.ValidateValues(ctx, ch, "sha256:bench", spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("worker", func(b *testing.B) {
		p := newPool(b, Options{Workers: 1})
		if _, err := p.ValidateValues(ctx, "warm-up", ch, "sha256:bench", spec); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.ValidateValues(ctx, "the schema check", ch, "sha256:bench", spec); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWorkerStart is the cost of a fresh worker: start, first request with the
// chart, kill and reap (what a runaway costs beyond its deadline).
func BenchmarkWorkerStart(b *testing.B) {
	ch := loadChart(b, "1.1.5")
	opts := policies.RenderOptions{ReleaseName: "x", Namespace: "team-a"}
	opt := Options{Workers: 1}
	if bin := os.Getenv("SANDBOX_TEST_BINARY"); bin != "" {
		opt.Command = []string{bin, Subcommand}
	}
	p := newPool(b, opt)
	ctx := context.Background()
	for b.Loop() {
		if _, err := p.Render(ctx, "rendering", ch, "sha256:bench", nil, opts); err != nil {
			b.Fatal(err)
		}
		p.Close()
		p.closed = false
	}
}

// BenchmarkRoundTrip is the fixed cost of a worker: a one-line chart, in-process and
// through a worker.
func BenchmarkRoundTrip(b *testing.B) {
	ch := loopChart()
	opts := policies.RenderOptions{ReleaseName: "x", Namespace: "team-a"}
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			if _, err := policies.Render(ch, nil, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("worker", func(b *testing.B) {
		p := newPool(b, Options{Workers: 1})
		for b.Loop() {
			if _, err := p.Render(context.Background(), "rendering", ch, "sha256:loop", nil, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}
