package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/plan"
	"github.com/compositor-dev/compositor/policies"
)

// PlanOptions configure `compositor plan`.
type PlanOptions struct {
	// From and To are the chart versions moved from and to (--from, --to): chart
	// directories or archives, or chart URLs.
	From, To string
	// FromVersion and ToVersion are the versions fetched when From or To is a chart URL.
	FromVersion, ToVersion string
	// Chart holds how remote charts are reached (--repo, credentials, cache); its Chart
	// and Version are set per chart.
	Chart ChartOptions
	// File holds the compositions, YAML or JSON, several documents or a List; "-" is
	// Stdin.
	File  string
	Stdin io.Reader
	// Output is text, yaml or json.
	Output string
	// Namespace is the namespace of compositions that name none.
	Namespace string
	// PolicyDir, DisabledBuiltins, PolicyTimeout and FailOpen configure the policies the
	// moved compositions are judged by, as for `compositor validate`.
	PolicyDir        string
	DisabledBuiltins []string
	EnabledBuiltins  []string
	PolicyTimeout    time.Duration
	FailOpen         bool
	// Kubeconfig is the cluster of `compositor plan DEFINITION` ("" as kubectl finds
	// it); -n is then the definition's namespace, else the kubeconfig's.
	Kubeconfig string
	// CompositorNamespace is where Compositor runs and keeps whole plans
	// (--compositor-namespace); "" is compositor-system.
	CompositorNamespace string
}

func newPlanCommand() *cobra.Command {
	opts := &PlanOptions{Chart: newChartOptions(), Output: "text", Namespace: plan.DefaultNamespace, PolicyTimeout: policies.DefaultTimeout}
	cmd := &cobra.Command{
		Use:   "plan DEFINITION [-n NAMESPACE] | plan --from REF|DIR --to REF|DIR -f FILE [-o text|yaml|json]",
		Short: "Show what moving compositions to another chart version does, in a cluster or offline",
		Long: `plan DEFINITION shows the plan a definition's rollout follows in the cluster: the
one its status names by hash (status.rollout.plan.hash, which
compositor.dev/approve-plan approves), as Compositor computed it when the definition's
chart version changed. The whole plan, every namespace's compositions, is read from
ConfigMap compositor-plan.<definition's UID> of Compositor's namespace, which only the
platform reads, and verified against that hash. Whoever may not read it (a tenant of
the definition's namespace), or does not find it there (--compositor-namespace names
Compositor's namespace), gets that namespace's view, ConfigMap compositor-plan-DEFINITION
of the definition's namespace: the plan's counts and hash, and only the compositions
of that namespace. Its tenants may write it, so it is shown, and said to be a view,
only when it digests to the digest the definition's status records of it
(status.rollout.plan.viewDigest), which only Compositor writes; else it is refused.
Neither holds the compositions' values: a keyed digest stands for them.

Before the plan, the rollout's compositions (moved, failed, to move, stayed): of every
namespace from the rollout's record, ConfigMap compositor-rollout.<definition's UID> of
Compositor's namespace, to whoever may read it; else only the definition's namespace's,
from its status, and said so.

plan --from --to -f computes, without a cluster, what moving compositions of one chart version
(--from) to another (--to) would do, before anything moves:

  - each composition's values once moved: converted as the move converts them, with
    the declared conversions of the charts' values.conversions.yaml;
  - whether --to refuses them: its values.schema.json, the built-in policies and those
    of --policy-dir, one violation per line as "compositor validate" prints them;
  - the objects its release would gain (+), lose (-) and see changed (~, with the
    changed fields), rendering both charts as Helm would;
  - the resource types the controller of --to may create that that of --from may not,
    and the reverse.

The compositions come from -f (a file, or - for stdin; several YAML documents or a
List, as "kubectl get -o yaml" prints them), objects of --from's version. The plan is
printed as a summary and one block per composition (-o text), or whole as YAML or JSON;
its hash (sha256 of its canonical JSON) names it for an approval. Refusals are part of
the plan: the exit code is non-zero only for a wrong command line, charts that cannot
be planned with, or a file that cannot be read.

--from and --to are each a chart directory or archive, oci://host/path/name, a direct
https:// .tgz URL, or a Helm repository URL with --repo NAME; a chart URL needs its
version, --from-version or --to-version.`,
		Example: `  compositor plan fireworksapp -n platform

  compositor plan --from samples/charts/fireworks-app/1.1.5 --to samples/charts/fireworks-app/2.0.0 -f apps.yaml

  kubectl get fireworksapps.v1-1-5.composition.krateo.io -A -o yaml | compositor plan -f - -o json \
    --from oci://registry.example.com/charts/fireworks-app --from-version 1.1.5 \
    --to oci://registry.example.com/charts/fireworks-app --to-version 2.0.0`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) > 1:
				return usageErrorf("plan takes at most one argument, the definition, got %q", args)
			case len(args) == 1 && (opts.From != "" || opts.To != "" || opts.File != ""):
				return usageErrorf("plan %s reads the plan of a definition in the cluster: --from, --to and -f are for planning offline", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				namespace := ""
				if cmd.Flags().Changed("namespace") {
					namespace = opts.Namespace
				}
				return RunPlanDefinition(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts, namespace, args[0])
			}
			opts.Stdin = cmd.InOrStdin()
			return RunPlan(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts)
		},
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	fs := cmd.Flags()
	fs.StringVar(&opts.From, "from", opts.From, "Chart version the compositions are pinned to: a directory or archive, or a chart URL")
	fs.StringVar(&opts.To, "to", opts.To, "Chart version to move them to: a directory or archive, or a chart URL")
	fs.StringVar(&opts.FromVersion, "from-version", opts.FromVersion, "Exact chart version of --from when it is a chart URL")
	fs.StringVar(&opts.ToVersion, "to-version", opts.ToVersion, "Exact chart version of --to when it is a chart URL")
	fs.StringVarP(&opts.File, "filename", "f", opts.File, `File with the compositions ("-" reads stdin)`)
	fs.StringVarP(&opts.Output, "output", "o", opts.Output, "Output format: text, yaml or json")
	fs.StringVarP(&opts.Namespace, "namespace", "n", opts.Namespace, "Offline: namespace of the compositions that name none; with DEFINITION: its namespace")
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", opts.Kubeconfig, "With DEFINITION: kubeconfig of the cluster (default as kubectl finds it)")
	fs.StringVar(&opts.CompositorNamespace, "compositor-namespace", defaultCompositorNamespace, "With DEFINITION: the namespace Compositor runs in, which keeps the whole plan")
	fs.StringVar(&opts.PolicyDir, "policy-dir", opts.PolicyDir, "Directory of *.rego policies, as the server's --policy-dir")
	fs.StringSliceVar(&opts.DisabledBuiltins, "disable-builtin-policy", opts.DisabledBuiltins, "Built-in policy to switch off (repeatable), as the server's flag: "+joinIDs())
	fs.StringSliceVar(&opts.EnabledBuiltins, "enable-builtin-policy", opts.EnabledBuiltins, "Built-in policy off by default to switch on (repeatable), as the server's flag: "+strings.Join(policies.OptInBuiltinIDs(), ", "))
	fs.DurationVar(&opts.PolicyTimeout, "policy-timeout", opts.PolicyTimeout, "Deadline of the policy evaluation of one composition")
	fs.BoolVar(&opts.FailOpen, "policy-fail-open", opts.FailOpen, "Admit, with a warning, a composition whose deny policy cannot be evaluated")
	// The chart access flags are those of crd and lint, but each chart has its own
	// version flag.
	access := pflag.NewFlagSet("chart", pflag.ContinueOnError)
	opts.Chart.AddFlags(access)
	access.VisitAll(func(f *pflag.Flag) {
		if f.Name != "version" {
			fs.AddFlag(f)
		}
	})
	return cmd
}

// Validate reports command-line errors that need no chart or file.
func (o *PlanOptions) Validate() error {
	var errs []error
	if o.From == "" {
		errs = append(errs, errors.New("missing --from: the chart version the compositions are pinned to"))
	}
	if o.To == "" {
		errs = append(errs, errors.New("missing --to: the chart version to move them to"))
	}
	if o.File == "" {
		errs = append(errs, errors.New("missing -f FILE: the compositions to move"))
	}
	switch o.Output {
	case "text", "yaml", "json":
	default:
		errs = append(errs, fmt.Errorf("--output must be text, yaml or json, got %q", o.Output))
	}
	if o.PolicyTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--policy-timeout must be positive, got %s", o.PolicyTimeout))
	}
	for _, c := range []struct{ flag, chart, version string }{{"--from", o.From, o.FromVersion}, {"--to", o.To, o.ToVersion}} {
		if c.version != "" && c.chart != "" && !isChartURL(c.chart) {
			errs = append(errs, fmt.Errorf("%s-version applies to a chart URL, not to the local chart %s", c.flag, c.chart))
		}
	}
	if o.Chart.Repo != "" && !isChartURL(o.From) && !isChartURL(o.To) {
		errs = append(errs, errors.New("--repo applies to chart URLs, and --from and --to are local charts"))
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}

// source is where the chart of flag comes from.
func (o *PlanOptions) source(chartRef, version string) ChartOptions {
	s := o.Chart
	s.Chart, s.Version = chartRef, version
	if !isChartURL(chartRef) {
		s.Repo = ""
	}
	return s
}

// RunPlan plans moving the compositions of opts.File from opts.From to opts.To and
// prints the plan to out. Refusals are in the plan, not errors.
func RunPlan(ctx context.Context, out, _ io.Writer, opts *PlanOptions) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	from, err := loadChart(ctx, opts.source(opts.From, opts.FromVersion))
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	to, err := loadChart(ctx, opts.source(opts.To, opts.ToVersion))
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	objs, err := readObjects(opts.File, opts.Stdin)
	if err != nil {
		return err
	}
	compositions := make([]map[string]any, 0, len(objs))
	for _, o := range objs {
		compositions = append(compositions, o.Object)
	}
	judge, err := newJudge(ctx, &ValidateOptions{
		PolicyDir: opts.PolicyDir, DisabledBuiltins: opts.DisabledBuiltins, EnabledBuiltins: opts.EnabledBuiltins,
		PolicyTimeout: opts.PolicyTimeout, FailOpen: opts.FailOpen,
	})
	if err != nil {
		return err
	}
	p, err := plan.Compute(ctx, plan.Options{From: from.Chart, To: to.Chart, Judge: judge, Namespace: opts.Namespace}, compositions)
	if err != nil {
		return err
	}
	return writePlan(out, p, opts.Output, "")
}

// writePlan writes p to out as output says: json, yaml, or text, which header (if any)
// precedes.
func writePlan(out io.Writer, p *plan.Plan, output, header string) error {
	var b []byte
	var err error
	switch output {
	case "json":
		b, err = json.MarshalIndent(p, "", "  ")
		b = append(b, '\n')
	case "yaml":
		b, err = yaml.Marshal(p)
	default:
		b = []byte(header + FormatPlan(p))
	}
	if err != nil {
		return fmt.Errorf("encoding the plan: %w", err)
	}
	_, err = out.Write(b)
	return err
}

// FormatPlan is the text form of p: a summary line, the RBAC change and the hash, then
// one block per composition.
func FormatPlan(p *plan.Plan) string {
	var b strings.Builder
	s := p.Summary
	fmt.Fprintf(&b, "%s %s → %s: %s to move, %d refused, %s deleted\n",
		p.Chart, p.From, p.To, count(s.ToMove, "composition", "compositions"), s.Refused, count(s.Deletions, "object", "objects"))
	fmt.Fprintf(&b, "Objects: %d added, %d deleted, %d changed\n", s.Additions, s.Deletions, s.Changed)
	if len(p.RBAC.Gained) > 0 {
		fmt.Fprintf(&b, "RBAC gains: %s\n", strings.Join(p.RBAC.Gained, ", "))
	}
	if len(p.RBAC.Lost) > 0 {
		fmt.Fprintf(&b, "RBAC loses: %s\n", strings.Join(p.RBAC.Lost, ", "))
	}
	fmt.Fprintf(&b, "Plan %s\n", p.Hash)
	if v := p.Scope; v != nil {
		fmt.Fprintf(&b, "View of namespace %s: its %s (%d refused, %s deleted); the %d others are in other namespaces, which the whole plan shows the platform\n",
			v.Namespace, count(v.Summary.ToMove, "composition", "compositions"), v.Summary.Refused, count(v.Summary.Deletions, "object", "objects"), s.ToMove-v.Summary.ToMove)
	}
	for _, c := range p.Compositions {
		verdict := "moves"
		if len(c.Refused) > 0 {
			verdict = "refused"
		}
		fmt.Fprintf(&b, "\n%s/%s (release %s): %s\n", c.Namespace, c.Name, c.ReleaseName, verdict)
		for _, r := range c.Refused {
			fmt.Fprintf(&b, "  ! %s\n", r)
		}
		for _, w := range c.Warnings {
			fmt.Fprintf(&b, "  Warning: %s\n", w)
		}
		if c.Values != nil {
			v, err := json.Marshal(c.Values)
			if err == nil {
				fmt.Fprintf(&b, "  values: %s\n", v)
			}
		}
		for _, r := range c.Added {
			fmt.Fprintf(&b, "  + %s\n", r)
		}
		for _, r := range c.Deleted {
			fmt.Fprintf(&b, "  - %s\n", r)
		}
		for _, ch := range c.Changed {
			fmt.Fprintf(&b, "  ~ %s: %s\n", ch.ObjectRef, strings.Join(ch.Fields, ", "))
		}
	}
	return b.String()
}

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
