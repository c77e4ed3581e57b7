// Command gatekeeper is a peer run: the policies of test/bench/policies evaluated by
// Compositor's engine and, translated into ConstraintTemplates and Constraints, by
// Gatekeeper's (the OPA constraint framework with Gatekeeper's admission target, as
// Gatekeeper's webhook and gator use it), on the same composition.
//
// It first checks that both engines give the same verdicts, on an object every policy
// admits and on one each policy objects to, then times one review of the admitted
// object on each engine, in alternating rounds:
//
//	cd test/tools/gatekeeper && go run . [-rounds 5] [-duration 2s] [-parallel 1] [-json]
//
// Compositor's review is policies.Judge.Decide: the chart's schema check, then every
// matching policy (the five and the built-in ones). Gatekeeper's is Client.Review.
//
// With -constraints DIR both engines also carry a library of ConstraintTemplates and
// Constraints (test/bench/constraints), and Gatekeeper reviews every request of the
// composition's release, as its webhook would (constraints.go):
//
//	cd test/tools/gatekeeper && go run . -constraints ../../bench/constraints [-cpuprofile FILE] [-json]
//
// It is a module of its own so that Gatekeeper's dependencies never reach Compositor's
// go.mod.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"text/tabwriter"
	"time"

	"github.com/compositor-dev/compositor/policies"
)

// Module paths whose versions the report names.
const (
	frameworksModule = "github.com/open-policy-agent/frameworks/constraint"
	opaModule        = "github.com/open-policy-agent/opa"
	gatekeeperModule = "github.com/open-policy-agent/gatekeeper/v3"
)

// config is what the flags set.
type config struct {
	policyDir string
	chartDir  string
	values    string
	rounds    int
	duration  time.Duration
	parallel  int
	json      bool
	// constraintDir, when set, is a library of ConstraintTemplates and Constraints
	// to compare the engines on (constraints.go).
	constraintDir   string
	cpuProfile      string
	profileDuration time.Duration
}

func main() {
	cfg := parseFlags()
	if err := run(context.Background(), cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gatekeeper peer run:", err)
		os.Exit(1)
	}
}

func parseFlags() config {
	var c config
	flag.StringVar(&c.policyDir, "policies", "../../bench/policies", "directory of the Compositor policies to compare")
	flag.StringVar(&c.chartDir, "chart", "../../../samples/charts/fireworks-app/1.1.5", "chart the composition is written for")
	flag.StringVar(&c.values, "values", "../../../samples/charts/fireworks-app/examples/1.1.5/values-full.yaml", "values the composition's spec starts from")
	flag.IntVar(&c.rounds, "rounds", 5, "rounds; each times Compositor, then Gatekeeper")
	flag.DurationVar(&c.duration, "duration", 2*time.Second, "time each engine reviews in each round")
	flag.IntVar(&c.parallel, "parallel", 1, "goroutines reviewing at once; above 1 the figures are aggregate throughput")
	flag.BoolVar(&c.json, "json", false, "also print the results as one JSON object on stdout")
	flag.StringVar(&c.constraintDir, "constraints", "", "compare the engines on this directory of ConstraintTemplates and Constraints, on top of the policies, over a composition's whole release (e.g. ../../bench/constraints)")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "-constraints: after the rounds, write a CPU profile of Compositor's review alone here")
	flag.DurationVar(&c.profileDuration, "profile-duration", 5*time.Second, "-constraints: how long -cpuprofile profiles")
	flag.Parse()
	return c
}

// peers is everything a run compares: both engines set up with the same policies,
// and the objects they review.
type peers struct {
	compositor *compositorSide
	gatekeeper *gatekeeperSide
	objects    *objects
	policies   int
}

// setup loads the policies, translates them for Gatekeeper, and builds both engines
// and the objects.
func setup(ctx context.Context, cfg config) (*peers, error) {
	dir, err := policies.LoadDir(cfg.policyDir)
	if err != nil {
		return nil, err
	}
	if err := dir.Err(); err != nil {
		return nil, err
	}
	if len(dir.Policies) == 0 {
		return nil, fmt.Errorf("no policies in %s", cfg.policyDir)
	}
	var ts []*translated
	for _, p := range dir.Policies {
		t, err := translate(p)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	c, err := newCompositorSide(ctx, dir.Policies, cfg.chartDir)
	if err != nil {
		return nil, fmt.Errorf("compositor: %w", err)
	}
	g, err := newGatekeeperSide(ctx, ts)
	if err != nil {
		return nil, fmt.Errorf("gatekeeper: %w", err)
	}
	objs, err := loadObjects(cfg.values)
	if err != nil {
		return nil, err
	}
	return &peers{compositor: c, gatekeeper: g, objects: objs, policies: len(ts)}, nil
}

// engines are the timed reviews of the admitted object. Each fails if its engine
// stops admitting it, so a run cannot time a different path than the one checked.
func (p *peers) engines() ([]engine, error) {
	creq := p.compositor.request(p.objects.Admitted)
	greq, err := p.gatekeeper.review(p.objects.Admitted)
	if err != nil {
		return nil, err
	}
	return []engine{
		{"compositor", func(ctx context.Context) error {
			d, err := p.compositor.check(ctx, creq)
			if err == nil && d.Denied() {
				err = errors.New("denied the admitted object")
			}
			return err
		}},
		{"gatekeeper", func(ctx context.Context) error {
			resp, err := p.gatekeeper.check(ctx, greq)
			if err == nil && denies(resp) {
				err = errors.New("denied the admitted object")
			}
			return err
		}},
	}, nil
}

// report is the run's outcome; its JSON form is what -json prints.
type report struct {
	Compositor        engineResult `json:"compositor"`
	Gatekeeper        engineResult `json:"gatekeeper"`
	Ratio             float64      `json:"ratio"`
	Rounds            int          `json:"rounds"`
	DurationSeconds   float64      `json:"duration_seconds"`
	Parallel          int          `json:"parallel"`
	FrameworksVersion string       `json:"frameworks_version"`
	OPAVersion        string       `json:"opa_version"`
	GatekeeperVersion string       `json:"gatekeeper_version"`
	Policies          int          `json:"policies"`
	GoVersion         string       `json:"go_version"`
	GOMAXPROCS        int          `json:"gomaxprocs"`
}

// run checks the verdicts, times both engines and reports: a table on stderr, and
// with -json the report on stdout.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	if cfg.rounds < 1 || cfg.duration <= 0 {
		return errors.New("-rounds and -duration must be positive")
	}
	if cfg.constraintDir != "" {
		return runConstraints(ctx, cfg, stdout, stderr)
	}
	p, err := setup(ctx, cfg)
	if err != nil {
		return err
	}
	if err := checkVerdicts(ctx, p.compositor, p.gatekeeper, p.objects); err != nil {
		return fmt.Errorf("verdicts differ, nothing timed: %w", err)
	}
	fmt.Fprintf(stderr, "verdicts agree on %d policies; timing %d rounds of %s per engine, %d goroutine(s)\n",
		p.policies, cfg.rounds, cfg.duration, max(cfg.parallel, 1))
	engines, err := p.engines()
	if err != nil {
		return err
	}
	phases, err := timeRounds(ctx, engines, cfg.rounds, cfg.duration, cfg.parallel)
	if err != nil {
		return err
	}
	r := newReport(cfg, p.policies, summarise(phases["compositor"]), summarise(phases["gatekeeper"]))
	printTable(stderr, r)
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return nil
}

func newReport(cfg config, n int, c, g engineResult) report {
	return report{
		Compositor:        c,
		Gatekeeper:        g,
		Ratio:             round3(c.ReviewsPerSecond / g.ReviewsPerSecond),
		Rounds:            cfg.rounds,
		DurationSeconds:   cfg.duration.Seconds(),
		Parallel:          max(cfg.parallel, 1),
		FrameworksVersion: moduleVersion(frameworksModule),
		OPAVersion:        moduleVersion(opaModule),
		GatekeeperVersion: moduleVersion(gatekeeperModule),
		Policies:          n,
		GoVersion:         runtime.Version(),
		GOMAXPROCS:        runtime.GOMAXPROCS(0),
	}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// moduleVersion is the version of a dependency this binary was built with.
func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, m := range info.Deps {
		if m.Path != path {
			continue
		}
		if m.Replace != nil {
			return m.Replace.Version
		}
		return m.Version
	}
	return "unknown"
}

// printTable writes the human-readable summary.
func printTable(w io.Writer, r report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "engine\tns/review (median)\tmin\tmax\treviews/s\tallocs/review\t")
	for _, e := range []struct {
		name string
		r    engineResult
	}{{"compositor", r.Compositor}, {"gatekeeper", r.Gatekeeper}} {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t\n",
			e.name, e.r.NsPerReview, e.r.MinNsPerReview, e.r.MaxNsPerReview, e.r.ReviewsPerSecond, e.r.AllocsPerReview)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "compositor/gatekeeper throughput: %.3f (frameworks %s, gatekeeper %s, OPA %s, %s, GOMAXPROCS %d)\n",
		r.Ratio, r.FrameworksVersion, r.GatekeeperVersion, r.OPAVersion, r.GoVersion, r.GOMAXPROCS)
}
