package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/chartsource"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/policies"
)

// ChartOptions say where the chart of `validate`, `crd` and `lint` comes from: a local
// chart directory or archive, or a reference fetched as the reconciler fetches it.
type ChartOptions struct {
	// Chart is a chart directory or .tgz file, or a chart URL: oci://host/path/name, a
	// direct https:// archive URL, or a Helm repository URL used with Repo.
	Chart string
	// Repo is the chart's name in the Helm repository at Chart.
	Repo string
	// Version is the exact chart version; required for OCI and repositories.
	Version string
	// Username and Password are basic-auth credentials for the chart source.
	Username string
	Password string
	// CAFile is a PEM bundle trusted besides the system roots.
	CAFile string
	// InsecureSkipVerifyTLS turns off certificate verification of the chart source.
	InsecureSkipVerifyTLS bool
	// RegistryConfigPath is Helm's registry config file with OCI credentials.
	RegistryConfigPath string
	// CacheDir holds downloaded chart archives, keyed by digest.
	CacheDir string
}

func newChartOptions() ChartOptions {
	return ChartOptions{
		RegistryConfigPath: os.Getenv("HELM_REGISTRY_CONFIG_PATH"),
		CacheDir:           defaultChartCacheDir(),
	}
}

// AddFlags registers how to reach a remote chart; the chart itself is an argument or
// --chart, depending on the command.
func (o *ChartOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Repo, "repo", o.Repo, "Chart name in the Helm repository given as the chart URL")
	fs.StringVar(&o.Version, "version", o.Version, "Exact chart version (required for OCI and Helm repositories)")
	fs.StringVar(&o.Username, "username", o.Username, "Basic-auth user name for the chart source")
	fs.StringVar(&o.Password, "password", o.Password, "Basic-auth password for the chart source")
	fs.StringVar(&o.CAFile, "ca-file", o.CAFile, "PEM bundle trusted for the chart source besides the system roots")
	fs.BoolVar(&o.InsecureSkipVerifyTLS, "insecure-skip-tls-verify", o.InsecureSkipVerifyTLS, "Do not verify the chart source's certificate")
	fs.StringVar(&o.RegistryConfigPath, "helm-registry-config-path", o.RegistryConfigPath, "Helm registry config file with OCI credentials (env HELM_REGISTRY_CONFIG_PATH)")
	fs.StringVar(&o.CacheDir, "chart-cache-dir", o.CacheDir, "Directory of downloaded chart archives, keyed by digest")
}

// loadedChart is a chart with what is known of where it came from.
type loadedChart struct {
	Chart *chart.Chart
	// Digest is "sha256:<hex>" of the archive; empty for a chart directory.
	Digest string
	// URL is the chart URL; empty for a local chart.
	URL string
}

func isChartURL(s string) bool { return strings.Contains(s, "://") }

// loadChart loads a local chart with Helm's loader, or fetches a remote one through
// chartsource, with its network policy and archive limits.
func loadChart(ctx context.Context, o ChartOptions) (*loadedChart, error) {
	if o.Chart == "" {
		return nil, usageErrorf("no chart given")
	}
	if !isChartURL(o.Chart) {
		if o.Repo != "" || o.Version != "" {
			return nil, usageErrorf("--repo and --version apply to chart URLs, not to the local chart %s", o.Chart)
		}
		ch, err := loader.Load(o.Chart)
		if err != nil {
			return nil, fmt.Errorf("loading chart %s: %w", o.Chart, err)
		}
		lc := &loadedChart{Chart: ch}
		if info, err := os.Stat(o.Chart); err == nil && !info.IsDir() {
			b, err := os.ReadFile(o.Chart)
			if err != nil {
				return nil, err
			}
			sum := sha256.Sum256(b)
			lc.Digest = "sha256:" + hex.EncodeToString(sum[:])
		}
		return lc, nil
	}
	ref := chartsource.Ref{
		URL:                   o.Chart,
		Repo:                  o.Repo,
		Version:               o.Version,
		InsecureSkipVerifyTLS: o.InsecureSkipVerifyTLS,
		Username:              o.Username,
		Password:              o.Password,
	}
	if o.CAFile != "" {
		ca, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		ref.CAData = ca
	}
	// A person's own command fetching what that person names cannot be turned against
	// a cluster: private ranges (their own registry, loopback) are allowed; link-local
	// and metadata addresses are not.
	fetcher, err := chartsource.New(chartsource.Options{
		CacheDir: o.CacheDir, RegistryConfigPath: o.RegistryConfigPath, AllowNetworks: chartsource.PrivateNetworks(),
	})
	if err != nil {
		return nil, err
	}
	res, err := fetcher.Fetch(ctx, ref)
	if err != nil {
		return nil, err
	}
	return &loadedChart{Chart: res.Chart, Digest: res.Digest, URL: o.Chart}, nil
}

// chartArgs accepts exactly one chart argument.
func chartArgs(_ *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
		return usageErrorf("missing argument REF|DIR: a chart directory or archive, or a chart URL")
	case 1:
		return nil
	default:
		return usageErrorf("one chart at a time, got %d arguments", len(args))
	}
}

// DefaultConversionURL is where `compositor crd` points the conversion webhook unless
// told otherwise: the in-cluster Service of a default installation.
const DefaultConversionURL = "https://compositor-webhook.compositor-system.svc" + crd.ConvertPath

// CRDOptions configure `compositor crd`.
type CRDOptions struct {
	Chart ChartOptions
	// ConversionURL is the conversion webhook URL written into the CRD.
	ConversionURL string
	// Output is yaml or json.
	Output string
}

func newCRDCommand() *cobra.Command {
	opts := &CRDOptions{Chart: newChartOptions(), ConversionURL: DefaultConversionURL, Output: "yaml"}
	cmd := &cobra.Command{
		Use:   "crd REF|DIR",
		Short: "Print the CRD generated from a chart, and its lossiness report",
		Long: `crd prints the CustomResourceDefinition Compositor generates for one chart version
(the API server's own validation has accepted it) to stdout, and to stderr one line
per constraint of values.schema.json that the CRD cannot carry ("path: keyword:
reason"); the validating webhook still enforces those.

REF is oci://host/path/name (with --version), a direct https:// .tgz URL, or a Helm
repository URL with --repo NAME --version V; DIR is a chart directory or archive.`,
		Example: `  compositor crd samples/charts/fireworks-app/1.1.5
  compositor crd oci://registry.example.com/charts/fireworks-app --version 1.1.5 -o json`,
		Args: chartArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Chart.Chart = args[0]
			return RunCRD(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts)
		},
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	fs := cmd.Flags()
	fs.StringVar(&opts.ConversionURL, "conversion-url", opts.ConversionURL, "Conversion webhook URL written into the CRD")
	fs.StringVarP(&opts.Output, "output", "o", opts.Output, "Output format: yaml or json")
	opts.Chart.AddFlags(fs)
	return cmd
}

// RunCRD prints the CRD of the chart opts.Chart to out and its lossiness report to
// errOut.
func RunCRD(ctx context.Context, out, errOut io.Writer, opts *CRDOptions) error {
	if opts.Output != "yaml" && opts.Output != "json" {
		return usageErrorf("--output must be yaml or json, got %q", opts.Output)
	}
	lc, err := loadChart(ctx, opts.Chart)
	if err != nil {
		return err
	}
	obj, report, err := generateCRD(lc.Chart, crd.ConversionWebhook{URL: opts.ConversionURL})
	if err != nil {
		return err
	}
	b, err := encodeCRD(obj, opts.Output)
	if err != nil {
		return err
	}
	if _, err := out.Write(b); err != nil {
		return err
	}
	_, err = io.WriteString(errOut, report.String())
	return err
}

// generateCRD is what the reconciler generates for one chart version, with the
// translation and size reports joined.
func generateCRD(ch *chart.Chart, conversion crd.ConversionWebhook) (*apiextensionsv1.CustomResourceDefinition, crd.Report, error) {
	spec, report, err := crd.TranslateChart(ch)
	if err != nil {
		return nil, nil, fmt.Errorf("translating the schema of chart %s %s: %w", ch.Name(), ch.Metadata.Version, err)
	}
	obj, dropped, err := crd.Build(crd.BuildOptions{
		ChartName:  ch.Name(),
		Versions:   []crd.ServedVersion{{ChartVersion: ch.Metadata.Version, Spec: spec}},
		Conversion: conversion,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("building the CRD of chart %s %s: %w", ch.Name(), ch.Metadata.Version, err)
	}
	return obj, append(report, dropped...), nil
}

// encodeCRD writes the CRD as a manifest to apply: no status, no empty timestamps.
func encodeCRD(obj *apiextensionsv1.CustomResourceDefinition, format string) ([]byte, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	if format == "json" {
		b, err := json.MarshalIndent(m, "", "  ")
		return append(b, '\n'), err
	}
	return yaml.Marshal(m)
}

// LintOptions configure `compositor lint`.
type LintOptions struct {
	Chart ChartOptions
}

func newLintCommand() *cobra.Command {
	opts := &LintOptions{Chart: newChartOptions()}
	cmd := &cobra.Command{
		Use:   "lint REF|DIR",
		Short: "Check that a chart can become a Compositor API",
		Long: `lint checks a chart the way Compositor will use it: Chart.yaml naming (Kind, plural,
version), values.schema.json present and compiling (as Helm and the webhook compile
it) and accepting the default values, the translation into a CRD schema with what it
loses, and a preview of the RBAC the chart's controller gets, resolved against the
built-in Kubernetes kinds (kinds from CRDs are warnings: a cluster must serve them).

Each finding is one line, [ERROR], [WARNING] or [INFO] with the file it is about.
The exit code is non-zero when there is an error; warnings alone pass.`,
		Example: `  compositor lint samples/charts/fireworks-app/1.1.5
  compositor lint https://charts.example.com --repo fireworks-app --version 1.1.5`,
		Args: chartArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Chart.Chart = args[0]
			return RunLint(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts)
		},
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	opts.Chart.AddFlags(cmd.Flags())
	return cmd
}

// ErrLint means lint found at least one error in the chart.
var ErrLint = errors.New("chart has lint errors")

// RunLint lints the chart opts.Chart and prints its findings to out.
func RunLint(ctx context.Context, out, _ io.Writer, opts *LintOptions) error {
	lc, err := loadChart(ctx, opts.Chart)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "==> Linting %s %s\n", lc.Chart.Name(), lc.Chart.Metadata.Version)
	findings := LintChart(ctx, lc.Chart)
	counts := map[Severity]int{}
	for _, f := range findings {
		counts[f.Severity]++
		fmt.Fprintln(out, f)
	}
	fmt.Fprintf(out, "%d error(s), %d warning(s)\n", counts[SeverityError], counts[SeverityWarning])
	if counts[SeverityError] > 0 {
		return fmt.Errorf("%w: %s %s: %d error(s)", ErrLint, lc.Chart.Name(), lc.Chart.Metadata.Version, counts[SeverityError])
	}
	return nil
}

// Severity grades a lint finding. Errors are what would make Compositor refuse the
// chart or its compositions; warnings what works but is likely a mistake.
type Severity string

// Severities of lint findings.
const (
	SeverityError   Severity = "ERROR"
	SeverityWarning Severity = "WARNING"
	SeverityInfo    Severity = "INFO"
)

// LintFinding is one result of lint.
type LintFinding struct {
	Severity Severity
	// File is the chart file the finding is about, relative to the chart root, e.g.
	// "charts/cache/values.schema.json".
	File    string
	Message string
}

// String is the line lint prints; continuation lines of a long message are indented.
func (f LintFinding) String() string {
	return fmt.Sprintf("[%s] %s: %s", f.Severity, f.File, strings.ReplaceAll(f.Message, "\n", "\n    "))
}

// LintChart runs every lint check on ch, in order: naming, schemas, translation, RBAC.
func LintChart(ctx context.Context, ch *chart.Chart) []LintFinding {
	l := &linter{}
	l.naming(ch)
	if l.schemas(ctx, ch) {
		l.translation(ch)
	}
	l.rbac(ch)
	return l.findings
}

type linter struct {
	findings []LintFinding
	plural   string
	version  string
}

func (l *linter) add(s Severity, file, format string, args ...any) {
	l.findings = append(l.findings, LintFinding{Severity: s, File: file, Message: fmt.Sprintf(format, args...)})
}

func (l *linter) naming(ch *chart.Chart) {
	if err := ch.Validate(); err != nil {
		l.add(SeverityError, "Chart.yaml", "%v", err)
	}
	kind, err := crd.Kind(ch.Name())
	if err != nil {
		l.add(SeverityError, "Chart.yaml", "name: %v", err)
	}
	plural, perr := crd.Plural(ch.Name())
	version, verr := crd.VersionName(ch.Metadata.Version)
	if verr != nil {
		l.add(SeverityError, "Chart.yaml", "version: %v", verr)
	}
	if err != nil || perr != nil || verr != nil {
		return
	}
	l.plural, l.version = plural, version
	l.add(SeverityInfo, "Chart.yaml", "API %s/%s, kind %s, resource %s.%s", vocab.CompositionGroup, version, kind, plural, vocab.CompositionGroup)
}

// schemas checks that every chart of the tree has a schema that compiles, and that
// the default values pass them. It reports whether every schema compiled.
func (l *linter) schemas(ctx context.Context, ch *chart.Chart) bool {
	ok := true
	validator := policies.NewJSONSchemaValidator(0)
	walkCharts(ch, "", func(c *chart.Chart, dir string) {
		file := dir + "values.schema.json"
		if len(c.Schema) == 0 {
			if dir == "" {
				l.add(SeverityWarning, file, "missing: the generated API accepts any spec and the webhook cannot check the values")
			} else {
				l.add(SeverityWarning, file, "missing: the values under %s are not checked", c.Name())
			}
			return
		}
		// Each schema alone, so the finding names its file.
		alone := &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: c.Name(), Version: c.Metadata.Version}, Schema: c.Schema}
		if _, err := validator.ValidateValues(ctx, alone, "", nil); err != nil {
			// The file is named already; the validator's "which chart" prefix is noise.
			l.add(SeverityError, file, "%s", strings.TrimPrefix(err.Error(), "values.schema.json of chart "+c.Name()+": "))
			ok = false
		}
	})
	if !ok {
		return false
	}
	vs, err := validator.ValidateValues(ctx, ch, "", map[string]any{})
	if err != nil {
		l.add(SeverityError, "values.schema.json", "%v", err)
		return false
	}
	for _, v := range vs {
		l.add(SeverityWarning, "values.yaml", "a composition with an empty spec would be denied: %s", v)
	}
	return true
}

func (l *linter) translation(ch *chart.Chart) {
	_, report, err := generateCRD(ch, crd.ConversionWebhook{URL: DefaultConversionURL})
	if err != nil {
		l.add(SeverityError, "values.schema.json", "%v", err)
		return
	}
	for _, loss := range report {
		file := "values.schema.json"
		switch {
		case strings.HasPrefix(loss.SchemaPath, "#"):
			file += loss.SchemaPath
		case loss.SchemaPath != "":
			file = loss.SchemaPath
		}
		l.add(SeverityInfo, file, "CRD: %s", loss)
	}
}

func (l *linter) rbac(ch *chart.Chart) {
	mapper := builtinRESTMapper()
	types, err := rbac.ResourceTypes(ch, mapper)
	if errors.Is(err, rbac.ErrUnknownKind) && !errors.Is(err, rbac.ErrForbiddenKind) {
		l.add(SeverityWarning, "templates", "%v; a cluster must serve them (the preview assumes namespaced types)", err)
		types, err = rbac.ResourceTypes(ch, guessingMapper{mapper})
	}
	if err != nil {
		if errors.Is(err, rbac.ErrUnknownKind) && !errors.Is(err, rbac.ErrForbiddenKind) {
			return // already reported; some kinds cannot even be guessed
		}
		l.add(SeverityError, "templates", "%v", err)
		return
	}
	if l.plural == "" {
		return // naming failed: no names to preview RBAC objects under
	}
	objs, err := rbac.Generate(rbac.Options{Namespace: "default", Plural: l.plural, Version: l.version, Types: types})
	if err != nil {
		l.add(SeverityError, "templates", "%v", err)
		return
	}
	for _, r := range objs.ReleaseRole.Rules {
		l.add(SeverityInfo, "templates", "RBAC in each composition namespace: %s", formatRule(r))
	}
	if objs.ClusterRole != nil {
		for _, r := range objs.ClusterRole.Rules {
			l.add(SeverityInfo, "templates", "RBAC cluster-wide: %s", formatRule(r))
		}
	}
}

// walkCharts calls fn for ch and every subchart, depth first, with the directory of
// each inside the chart ("" for ch, "charts/<name>/" below).
func walkCharts(ch *chart.Chart, dir string, fn func(c *chart.Chart, dir string)) {
	fn(ch, dir)
	for _, d := range ch.Dependencies() {
		walkCharts(d, dir+"charts/"+d.Name()+"/", fn)
	}
}

// formatRule renders a rule as "verbs on resources", e.g.
// "get, list on deployments.apps, statefulsets.apps".
func formatRule(r rbacv1.PolicyRule) string {
	var resources []string
	for _, g := range r.APIGroups {
		for _, res := range r.Resources {
			resources = append(resources, schema.GroupResource{Group: g, Resource: res}.String())
		}
	}
	return strings.Join(r.Verbs, ", ") + " on " + strings.Join(resources, ", ")
}

// gaVersion matches the API versions a default API server serves for built-in types:
// alpha versions are off by default, and the beta versions of the built-in scheme
// are either removed or off by default.
var gaVersion = regexp.MustCompile(`^v[0-9]+$`)

// clusterScopedKinds are the built-in kinds (and those of the API server's own
// extension groups) that are not namespaced. Anything else in the scheme is.
var clusterScopedKinds = map[schema.GroupKind]bool{
	{Kind: "Namespace"}:        true,
	{Kind: "Node"}:             true,
	{Kind: "PersistentVolume"}: true,
	{Kind: "ComponentStatus"}:  true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             true,
	{Group: "authentication.k8s.io", Kind: "TokenReview"}:                             true,
	{Group: "authentication.k8s.io", Kind: "SelfSubjectReview"}:                       true,
	{Group: "authorization.k8s.io", Kind: "SubjectAccessReview"}:                      true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectAccessReview"}:                  true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectRulesReview"}:                   true,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 true,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:                        true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                       true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}:       true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                                true,
	{Group: "networking.k8s.io", Kind: "IPAddress"}:                                   true,
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:                                 true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  true,
	{Group: "resource.k8s.io", Kind: "DeviceClass"}:                                   true,
	{Group: "resource.k8s.io", Kind: "ResourceSlice"}:                                 true,
	{Group: "resource.k8s.io", Kind: "DeviceTaintRule"}:                               true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                                      true,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                                        true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                               true,
	{Group: "storage.k8s.io", Kind: "VolumeAttributesClass"}:                          true,
	{Group: "storagemigration.k8s.io", Kind: "StorageVersionMigration"}:               true,
}

// builtinRESTMapper maps the GA kinds of client-go's scheme, plus CRDs and
// APIServices, as a default API server would: lint's stand-in for discovery.
var builtinRESTMapper = sync.OnceValue(func() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	add := func(gvk schema.GroupVersionKind) {
		scope := meta.RESTScopeNamespace
		if clusterScopedKinds[gvk.GroupKind()] {
			scope = meta.RESTScopeRoot
		}
		m.Add(gvk, scope)
	}
	for gvk, t := range scheme.Scheme.AllKnownTypes() {
		if !gaVersion.MatchString(gvk.Version) || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		// Only objects: the scheme also holds options and events of every group.
		if _, ok := t.FieldByName("ObjectMeta"); !ok {
			continue
		}
		add(gvk)
	}
	add(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	add(schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"})
	return m
})

// guessingMapper maps kinds its RESTMapper does not know to a guessed, namespaced
// resource, so lint can preview RBAC for charts that create custom resources.
type guessingMapper struct {
	meta.RESTMapper
}

func (g guessingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m, err := g.RESTMapper.RESTMapping(gk, versions...)
	if !meta.IsNoMatchError(err) || len(versions) == 0 || slices.Contains(versions, "") {
		return m, err
	}
	gvk := gk.WithVersion(versions[0])
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return &meta.RESTMapping{Resource: plural, GroupVersionKind: gvk, Scope: meta.RESTScopeNamespace}, nil
}
