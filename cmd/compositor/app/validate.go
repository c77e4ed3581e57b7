package app

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/webhooks"
)

// Exit codes of the compositor commands.
const (
	// ExitFailure: a check failed (a denial, a failing test, a lint error) or something
	// went wrong.
	ExitFailure = 1
	// ExitUsage: the command line was wrong.
	ExitUsage = 2
)

// ErrUsage marks errors in the command line: a missing argument, a bad flag value.
var ErrUsage = errors.New("usage")

// ExitCode is the process exit code for the error a command returned: 0 for nil,
// ExitUsage for a command-line error, ExitFailure otherwise.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrUsage):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// usageError prints like its message alone but matches ErrUsage.
type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == ErrUsage }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// flagUsageError makes cobra's flag parsing errors usage errors.
func flagUsageError(_ *cobra.Command, err error) error { return usageError{err} }

var (
	// ErrDenied means at least one object was denied.
	ErrDenied = errors.New("denied")
	// ErrNotChecked means at least one object could not be checked at all: not a
	// Compositor object, no chart for it, a chart whose schema does not compile.
	ErrNotChecked = errors.New("could not be checked")
)

// ValidateOptions configure `compositor validate`.
type ValidateOptions struct {
	// File holds the objects, YAML or JSON, several documents allowed; "-" is Stdin.
	File  string
	Stdin io.Reader
	// Chart is the chart the compositions are written for (Chart.Chart is --chart).
	Chart ChartOptions
	// DefinitionFile holds the CompositionDefinition the compositions belong to; its
	// spec.chart says where the chart is. Exclusive with Chart.Chart.
	DefinitionFile string
	// PolicyDir holds *.rego policies, as the server's --policy-dir.
	PolicyDir string
	// DisabledBuiltins are ids of built-in policies to switch off.
	DisabledBuiltins []string
	// EnabledBuiltins are ids of built-in policies off by default to switch on.
	EnabledBuiltins []string
	// Namespace is the namespace of objects that name none.
	Namespace string
	// NamespaceLabels are the labels of the objects' namespace, for namespaceSelector;
	// kubernetes.io/metadata.name is always set, as the API server sets it.
	NamespaceLabels map[string]string
	// PolicyTimeout bounds the evaluation of the policies of one object.
	PolicyTimeout time.Duration
	// FailOpen admits an object whose deny policy could not be evaluated.
	FailOpen bool
	// FieldValidation is kubectl's --validate: strict (or true) refuses a key of a
	// composition's values its chart neither declares nor reads, warn (the default
	// here) warns of it, ignore (or false) says nothing.
	FieldValidation string
}

func newValidateCommand() *cobra.Command {
	opts := &ValidateOptions{Chart: newChartOptions(), Namespace: "default", PolicyTimeout: policies.DefaultTimeout, FieldValidation: "warn"}
	cmd := &cobra.Command{
		Use:   "validate -f FILE (--chart REF|DIR | --definition FILE)",
		Short: "Check compositions and definitions offline, as the validating webhook would",
		Long: `validate runs the validating webhook's decision on objects read from a file: a
composition's values against its chart's values.schema.json (merged with the chart's
values.yaml, subcharts under their keys, as Helm does), then the built-in policies and
those of --policy-dir; a CompositionDefinition against the policies only. Each object
is checked as if created, after the mutating webhook's defaults.

A key of a composition's values that its chart neither declares nor reads (a typo,
most of the time) is warned of; --validate=strict refuses it, as the webhook does for
` + "`kubectl apply`" + ` (whose default is strict), and --validate=ignore says nothing.

Denials go to stderr, one violation per line, in the webhook's words; warnings as
"Warning: ..." lines. The exit code is non-zero when any object is denied or
cannot be checked.

The chart of the compositions is --chart (a chart directory or archive, oci://host/path/name
with --version, a direct https:// .tgz URL, or a Helm repository URL with --repo NAME
--version V), or the chart of the CompositionDefinition in --definition.`,
		Example: `  compositor validate -f app.yaml --chart samples/charts/fireworks-app/1.1.5
  compositor validate -f app.yaml --definition definition.yaml --policy-dir policies/
  kubectl get fireworksapps -A -o yaml | compositor validate -f - --chart oci://registry.example.com/charts/fireworks-app --version 1.1.5`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("validate takes no arguments, got %q: the objects come from -f FILE", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Stdin = cmd.InOrStdin()
			return RunValidate(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts)
		},
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	fs := cmd.Flags()
	fs.StringVarP(&opts.File, "filename", "f", opts.File, `File with the objects to check ("-" reads stdin)`)
	fs.StringVar(&opts.Chart.Chart, "chart", opts.Chart.Chart, "Chart of the compositions: a directory or archive, or a chart URL")
	fs.StringVar(&opts.DefinitionFile, "definition", opts.DefinitionFile, "CompositionDefinition whose chart the compositions are written for")
	fs.StringVar(&opts.PolicyDir, "policy-dir", opts.PolicyDir, "Directory of *.rego policies, as the server's --policy-dir")
	fs.StringSliceVar(&opts.DisabledBuiltins, "disable-builtin-policy", opts.DisabledBuiltins, "Built-in policy to switch off (repeatable), as the server's flag: "+joinIDs())
	fs.StringSliceVar(&opts.DisabledBuiltins, "disable-builtin", opts.DisabledBuiltins, "Built-in policy to switch off (repeatable)")
	_ = fs.MarkDeprecated("disable-builtin", "use --disable-builtin-policy, as the server does")
	fs.StringSliceVar(&opts.EnabledBuiltins, "enable-builtin-policy", opts.EnabledBuiltins, "Built-in policy off by default to switch on (repeatable), as the server's flag: "+strings.Join(policies.OptInBuiltinIDs(), ", "))
	fs.StringVarP(&opts.Namespace, "namespace", "n", opts.Namespace, "Namespace of the objects that name none")
	fs.StringToStringVar(&opts.NamespaceLabels, "namespace-labels", opts.NamespaceLabels, "Labels of the objects' namespace, for namespaceSelector (k=v,...)")
	fs.DurationVar(&opts.PolicyTimeout, "policy-timeout", opts.PolicyTimeout, "Deadline of the policy evaluation of one object")
	fs.BoolVar(&opts.FailOpen, "policy-fail-open", opts.FailOpen, "Admit, with a warning, an object whose deny policy cannot be evaluated")
	fs.StringVar(&opts.FieldValidation, "validate", opts.FieldValidation, "Keys of the values the chart neither declares nor reads, as kubectl apply --validate: strict (or true) refuses them, warn warns, ignore (or false) says nothing")
	opts.Chart.AddFlags(fs)
	return cmd
}

func joinIDs() string { return strings.Join(policies.BuiltinIDs(), ", ") }

// Validate reports command-line errors.
func (o *ValidateOptions) Validate() error {
	var errs []error
	if o.File == "" {
		errs = append(errs, errors.New("missing -f FILE: the objects to check"))
	}
	if o.Chart.Chart != "" && o.DefinitionFile != "" {
		errs = append(errs, errors.New("--chart and --definition exclude each other"))
	}
	if o.DefinitionFile != "" && (o.Chart.Repo != "" || o.Chart.Version != "") {
		errs = append(errs, errors.New("--repo and --version go with --chart; with --definition the chart is its spec.chart"))
	}
	if _, err := fieldValidationOf(o.FieldValidation); err != nil {
		errs = append(errs, err)
	}
	if o.PolicyTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--policy-timeout must be positive, got %s", o.PolicyTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}

// RunValidate checks every object of opts.File and reports as described in
// `compositor validate --help`. The error matches ErrDenied and/or ErrNotChecked
// when some object did not pass.
func RunValidate(ctx context.Context, out, errOut io.Writer, opts *ValidateOptions) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	objs, err := readObjects(opts.File, opts.Stdin)
	if err != nil {
		return err
	}
	if len(objs) == 0 {
		return fmt.Errorf("%s holds no object", displayName(opts.File))
	}
	judge, err := newJudge(ctx, opts)
	if err != nil {
		return err
	}
	target, err := loadTarget(ctx, opts)
	if err != nil {
		return err
	}

	var denied, failed int
	for _, obj := range objs {
		ref := obj.GetKind() + "/" + obj.GetName()
		req, err := buildRequest(obj, target, opts)
		if err == nil {
			var d policies.Decision
			if d, err = judge.Decide(ctx, req); err == nil {
				validation, _ := fieldValidationOf(opts.FieldValidation)
				unreadErrs, unreadWarnings := webhooks.TellUnread(judge, req, req.Kind.Version, validation, d)
				for _, w := range append(d.Warnings(), unreadWarnings...) {
					fmt.Fprintf(errOut, "Warning: %s\n", w)
				}
				if d.Denied() || len(unreadErrs) > 0 {
					denied++
					lines := []string{}
					if d.Denied() {
						lines = append(lines, d.Message())
					}
					for _, e := range unreadErrs {
						lines = append(lines, e.Error())
					}
					reason := cmp.Or(d.Reason(), metav1.StatusReasonInvalid)
					fmt.Fprintf(errOut, "%s is denied (%s):\n%s\n", ref, reason, strings.Join(lines, "\n"))
				} else {
					fmt.Fprintf(out, "%s is valid\n", ref)
				}
				continue
			}
		}
		failed++
		fmt.Fprintf(errOut, "%s cannot be checked: %v\n", ref, err)
	}

	switch {
	case denied > 0 && failed > 0:
		return fmt.Errorf("%d of %d objects %w, %d %w", denied, len(objs), ErrDenied, failed, ErrNotChecked)
	case denied > 0:
		return fmt.Errorf("%d of %d objects %w", denied, len(objs), ErrDenied)
	case failed > 0:
		return fmt.Errorf("%d of %d objects %w", failed, len(objs), ErrNotChecked)
	}
	return nil
}

// fieldValidationOf is the field validation kubectl's --validate value asks for.
func fieldValidationOf(flag string) (string, error) {
	switch strings.ToLower(flag) {
	case "strict", "true":
		return metav1.FieldValidationStrict, nil
	case "warn":
		return metav1.FieldValidationWarn, nil
	case "ignore", "false":
		return metav1.FieldValidationIgnore, nil
	}
	return "", fmt.Errorf("--validate must be strict (or true), warn, or ignore (or false), got %q", flag)
}

func displayName(file string) string {
	if file == "-" {
		return "stdin"
	}
	return file
}

// readObjects decodes every document of file (YAML or JSON), expanding kind List,
// into unstructured objects as the API server hands them to webhooks (integers stay
// integers).
func readObjects(file string, stdin io.Reader) ([]*unstructured.Unstructured, error) {
	var r io.Reader
	if file == "-" {
		r = stdin
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var objs []*unstructured.Unstructured
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", displayName(file), err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", displayName(file), n, err)
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || bytes.Equal(t, []byte("null")) {
			continue
		}
		decoded, _, err := unstructured.UnstructuredJSONScheme.Decode(j, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", displayName(file), n, err)
		}
		switch o := decoded.(type) {
		case *unstructured.Unstructured:
			objs = append(objs, o)
		case *unstructured.UnstructuredList:
			for i := range o.Items {
				objs = append(objs, &o.Items[i])
			}
		default:
			return nil, fmt.Errorf("%s, document %d: unexpected %T", displayName(file), n, decoded)
		}
	}
}

// newJudge builds the judge the webhook uses: schemas, then the built-in
// policies not switched off and those of the policy directory.
func newJudge(ctx context.Context, opts *ValidateOptions) (*policies.Judge, error) {
	engine, err := policies.NewEngine(ctx, policies.Options{
		Timeout: opts.PolicyTimeout, FailOpen: opts.FailOpen, DisabledBuiltins: opts.DisabledBuiltins, EnabledBuiltins: opts.EnabledBuiltins,
	})
	if err != nil {
		if errors.Is(err, policies.ErrUnknownBuiltin) {
			return nil, usageError{fmt.Errorf("--disable-builtin-policy or --enable-builtin-policy: %w", err)}
		}
		return nil, err
	}
	if opts.PolicyDir != "" {
		dir, err := policies.LoadDir(opts.PolicyDir)
		if err != nil {
			return nil, fmt.Errorf("--policy-dir: %w", err)
		}
		// The server keeps the last good version of a broken file; here there is none,
		// and checking without the policy would be a false "valid".
		if err := dir.Err(); err != nil {
			return nil, fmt.Errorf("--policy-dir %s: %w", opts.PolicyDir, err)
		}
		if err := engine.Sync(ctx, policies.OriginDir, dir.Policies); err != nil {
			return nil, fmt.Errorf("--policy-dir %s: %w", opts.PolicyDir, err)
		}
		engine.SetConstraints(policies.OriginDir, dir.Constraints)
	}
	return policies.NewJudge(policies.JudgeOptions{Engine: engine}), nil
}

// target is what the webhook knows about the chart of the compositions.
type target struct {
	chart *loadedChart
	// definition becomes input.definition; nil for a local chart.
	definition *policies.ChartRef
	// releaseName is the definition's krateo.io/release-name, the default of its
	// compositions'.
	releaseName string
}

// loadTarget loads the chart of --chart or --definition; nil when neither is given.
func loadTarget(ctx context.Context, opts *ValidateOptions) (*target, error) {
	if opts.DefinitionFile == "" {
		if opts.Chart.Chart == "" {
			return nil, nil
		}
		lc, err := loadChart(ctx, opts.Chart)
		if err != nil {
			return nil, err
		}
		t := &target{chart: lc}
		if lc.URL != "" {
			t.definition = &policies.ChartRef{URL: lc.URL, Version: lc.Chart.Metadata.Version}
		}
		return t, nil
	}
	b, err := os.ReadFile(opts.DefinitionFile)
	if err != nil {
		return nil, fmt.Errorf("--definition: %w", err)
	}
	def := &corev1alpha1.CompositionDefinition{}
	if err := yaml.Unmarshal(b, def); err != nil {
		return nil, fmt.Errorf("--definition %s: %w", opts.DefinitionFile, err)
	}
	if def.GroupVersionKind().GroupKind() != corev1alpha1.GroupVersion.WithKind("CompositionDefinition").GroupKind() {
		return nil, usageErrorf("--definition %s holds a %s, not a CompositionDefinition", opts.DefinitionFile, def.GroupVersionKind())
	}
	source := opts.Chart
	spec := def.Spec.Chart
	source.Chart, source.Repo, source.Version = spec.URL, spec.Repo, spec.Version
	source.InsecureSkipVerifyTLS = source.InsecureSkipVerifyTLS || spec.InsecureSkipVerifyTLS
	if source.Username == "" && spec.Credentials != nil {
		source.Username = spec.Credentials.Username
	}
	if !isChartURL(source.Chart) {
		return nil, fmt.Errorf("--definition %s: spec.chart.url %q is not a chart URL", opts.DefinitionFile, spec.URL)
	}
	lc, err := loadChart(ctx, source)
	if err != nil {
		return nil, fmt.Errorf("chart of definition %s: %w", def.Name, err)
	}
	return &target{
		chart:       lc,
		definition:  &policies.ChartRef{URL: spec.URL, Version: spec.Version},
		releaseName: def.Annotations[vocab.AnnotationReleaseName],
	}, nil
}

// buildRequest is the request the validating webhook would get for creating obj.
func buildRequest(obj *unstructured.Unstructured, t *target, opts *ValidateOptions) (*policies.Request, error) {
	gvk := obj.GroupVersionKind()
	switch {
	case gvk.Group == corev1alpha1.GroupVersion.Group && gvk.Kind == "CompositionDefinition":
		return policies.NewRequest(policies.Write{Operation: "CREATE", Object: obj.Object, Namespace: opts.Namespace,
			NamespaceLabels: namespaceLabels(cmp.Or(obj.GetNamespace(), opts.Namespace), opts.NamespaceLabels)}), nil
	case gvk.Group == vocab.CompositionGroup:
		if t == nil {
			return nil, errors.New("a composition needs its chart: give --chart or --definition")
		}
		ch := t.chart.Chart
		plural, err := servedBy(gvk, t.chart)
		if err != nil {
			return nil, err
		}
		defaultComposition(obj, gvk.Version, t.releaseName)
		req := policies.NewRequest(policies.Write{Operation: "CREATE", Object: obj.Object, Namespace: opts.Namespace,
			Resource:        metav1.GroupVersionResource{Resource: plural},
			NamespaceLabels: namespaceLabels(cmp.Or(obj.GetNamespace(), opts.Namespace), opts.NamespaceLabels),
			Chart:           ch, ChartDigest: t.chart.Digest})
		// input.definition is where the chart comes from: the --definition file's
		// spec.chart, or --chart's URL (none for a local chart).
		req.Definition = t.definition
		return req, nil
	default:
		return nil, fmt.Errorf("%s %s is neither a composition (%s) nor a CompositionDefinition (%s): the validating webhook does not admit it",
			obj.GetAPIVersion(), gvk.Kind, vocab.CompositionGroup, corev1alpha1.GroupVersion.Group)
	}
}

// servedBy checks that the chart serves gvk, and returns its resource: the API server
// would refuse any other kind or version before a webhook sees it.
func servedBy(gvk schema.GroupVersionKind, lc *loadedChart) (string, error) {
	ch := lc.Chart
	kind, err := crd.Kind(ch.Name())
	if err != nil {
		return "", err
	}
	version, err := crd.VersionName(ch.Metadata.Version)
	if err != nil {
		return "", err
	}
	if gvk.Kind != kind || gvk.Version != version {
		return "", fmt.Errorf("chart %s %s serves %s, kind %s, not %s, kind %s",
			ch.Name(), ch.Metadata.Version, schema.GroupVersion{Group: vocab.CompositionGroup, Version: version}, kind, gvk.GroupVersion(), gvk.Kind)
	}
	return crd.Plural(ch.Name())
}

// defaultComposition applies what the mutating webhook sets on a composition before
// the validating webhook sees it: the release name (the definition's default, else
// the object's name), the pause annotation and the version label.
func defaultComposition(obj *unstructured.Unstructured, version, definitionReleaseName string) {
	name := definitionReleaseName
	if name == "" {
		name = obj.GetName()
	}
	webhooks.DefaultComposition(obj, version, name)
}

// namespaceLabels are the labels of namespace ns: the given ones, and the name label
// the API server puts on every namespace.
func namespaceLabels(ns string, given map[string]string) map[string]string {
	if ns == "" {
		return nil
	}
	out := maps.Clone(given)
	if out == nil {
		out = map[string]string{}
	}
	out["kubernetes.io/metadata.name"] = ns
	return out
}
