package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// comparison is one workload measured against the floor (or, through the API server,
// without Compositor's webhooks) and against Compositor.
type comparison struct {
	Floor      result `json:"floor"`
	Compositor result `json:"compositor"`
}

// report is everything one run measured.
type report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Options  options   `json:"-"`
	Machine  machine   `json:"machine"`

	Admission       []comparison     `json:"admission"`
	Bounds          []comparison     `json:"bounds,omitempty"` // Floor: --unbounded-admission
	APIServer       []comparison     `json:"apiServer"`
	ManyDefinitions *manyDefinitions `json:"manyDefinitions,omitempty"`
	Peer            *peerRun         `json:"peer,omitempty"`
}

type machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	MemoryGiB  int    `json:"memoryGiB"`
	Go         string `json:"go"`
	Commit     string `json:"commit"`
	APIServer  string `json:"kubeApiserver"`
	Modules    string `json:"modules"`
	Compositor string `json:"compositor"`
}

// peerRun is what test/tools/gatekeeper reports.
type peerRun struct {
	Compositor        engineFigures `json:"compositor"`
	Gatekeeper        engineFigures `json:"gatekeeper"`
	Ratio             float64       `json:"ratio"`
	Rounds            int           `json:"rounds"`
	DurationSeconds   float64       `json:"duration_seconds"`
	FrameworksVersion string        `json:"frameworks_version"`
	OPAVersion        string        `json:"opa_version"`
	Policies          int           `json:"policies"`
}

type engineFigures struct {
	NsPerReview      float64 `json:"ns_per_review"`
	ReviewsPerSecond float64 `json:"reviews_per_second"`
	AllocsPerReview  float64 `json:"allocs_per_review"`
}

func (r *report) readPeer(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the peer run: %w", err)
	}
	r.Peer = &peerRun{}
	if err := json.Unmarshal(b, r.Peer); err != nil {
		return fmt.Errorf("reading the peer run %s: %w", path, err)
	}
	return nil
}

// describeMachine records what the figures were measured on.
func (r *report) describeMachine(compositor, controlPlaneDir string) error {
	m := &r.Machine
	m.Cores = runtime.NumCPU()
	m.Go = runtime.Version()
	m.CPU = firstField("/proc/cpuinfo", "model name")
	if kb := firstField("/proc/meminfo", "MemTotal"); kb != "" {
		var n int
		_, _ = fmt.Sscan(strings.TrimSuffix(kb, " kB"), &n)
		m.MemoryGiB = (n + (1 << 19)) >> 20
	}
	m.Commit = output("git", "describe", "--always", "--dirty")
	m.APIServer = output(filepath.Join(controlPlaneDir, "kube-apiserver"), "--version")
	m.Compositor = compositor
	var mods []string
	for _, line := range strings.Split(output("go", "version", "-m", compositor), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "dep" {
			switch f[1] {
			case "sigs.k8s.io/controller-runtime", "k8s.io/client-go", "github.com/open-policy-agent/opa",
				"helm.sh/helm/v4", "github.com/santhosh-tekuri/jsonschema/v6":
				mods = append(mods, f[1]+" "+f[2])
			}
		}
	}
	m.Modules = strings.Join(mods, ", ")
	if _, err := os.Stat(compositor); err != nil {
		return fmt.Errorf("the compositor binary: %w (run `make build`)", err)
	}
	return nil
}

func firstField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func output(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// find returns the comparison of workload at concurrency.
func (r *report) find(workload string, concurrency int) *comparison {
	for i := range r.Admission {
		if c := &r.Admission[i]; c.Compositor.Workload == workload && c.Compositor.Concurrency == concurrency {
			return c
		}
	}
	return nil
}

// bothWebhooksRow is Compositor's CPU per request of one concurrency: /mutate and
// /validate apart, and the two as one write.
type bothWebhooksRow struct {
	c                      int
	mutate, validate, pair float64
}

// bothWebhooks are the rows of "One write, both webhooks" this run measured.
// cpuBeforeRedesign is /mutate's and /validate's CPU ms per review summed, by
// concurrency, as BENCHMARKS.md of commit ffea0ea measured them, before issue #27
// (`git show ffea0ea:BENCHMARKS.md`: 0.503 + 0.318 and 0.298 + 0.192).
var cpuBeforeRedesign = map[int]float64{1: 0.821, 16: 0.490}

func (r *report) bothWebhooks() []bothWebhooksRow {
	var rows []bothWebhooksRow
	for _, c := range []int{1, 16} {
		m, v, pair := r.find("composition create /mutate", c), r.find("composition create /validate", c), r.find("composition create /mutate then /validate", c)
		if m == nil || v == nil || pair == nil {
			continue
		}
		rows = append(rows, bothWebhooksRow{c: c, mutate: m.Compositor.CPUPerRequest(), validate: v.Compositor.CPUPerRequest(), pair: pair.Compositor.CPUPerRequest()})
	}
	return rows
}

// target is one goal of issue #14 and whether this run met it.
type target struct {
	Goal     string
	Measured string
	Met      bool
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (r *report) targets() []target {
	var out []target
	for _, w := range []string{"composition create /validate", "composition update /validate"} {
		if c := r.find(w, 16); c != nil {
			t := ratio(c.Compositor.Throughput, c.Floor.Throughput)
			out = append(out, target{fmt.Sprintf("%s, concurrency 16: throughput ≥ 0.5× the floor's", w),
				fmt.Sprintf("%.0f/s vs %.0f/s = %.2f×", c.Compositor.Throughput, c.Floor.Throughput, t), t >= 0.5})
			p := ratio(c.Compositor.P99, c.Floor.P99)
			out = append(out, target{fmt.Sprintf("%s, concurrency 16: p99 ≤ 2× the floor's", w),
				fmt.Sprintf("%.2f ms vs %.2f ms = %.2f×", c.Compositor.P99, c.Floor.P99, p), p <= 2})
		}
		if c := r.find(w, 1); c != nil {
			p := ratio(c.Compositor.P50, c.Floor.P50)
			out = append(out, target{fmt.Sprintf("%s, concurrency 1: p50 ≤ 3× the floor's", w),
				fmt.Sprintf("%.2f ms vs %.2f ms = %.2f×", c.Compositor.P50, c.Floor.P50, p), p <= 3})
		}
		c1, c16 := r.find(w, 1), r.find(w, 16)
		if c1 != nil && c16 != nil {
			s := ratio(c16.Compositor.Throughput, c1.Compositor.Throughput)
			out = append(out, target{fmt.Sprintf("%s: concurrency 16 throughput ≥ 1.6× concurrency 1", w),
				fmt.Sprintf("%.0f/s vs %.0f/s = %.2f×", c16.Compositor.Throughput, c1.Compositor.Throughput, s), s >= 1.6})
		}
	}
	if c := r.find("composition create /mutate", 16); c != nil {
		t := ratio(c.Compositor.Throughput, c.Floor.Throughput)
		out = append(out, target{"/mutate, concurrency 16: throughput ≥ 0.8× the floor's",
			fmt.Sprintf("%.0f/s vs %.0f/s = %.2f×", c.Compositor.Throughput, c.Floor.Throughput, t), t >= 0.8})
	}
	if m := r.ManyDefinitions; m != nil {
		p := ratio(m.After.P50, m.Before.P50)
		out = append(out, target{fmt.Sprintf("/validate p50 with %d more definitions ≤ 1.2× with 2", m.Definitions),
			fmt.Sprintf("%.2f ms vs %.2f ms = %.2f× (%d Ready)", m.After.P50, m.Before.P50, p, m.Ready), p <= 1.2})
	}
	if p := r.Peer; p != nil {
		out = append(out, target{"engine (schema + 5 policies) ≥ 3× Gatekeeper's throughput on the 5 policies",
			fmt.Sprintf("%.0f/s vs %.0f/s = %.2f×", p.Compositor.ReviewsPerSecond, p.Gatekeeper.ReviewsPerSecond, p.Ratio), p.Ratio >= 3})
	}
	if len(r.APIServer) > 0 {
		var with, without float64
		for _, c := range r.APIServer {
			with, without = max(with, c.Compositor.P99), max(without, c.Floor.P99)
		}
		p := ratio(with, without)
		out = append(out, target{"create through the API server: p99 with webhooks ≤ 1.2× without (worst round of each)",
			fmt.Sprintf("%.2f ms vs %.2f ms = %.2f×", with, without, p), p <= 1.2})
	}
	if c := r.find("conversion of 500 objects", 1); c != nil {
		out = append(out, target{"ConversionReview of 500 objects, declared conversions applied, < 20 ms",
			fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", c.Compositor.P50, c.Compositor.P99), c.Compositor.P50 < 20})
	}
	return out
}

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("# Benchmarks")
	p("")
	p("Written by `make bench` (`go run ./test/bench`) on %s in %s. Every admission figure is", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Round(time.Second))
	p("measured over HTTPS against a running `compositor dev` (fireworks-app 1.1.5 and 2.0.0, five")
	p("CompositionPolicies from `test/bench/policies`: four deny, one warn; the built-in policies on),")
	p("in the same run as a do-nothing webhook on the same server stack (the *floor*), driven by the")
	p("same load generator on the same cores. Ratios are Compositor ÷ floor.")
	p("")
	p("## Machine")
	p("")
	p("| | |")
	p("|---|---|")
	m := r.Machine
	p("| CPU | %s, %d cores, %d GiB |", m.CPU, m.Cores, m.MemoryGiB)
	p("| Go | %s |", m.Go)
	p("| Compositor | `%s` at %s |", m.Compositor, m.Commit)
	p("| kube-apiserver | %s |", m.APIServer)
	p("| modules | %s |", m.Modules)
	p("")
	p("## Targets (issue #14)")
	p("")
	p("| target | measured | met |")
	p("|---|---|---|")
	for _, t := range r.targets() {
		met := "yes"
		if !t.Met {
			met = "**no**"
		}
		p("| %s | %s | %s |", t.Goal, t.Measured, met)
	}
	p("")
	p("## Webhooks over HTTPS")
	p("")
	p("Each row: %s of unmeasured warm-up, then %s measured; *c* is the number of concurrent", r.Options.warmup, r.Options.duration)
	p("clients, each sending its next request when the last is answered. CPU is the serving")
	p("process's CPU time per request (Compositor's includes its controllers and informers).")
	p("")
	comparisonTable(p, r.Admission, "floor", "compositor")
	if rows := r.bothWebhooks(); len(rows) > 0 {
		p("")
		p("## One write, both webhooks (issue #27)")
		p("")
		p("Compositor's CPU per admitted create: the pair `/mutate` then `/validate` under one request UID,")
		p("as the API server sends them (`/validate` takes the namespace's labels, the definition and the")
		p("chart `/mutate` found, and its schema verdict for the same values), beside the two measured apart")
		p("above, each with a UID of its own (nothing to take). *Before* is the two apart before the")
		p("redesign of issue #27 (commit ffea0ea, Helm 3, the same harness and machine), whose target is")
		p("30 %% less CPU per admitted write.")
		p("")
		p("| c | apart: /mutate + /validate CPU ms | pair CPU ms | pair ÷ apart | before | pair ÷ before |")
		p("|---|---|---|---|---|---|")
		for _, row := range rows {
			before := cpuBeforeRedesign[row.c]
			p("| %d | %.3f + %.3f = %.3f | %.3f | %.2f× | %.3f | %.2f× |", row.c, row.mutate, row.validate, row.mutate+row.validate,
				row.pair, ratio(row.pair, row.mutate+row.validate), before, ratio(row.pair, before))
		}
	}
	if len(r.Bounds) > 0 {
		p("")
		p("## The bounds on the ordinary path (issue #26)")
		p("")
		p("The same reviews against Compositor as shipped (*bounded*: input limits, lanes per namespace,")
		p("schema checks and renders in sandbox worker processes) and against a second `compositor dev`")
		p("started with the hidden `--unbounded-admission` (none of them: in-process, as before #26),")
		p("one right after the other for each row, in the same run. Ratios are bounded ÷ unbounded.")
		p("")
		comparisonTable(p, r.Bounds, "unbounded", "bounded")
	}
	if len(r.APIServer) > 0 {
		p("")
		p("## Creates through the API server")
		p("")
		p("%d paused compositions created with client-go at concurrency %d, with Compositor's webhook", r.Options.e2eCreates, r.Options.e2eConcurrency)
		p("configurations in place and with them deleted, alternating. Paused, so that the figures are")
		p("the write's and not the controller's installs.")
		p("")
		p("| run | webhooks | creates/s | p50 ms | p95 ms | p99 ms | max ms | errors |")
		p("|---|---|---|---|---|---|---|---|")
		for _, c := range r.APIServer {
			for _, x := range []result{c.Compositor, c.Floor} {
				p("| %s | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %d |", x.Workload, x.Server, x.Throughput, x.P50, x.P95, x.P99, x.Max, x.Errors)
			}
			p("| | **ratio** | %.2f× | %.2f× | %.2f× | %.2f× | %.2f× | |", ratio(c.Compositor.Throughput, c.Floor.Throughput),
				ratio(c.Compositor.P50, c.Floor.P50), ratio(c.Compositor.P95, c.Floor.P95), ratio(c.Compositor.P99, c.Floor.P99), ratio(c.Compositor.Max, c.Floor.Max))
		}
		errorNotes(p, r.APIServer)
	}
	if m := r.ManyDefinitions; m != nil {
		p("")
		p("## Many definitions")
		p("")
		p("`composition create /validate` at concurrency 1 with the two fireworks-app definitions, then with")
		p("%d more definitions of %d distinct generated charts (one ConfigMap, a two-key schema) present;", m.Definitions, m.Definitions)
		p("%d of them were Ready %.0f s after the first create.", m.Ready, m.ReadySeconds)
		p("")
		p("| definitions | p50 ms | p99 ms | req/s | Compositor RSS MiB |")
		p("|---|---|---|---|---|")
		p("| 2 | %.2f | %.2f | %.0f | %.0f |", m.Before.P50, m.Before.P99, m.Before.Throughput, m.RSSBefore)
		p("| %d | %.2f | %.2f | %.0f | %.0f |", 2+m.Definitions, m.After.P50, m.After.P99, m.After.Throughput, m.RSSAfter)
	}
	if pr := r.Peer; pr != nil {
		p("")
		p("## The engine against Gatekeeper's")
		p("")
		p("`test/tools/gatekeeper` (a module of its own, so that Gatekeeper's pins stay out of Compositor's):")
		p("the same five policies as ConstraintTemplates on `open-policy-agent/frameworks/constraint` %s", pr.FrameworksVersion)
		p("with its Rego driver, as `gator` uses it, alternating with Compositor's `Judge` (chart schema +")
		p("the five policies + the built-ins) for %d rounds of %.0f s, verdicts compared first; OPA %s.", pr.Rounds, pr.DurationSeconds, pr.OPAVersion)
		p("")
		p("| engine | µs/review | reviews/s | allocs/review |")
		p("|---|---|---|---|")
		p("| Compositor (schema + policies) | %.0f | %.0f | %.0f |", pr.Compositor.NsPerReview/1000, pr.Compositor.ReviewsPerSecond, pr.Compositor.AllocsPerReview)
		p("| Gatekeeper (policies) | %.0f | %.0f | %.0f |", pr.Gatekeeper.NsPerReview/1000, pr.Gatekeeper.ReviewsPerSecond, pr.Gatekeeper.AllocsPerReview)
	}
	profiles := []struct{ title, intro, binary, name string }{
		{"Where Compositor's time goes now", "A CPU profile of `compositor dev` during `composition create /validate` at concurrency 16",
			r.Options.compositor, profileName("composition create /validate", 16)},
		{"Where /mutate's time goes", "A CPU profile of `compositor dev` during `composition create /mutate` at concurrency 16",
			r.Options.compositor, profileName("composition create /mutate", 16)},
		{"Where the API server's time goes, with the webhooks", fmt.Sprintf("A CPU profile of kube-apiserver (%ds from the first of the first round's creates with the webhooks)", apiServerProfileSeconds),
			"", apiServerProfileName(true)},
		{"Where the API server's time goes, without the webhooks", fmt.Sprintf("The same, %ds from the first of the first round's creates without the webhooks", apiServerProfileSeconds),
			"", apiServerProfileName(false)},
	}
	for _, prof := range profiles {
		top := r.profileTop(prof.binary, prof.name, 30)
		if top == "" {
			continue
		}
		p("")
		p("## %s", prof.title)
		p("")
		p("%s (`go tool pprof -top -cum`, the heaviest functions by cumulative time):", prof.intro)
		p("")
		p("```")
		b.WriteString(top)
		p("```")
	}
	if notes, err := os.ReadFile(filepath.Join(filepath.Dir(r.Options.policyDir), "NOTES.md")); err == nil {
		p("")
		b.Write(notes)
	}
	p("")
	p("## How to reproduce")
	p("")
	p("```")
	p("make bench   # builds bin/compositor and the control plane, runs this harness and the peer run")
	p("make bench-scale   # the scale curve (issue #15), into its marked section; make bench keeps it")
	p("go run ./test/bench -h   # durations, concurrency, number of definitions, profiles")
	p("```")
	return b.String()
}

// comparisonTable prints cs as rows of a Markdown table, each comparison a row for
// its Floor (labelled floor), one for its Compositor (labelled measured) and their
// ratios, then the notes of any errors.
func comparisonTable(p func(string, ...any), cs []comparison, floor, measured string) {
	p("| workload | c | server | req/s | p50 ms | p95 ms | p99 ms | max ms | CPU ms/req | errors |")
	p("|---|---|---|---|---|---|---|---|---|---|")
	row := func(x result, label string) {
		p("| %s | %d | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %.3f | %d |", x.Workload, x.Concurrency, label,
			x.Throughput, x.P50, x.P95, x.P99, x.Max, x.CPUPerRequest(), x.Errors)
	}
	for _, c := range cs {
		row(c.Floor, floor)
		row(c.Compositor, measured)
		p("| | | **ratio** | **%.2f×** | %.2f× | %.2f× | %.2f× | %.2f× | %.2f× | |",
			ratio(c.Compositor.Throughput, c.Floor.Throughput), ratio(c.Compositor.P50, c.Floor.P50),
			ratio(c.Compositor.P95, c.Floor.P95), ratio(c.Compositor.P99, c.Floor.P99),
			ratio(c.Compositor.Max, c.Floor.Max), ratio(c.Compositor.CPUPerRequest(), c.Floor.CPUPerRequest()))
	}
	errorNotes(p, cs)
}

func errorNotes(p func(string, ...any), cs []comparison) {
	for _, c := range cs {
		for _, x := range []result{c.Floor, c.Compositor} {
			if x.Errors > 0 {
				p("")
				p("%s (%s, c %d): %d errors, the first: `%s`", x.Workload, x.Server, x.Concurrency, x.Errors, x.FirstError)
			}
		}
	}
}

// profileTop is the top, by cumulative time, of the saved CPU profile named name, when
// one was taken: nodes lines of it, with binary's symbols.
func (r *report) profileTop(binary, name string, nodes int) string {
	if r.Options.profileDir == "" {
		return ""
	}
	args := []string{"tool", "pprof", "-top", "-cum", fmt.Sprintf("-nodecount=%d", nodes)}
	if binary != "" {
		args = append(args, binary)
	}
	out, err := exec.Command("go", append(args, filepath.Join(r.Options.profileDir, name))...).Output()
	if err != nil {
		return ""
	}
	return string(out)
}
