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
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartlint"
	"github.com/compositor-dev/compositor/chartverify"
	"github.com/compositor-dev/compositor/generators/crd"
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
// chartfetch, with its network policy and archive limits.
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
	ref := chartfetch.Ref{
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
	fetcher, err := chartfetch.New(chartfetch.Options{
		CacheDir: o.CacheDir, RegistryConfigPath: o.RegistryConfigPath, AllowNetworks: chartfetch.PrivateNetworks(),
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
	obj, report, err := crd.ForChart(lc.Chart, crd.ConversionWebhook{URL: opts.ConversionURL})
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
	// Previous is an earlier version of the same chart (--previous), in any form Chart
	// takes; lint then also checks the conversion of its values to the chart's.
	Previous string
	// PreviousVersion is the version of Previous to fetch when it is a chart URL.
	PreviousVersion string
	// Signature checks a local archive's signature, offline.
	Signature SignatureOptions
}

func newLintCommand() *cobra.Command {
	opts := &LintOptions{Chart: newChartOptions()}
	cmd := &cobra.Command{
		Use:   "lint REF|DIR [--previous REF|DIR]",
		Short: "Check that a chart can become a Compositor API",
		Long: `lint checks a chart the way Compositor will use it: Chart.yaml naming (Kind, plural,
version), values.schema.json present and compiling (as Helm and the webhook compile
it) and accepting the default values, the translation into a CRD schema with what it
loses, the declared conversions of values.conversions.yaml parsing and compiling, and a
preview of the RBAC the chart's controller gets, resolved against the built-in
Kubernetes kinds (kinds from CRDs are warnings: a cluster must serve them).

With --previous, an earlier version of the same chart (a directory, archive or chart
URL, as the chart argument; --previous-version is its version when it is a chart URL),
lint also checks the conversion from that version to this one, on a CRD serving both
as the reconciler builds it: the steps of values.conversions.yaml are converted there
and back on values drawn from both schemas, and a rule that fails, writes a value the
other version refuses or loses values without acknowledgeLoss is an error; what
acknowledged rules lose is information, with a value that shows it. Value paths one
version declares and the other does not, which no rule converts, are a warning when
some were removed and others added (that looks like a rename the chart should declare
with a move rule), and information when some were only removed.

Each finding is one line, [ERROR], [WARNING] or [INFO] with the file it is about.
The exit code is non-zero when there is an error; warnings alone pass.`,
		Example: `  compositor lint samples/charts/fireworks-app/1.1.5
  compositor lint https://charts.example.com --repo fireworks-app --version 1.1.5

  # 2.0.0 and the conversion of 1.1.5 compositions to it:
  compositor lint samples/charts/fireworks-app/2.0.0 --previous samples/charts/fireworks-app/1.1.5
  compositor lint samples/charts/fireworks-app/2.0.0 \
    --previous https://charts.example.com --repo fireworks-app --previous-version 1.1.5`,
		Args: chartArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Chart.Chart = args[0]
			return RunLint(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts)
		},
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	fs := cmd.Flags()
	opts.Chart.AddFlags(fs)
	fs.StringVar(&opts.Previous, "previous", opts.Previous, "An earlier version of the chart, a directory or archive or a chart URL: also check the conversion of its values to the chart's")
	fs.StringVar(&opts.PreviousVersion, "previous-version", opts.PreviousVersion, "Exact chart version of --previous when it is a chart URL")
	opts.Signature.AddFlags(fs)
	return cmd
}

// ErrLint means lint found at least one error in the chart.
var ErrLint = errors.New("chart has lint errors")

// lintSources are where the chart of opts and its --previous come from. The access
// flags (--repo, credentials, cache) serve both; --repo goes to whichever is a chart
// URL when the other is local.
func (o *LintOptions) lintSources() (chartSource, previous ChartOptions, err error) {
	chartSource = o.Chart
	if o.Previous == "" {
		if o.PreviousVersion != "" {
			return chartSource, previous, usageErrorf("--previous-version applies to --previous, which is not given")
		}
		return chartSource, previous, nil
	}
	previous = o.Chart
	previous.Chart, previous.Version = o.Previous, o.PreviousVersion
	switch {
	case !isChartURL(o.Previous) && o.PreviousVersion != "":
		return chartSource, previous, usageErrorf("--previous-version applies to a chart URL, not to the local chart %s", o.Previous)
	case !isChartURL(o.Previous) && isChartURL(o.Chart.Chart):
		previous.Repo = ""
	case isChartURL(o.Previous) && !isChartURL(o.Chart.Chart):
		chartSource.Repo = ""
	}
	return chartSource, previous, nil
}

// RunLint lints the chart opts.Chart, and with opts.Previous the conversion from that
// earlier version, and prints the findings to out.
func RunLint(ctx context.Context, out, _ io.Writer, opts *LintOptions) error {
	source, previousSource, err := opts.lintSources()
	if err != nil {
		return err
	}
	lc, err := loadChart(ctx, source)
	if err != nil {
		return err
	}
	webhook := crd.ConversionWebhook{URL: DefaultConversionURL}
	var findings []chartlint.Finding
	if opts.Previous == "" {
		fmt.Fprintf(out, "==> Linting %s %s\n", lc.Chart.Name(), lc.Chart.Metadata.Version)
		findings = chartlint.Lint(ctx, lc.Chart, webhook)
	} else {
		prev, err := loadChart(ctx, previousSource)
		if err != nil {
			return fmt.Errorf("--previous: %w", err)
		}
		findings, err = chartlint.LintUpgrade(ctx, lc.Chart, prev.Chart, webhook)
		switch {
		case errors.Is(err, chartlint.ErrNotEarlier):
			return usageErrorf("--previous %s: %w", opts.Previous, err)
		case err != nil:
			return fmt.Errorf("--previous %s: %w", opts.Previous, err)
		}
		fmt.Fprintf(out, "==> Linting %s %s, from %s\n", lc.Chart.Name(), lc.Chart.Metadata.Version, prev.Chart.Metadata.Version)
	}
	signature, err := lintSignature(source.Chart, &opts.Signature)
	if err != nil {
		return err
	}
	findings = append(findings, signature...)
	counts := map[chartlint.Severity]int{}
	for _, f := range findings {
		counts[f.Severity]++
		fmt.Fprintln(out, f)
	}
	fmt.Fprintf(out, "%d error(s), %d warning(s)\n", counts[chartlint.SeverityError], counts[chartlint.SeverityWarning])
	if counts[chartlint.SeverityError] > 0 {
		return fmt.Errorf("%w: %s %s: %d error(s)", ErrLint, lc.Chart.Name(), lc.Chart.Metadata.Version, counts[chartlint.SeverityError])
	}
	return nil
}

// lintSignature checks the signature of a local chart archive offline, when one is
// beside it (ARCHIVE.prov) or given (--prov, --bundle), or when a key is given: an
// unsigned archive is then an error too.
func lintSignature(chartPath string, o *SignatureOptions) ([]chartlint.Finding, error) {
	info, err := os.Stat(chartPath)
	local := err == nil && !info.IsDir()
	if !local {
		if o.Prov != "" || o.Bundle != "" || o.hasKeys() {
			return nil, usageErrorf("signatures are checked on a local chart archive (.tgz); %s is not one", chartPath)
		}
		return nil, nil
	}
	prov, bundle, err := o.material(chartPath)
	if err != nil {
		return nil, err
	}
	if len(prov) == 0 && len(bundle) == 0 && !o.hasKeys() {
		return nil, nil
	}
	file := filepath.Base(chartPath)
	if !o.hasKeys() {
		return []chartlint.Finding{{Severity: chartlint.SeverityWarning, File: file,
			Message: "a signature is given but no key to check it with (--keyring for a .prov; --key or the keyless flags for a bundle)"}}, nil
	}
	archive, _, err := readArchive(chartPath)
	if err != nil {
		return nil, err
	}
	id, err := o.verify(archive, prov, bundle)
	var refusal *chartverify.Error
	switch {
	case errors.As(err, &refusal):
		return []chartlint.Finding{{Severity: chartlint.SeverityError, File: file, Message: err.Error()}}, nil
	case err != nil:
		return nil, err // a flag or file mistake, not a verdict on the signature
	}
	return []chartlint.Finding{{Severity: chartlint.SeverityInfo, File: file, Message: describeIdentity(id)}}, nil
}
