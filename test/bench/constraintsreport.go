package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// constraintsTargetRow is one of issue #31's bounds on one row, and whether it held.
type constraintsTargetRow struct {
	goal, measured string
	met            bool
}

// targets are the bounds of issue #31 on every row: p50 and p99 at most
// constraintsTarget times the five-policy figures, throughput at least its inverse;
// then the peer run's: Compositor beats Gatekeeper's engine on the library.
func (run *constraintsRun) targets() []constraintsTargetRow {
	var out []constraintsTargetRow
	for _, r := range run.Rows {
		out = append(out, boundRows(r, "the five-policy", r.Before)...)
	}
	for _, r := range run.Rows {
		if r.Rendered != nil {
			out = append(out, boundRows(r, "the rendered rewrites'", *r.Rendered)...)
		}
	}
	for _, r := range run.Rows {
		if r.Workload != writeWorkload {
			continue
		}
		where := fmt.Sprintf("%s, c %d", r.Workload, r.Concurrency)
		// To two decimals: the counts are read while requests are in flight, at most
		// the concurrency's, so a run's renders and answers differ by a few.
		perWrite := math.Round(r.After.rendersPerRequest()*100) / 100
		out = append(out, constraintsTargetRow{where + ": at most one render per write, after (issue #47)", fmt.Sprintf("%.2f", perWrite), perWrite <= 1})
		if r.Rendered != nil {
			b, a := r.Rendered.Compositor, r.After.Compositor
			p50 := ratio(a.P50, b.P50)
			out = append(out, constraintsTargetRow{fmt.Sprintf("%s: p50 ≤ %.1f× the rendered rewrites' p50 (issue #47)", where, writeTarget),
				fmt.Sprintf("%.2f ms → %.2f ms = %.2f×", b.P50, a.P50, p50), p50 <= writeTarget})
		}
	}
	if p := run.Peer; p != nil {
		out = append(out, constraintsTargetRow{"engine on the library (render included) beats Gatekeeper's on the release's requests",
			fmt.Sprintf("%.0f/s vs %.0f/s = %.2f×", p.Compositor.ReviewsPerSecond, p.Gatekeeper.ReviewsPerSecond, p.Ratio), p.Ratio > 1})
	}
	return out
}

// writeTarget is issue #47's bound on one write (/mutate then /validate): with the
// library, its p50 within this factor of the five rendered policies'.
const writeTarget = 1.3

// boundRows are the three bounds of row r's after against baseline, named by whose
// figures baseline holds.
func boundRows(r constraintsRow, whose string, baseline constraintsMeasure) []constraintsTargetRow {
	b, a := baseline.Compositor, r.After.Compositor
	where := fmt.Sprintf("%s, c %d", r.Workload, r.Concurrency)
	p50, p99, tput := ratio(a.P50, b.P50), ratio(a.P99, b.P99), ratio(a.Throughput, b.Throughput)
	return []constraintsTargetRow{
		{where + ": p50 ≤ 2× " + whose + " p50", fmt.Sprintf("%.2f ms → %.2f ms = %.2f×", b.P50, a.P50, p50), p50 <= constraintsTarget},
		{where + ": p99 ≤ 2× " + whose + " p99", fmt.Sprintf("%.2f ms → %.2f ms = %.2f×", b.P99, a.P99, p99), p99 <= constraintsTarget},
		{where + ": throughput ≥ 0.5× " + whose + " throughput", fmt.Sprintf("%.0f/s → %.0f/s = %.2f×", b.Throughput, a.Throughput, tput), tput >= 1/constraintsTarget},
	}
}

// comparedCells are the table cells of a row from baseline to after: throughput, p50
// and p99 each with their ratio, then CPU per request.
func comparedCells(baseline, after constraintsMeasure) string {
	b, a := baseline.Compositor, after.Compositor
	return fmt.Sprintf("%.0f → %.0f | %.2f× | %.2f → %.2f | %.2f× | %.2f → %.2f | %.2f× | %.3f → %.3f",
		b.Throughput, a.Throughput, ratio(a.Throughput, b.Throughput),
		b.P50, a.P50, ratio(a.P50, b.P50), b.P99, a.P99, ratio(a.P99, b.P99),
		baseline.cpuPerRequest(), after.cpuPerRequest())
}

// phaseMeasure is one phase's measure of a row, named.
type phaseMeasure struct {
	phase string
	m     constraintsMeasure
}

func (run *constraintsRun) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	m := run.Machine
	p(constraintsBegin)
	p("## Gatekeeper constraints (issue #31)")
	p("")
	p("Written by `make bench-constraints` (`go run ./test/bench -constraints %s`) on %s in %s, on %s (%d cores),", run.Dir,
		run.Started.UTC().Format("2006-01-02 15:04 MST"), run.Finished.Sub(run.Started).Round(time.Second), m.CPU, m.Cores)
	p("Compositor `%s` at %s. In one `compositor dev`, composition `/validate`, and one write (`/mutate` then", m.Compositor, m.Commit)
	p("`/validate`), are measured over HTTPS with the")
	p("five CompositionPolicies of `test/bench/policies` and the built-ins (*before*), then again after %d ConstraintTemplates", run.Templates)
	p("with one Constraint each (`%s`) were created with the API and enforced (*after*); each run beside the", run.Dir)
	p("do-nothing floor webhook of `make bench`, with its load generator and durations (%.0f s warm-up, %.0f s measured).", run.WarmupSeconds, run.DurationSeconds)
	p("")
	kinds := slices.SortedFunc(maps.Keys(run.Kinds), func(a, b string) int {
		return cmp.Or(cmp.Compare(run.Kinds[b], run.Kinds[a]), cmp.Compare(a, b))
	})
	var byKind []string
	for _, k := range kinds {
		name := k
		if k == "*" {
			name = "any kind"
		}
		byKind = append(byKind, fmt.Sprintf("%s %d", name, run.Kinds[k]))
	}
	p("The library: %d templates, %d of them Rego v1 and %d v0, %d with libs; its %d constraints match, by kind:", run.Templates, run.RegoV1, run.Templates-run.RegoV1, run.WithLibs, run.Constraints)
	p("%s (a constraint may match several; some also match by namespaces, label or namespace", strings.Join(byKind, ", "))
	p("selectors, scope or excluded namespaces).")
	p("Every composition the load sends is admitted by all of them, so the measured path is the whole evaluation:")
	p("one review renders the chart and judges %d objects (the composition, the four its chart renders, the Pod its", run.Subjects)
	p("Deployment implies), %d (object, constraint) pairs that match. The library was in force %.1f s after the first", run.Evaluations, run.EnforcedSeconds)
	p("template's create (every template's `status.created` after %.1f s; then a probe composition refused by each of the", run.TemplatesSeconds)
	p("%d constraints its values break, and one more resync of the constraint controller).", len(run.Probed))
	p("")
	p("| workload | c | req/s before → after | | p50 ms before → after | | p99 ms before → after | | CPU ms/req before → after | floor req/s, p50, p99 before; after |")
	p("|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range run.Rows {
		p("| %s | %d | %s | %.0f, %.2f, %.2f; %.0f, %.2f, %.2f |", r.Workload, r.Concurrency, comparedCells(r.Before, r.After),
			r.Before.Floor.Throughput, r.Before.Floor.P50, r.Before.Floor.P99, r.After.Floor.Throughput, r.After.Floor.P50, r.After.Floor.P99)
	}
	for _, r := range run.Rows {
		errorNotes(p, []comparison{{Floor: r.Before.Floor, Compositor: r.Before.Compositor}, {Floor: r.After.Floor, Compositor: r.After.Compositor}})
	}
	if len(run.Rows) > 0 && run.Rows[0].Rendered != nil {
		p("")
		p("The five policies read values only, so *before* never renders the chart. The issue's own alternative to the")
		p("library is rewriting policies over `input.rendered`; `%s` holds the same five rules so rewritten", run.RenderedDir)
		p("(`target: rendered`: registry, pinned tag and pull policy of every container, replicas, a label on every object).")
		p("*Rendered* is the five policies with those five added, measured between *before* and *after* and deleted before")
		p("the library was applied; each review then renders the chart in the sandbox and judges each rendered object.")
		p("")
		p("| workload | c | req/s rendered → after | | p50 ms rendered → after | | p99 ms rendered → after | | CPU ms/req rendered → after | floor req/s, p50, p99 rendered |")
		p("|---|---|---|---|---|---|---|---|---|---|")
		for _, r := range run.Rows {
			p("| %s | %d | %s | %.0f, %.2f, %.2f |", r.Workload, r.Concurrency, comparedCells(*r.Rendered, r.After),
				r.Rendered.Floor.Throughput, r.Rendered.Floor.P50, r.Rendered.Floor.P99)
		}
		for _, r := range run.Rows {
			errorNotes(p, []comparison{{Floor: r.Rendered.Floor, Compositor: r.Rendered.Compositor}})
		}
	}
	p("")
	p("CPU is Compositor's process and its sandbox workers (which render the chart) per request.")
	p("Renders per request are Compositor's own count (`compositor_chart_renders_total{purpose=\"admission\"}` on its")
	p("`/metrics`) over each measured run, divided by the requests answered; a write is its `/mutate` and `/validate`.")
	p("")
	p("| workload | c | renders/req before | rendered | after |")
	p("|---|---|---|---|---|")
	for _, r := range run.Rows {
		rendered := "–"
		if r.Rendered != nil {
			rendered = fmt.Sprintf("%.2f", r.Rendered.rendersPerRequest())
		}
		p("| %s | %d | %.2f | %s | %.2f |", r.Workload, r.Concurrency, r.Before.rendersPerRequest(), rendered, r.After.rendersPerRequest())
	}
	p("")
	for _, r := range run.Rows {
		phases := []phaseMeasure{{"before", r.Before}, {"after", r.After}}
		if r.Rendered != nil {
			phases = append(phases, phaseMeasure{"rendered", *r.Rendered})
		}
		for _, x := range phases {
			if busiest := max(x.m.OtherCores, x.m.FloorOtherCores); busiest > 0.2 {
				p("%s, c %d, %s: other processes on the machine used up to %.2f cores (of %d) meanwhile.", r.Workload, r.Concurrency, x.phase, busiest, m.Cores)
			}
		}
	}
	p("")
	p("| target | measured | met |")
	p("|---|---|---|")
	for _, t := range run.targets() {
		met := "yes"
		if !t.met {
			met = "**no**"
		}
		p("| %s | %s | %s |", t.goal, t.measured, met)
	}
	if pr := run.Peer; pr != nil {
		p("")
		p("### The engine against Gatekeeper's, on the same library")
		p("")
		p("`test/tools/gatekeeper -constraints`: the %d templates and constraints and the five policies (as templates) loaded", pr.Templates)
		p("into `open-policy-agent/frameworks/constraint` %s with Gatekeeper %s's admission target, as gator", pr.FrameworksVersion, pr.GatekeeperVersion)
		p("does, and into Compositor's engine (`CompileTemplate`, `ParseConstraint`, `NewLibrary`, `SetConstraints`). Gatekeeper")
		p("reviews what its webhook receives for one composition: the composition's create and the creates of the %d objects Helm", pr.Requests-1)
		p("installs, each decoded and expanded as its webhook does (an ExpansionTemplate gives the Deployment's Pod: %d expanded).", pr.Expanded)
		p("Compositor reviews the composition once with `Judge.Decide` (schema, render, policies, built-ins, constraints on")
		p("every object and the implied Pod); its second row is handed the objects already rendered, as its install gate is,")
		p("which is the evaluation alone. Verdicts are compared first: the admitted composition admitted by both without a")
		p("finding, a denied one refused by both with the same %d findings. %d rounds of %.0f s, alternating; OPA %s.",
			pr.DeniedFindings, pr.Rounds, pr.DurationSeconds, pr.OPAVersion)
		p("")
		p("| engine | µs/review | reviews/s | allocs/review |")
		p("|---|---|---|---|")
		p("| Compositor: the composition's decision, render included | %.0f | %.0f | %.0f |", pr.Compositor.NsPerReview/1000, pr.Compositor.ReviewsPerSecond, pr.Compositor.AllocsPerReview)
		p("| Compositor: the same, objects already rendered | %.0f | %.0f | %.0f |", pr.CompositorPrerendered.NsPerReview/1000, pr.CompositorPrerendered.ReviewsPerSecond, pr.CompositorPrerendered.AllocsPerReview)
		p("| Gatekeeper: the release's %d requests | %.0f | %.0f | %.0f |", pr.Requests, pr.Gatekeeper.NsPerReview/1000, pr.Gatekeeper.ReviewsPerSecond, pr.Gatekeeper.AllocsPerReview)
		p("")
		p("Compositor ÷ Gatekeeper throughput: %.2f× with its render, %.2f× on the evaluation alone.", pr.Ratio, pr.PrerenderedRatio)
	}
	for _, prof := range []struct{ title, intro, binary, name string }{
		{"Where Compositor's time goes with the library, concurrency 1", "A CPU profile of `compositor dev` during `composition create /validate` at concurrency 1, after (its sandbox workers, which render, are other processes)",
			run.compositor, constraintsProfile("after", "composition create /validate", 1)},
		{"Where Compositor's time goes with the library, concurrency 16", "The same at concurrency 16",
			run.compositor, constraintsProfile("after", "composition create /validate", 16)},
		{"Where the engine's time goes with the library", "A CPU profile of the peer run's Compositor review alone (`-cpuprofile`: `Judge.Decide` in-process, render included)",
			"", constraintsProfileEngine},
	} {
		top := (&report{Options: options{profileDir: run.profileDir}}).profileTop(prof.binary, prof.name, 30)
		if top == "" {
			continue
		}
		p("")
		p("### %s", prof.title)
		p("")
		p("%s (`go tool pprof -top -cum`):", prof.intro)
		p("")
		p("```")
		b.WriteString(top)
		p("```")
	}
	if notes, err := os.ReadFile(filepath.Join(run.Dir, "NOTES.md")); err == nil {
		p("")
		b.Write(notes)
	}
	p("")
	p("`make bench-constraints` reproduces it (`CONSTRAINTS_ARGS='-duration 2s'` for a shorter one; `go run ./test/bench -h`")
	p("lists the knobs; `cd test/tools/gatekeeper && go run . -constraints ../../bench/constraints` is the peer run alone).")
	p(constraintsEnd)
	return b.String()
}
