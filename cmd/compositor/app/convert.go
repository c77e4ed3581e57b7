package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/generators/crd"
)

// convertWebhookURL is the conversion webhook of the CRD `compositor convert` builds in
// memory: conversion never calls it, but Build needs one.
const convertWebhookURL = "https://127.0.0.1" + crd.ConvertPath

// ConvertOptions configure `compositor convert`.
type ConvertOptions struct {
	// File holds the object, YAML or JSON; "-" is Stdin.
	File  string
	Stdin io.Reader
	// Charts are the chart versions the CRD is built from (--chart, repeatable): chart
	// directories or archives, or chart URLs.
	Charts []string
	// Versions are the chart versions fetched from the chart URLs of Charts (--version,
	// repeatable): with one chart URL, each is fetched from it; with several, one per
	// chart URL, in the same order.
	Versions []string
	// Chart holds how remote charts are reached (--repo, credentials, cache); its Chart
	// and Version are set per chart.
	Chart ChartOptions
	// To is the served version to convert to, such as v2-0-0.
	To string
	// Output is yaml or json.
	Output string
}

func newConvertCommand() *cobra.Command {
	opts := &ConvertOptions{Chart: newChartOptions(), Output: "yaml"}
	cmd := &cobra.Command{
		Use:   "convert -f FILE --to VERSION --chart REF|DIR [--chart REF|DIR ...]",
		Short: "Convert a composition to another version offline, as the conversion webhook would",
		Long: `convert converts one composition object (YAML or JSON; -f - reads stdin) from the
version of its apiVersion to the served version --to, exactly as the API server and
Compositor's conversion webhook do: to the storage version hub (which keeps every field
and restores what an earlier conversion stashed), then from the hub to --to. The result
is printed as YAML, or as JSON with -o json (which keeps every number as written).

The CRD is built in memory, as the reconciler builds it, from the charts given with
--chart: versions of the same chart, each with its values.schema.json and the declared
conversions of its values.conversions.yaml. Every version the object is converted
between must be among them: the object's own version, --to, and the version it is
pinned to.

The stored values of a composition have the shape of the version it is pinned to, the
label krateo.io/composition-version (set by the mutating webhook when it is created),
so the declared conversions run from that version. An object without the label is
taken as pinned to its own version: a note on stderr says so, and the label is set to
that version before converting (and so appears in the output).

Values that --to cannot hold travel in the annotations compositor.dev/conversion-data
and compositor.dev/conversion-origin; converting the output back gives them back.

Each --chart is a chart directory or archive, oci://host/path/name, a direct https://
.tgz URL, or a Helm repository URL with --repo NAME. Chart URLs need --version: with
one chart URL, every --version is fetched from it; with several, give one --version
per chart URL, in the same order.`,
		Example: `  # A 1.1.5 composition as a 2.0.0 client reads it:
  compositor convert -f app.yaml --to v2-0-0 \
    --chart samples/charts/fireworks-app/1.1.5 --chart samples/charts/fireworks-app/2.0.0

  # ...and back to 1.1.5, from stdin, as JSON:
  cat app-v2.yaml | compositor convert -f - --to v1-1-5 -o json \
    --chart samples/charts/fireworks-app/1.1.5 --chart samples/charts/fireworks-app/2.0.0

  # Charts from a Helm repository:
  kubectl get fireworksapp demo -o yaml | compositor convert -f - --to v2-0-0 \
    --chart https://charts.example.com --repo fireworks-app --version 1.1.5 --version 2.0.0`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("convert takes no arguments, got %q: the object comes from -f FILE, the charts from --chart", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Stdin = cmd.InOrStdin()
			return RunConvert(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts)
		},
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	fs := cmd.Flags()
	fs.StringVarP(&opts.File, "filename", "f", opts.File, `File with the object to convert, YAML or JSON ("-" reads stdin); without the label `+vocab.LabelCompositionVersion+` it is taken as pinned to its own version`)
	fs.StringVar(&opts.To, "to", opts.To, "Served version to convert to, such as v2-0-0")
	fs.StringArrayVar(&opts.Charts, "chart", opts.Charts, "A version of the object's chart (repeatable): a directory or archive, or a chart URL")
	fs.StringVarP(&opts.Output, "output", "o", opts.Output, "Output format: yaml or json")
	// The chart access flags are those of crd and lint, but --version is repeatable:
	// the charts are several versions of one chart.
	access := pflag.NewFlagSet("chart", pflag.ContinueOnError)
	opts.Chart.AddFlags(access)
	access.VisitAll(func(f *pflag.Flag) {
		if f.Name != "version" {
			fs.AddFlag(f)
		}
	})
	fs.StringArrayVar(&opts.Versions, "version", opts.Versions, "Exact chart version to fetch from the chart URL (repeatable: one per chart URL, or several of a single chart URL)")
	return cmd
}

// Validate reports command-line errors that need no chart or object.
func (o *ConvertOptions) Validate() error {
	var errs []error
	if o.File == "" {
		errs = append(errs, errors.New("missing -f FILE: the object to convert"))
	}
	if o.To == "" {
		errs = append(errs, errors.New("missing --to VERSION: the served version to convert to, such as v2-0-0"))
	}
	if len(o.Charts) == 0 {
		errs = append(errs, errors.New("missing --chart: give every version of the chart the object is converted between"))
	}
	if o.Output != "yaml" && o.Output != "json" {
		errs = append(errs, fmt.Errorf("--output must be yaml or json, got %q", o.Output))
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}

// chartSources pairs the chart URLs of --chart with the --version values.
func (o *ConvertOptions) chartSources() ([]ChartOptions, error) {
	var urls int
	for _, c := range o.Charts {
		if isChartURL(c) {
			urls++
		}
	}
	switch {
	case len(o.Versions) > 0 && urls == 0:
		return nil, usageErrorf("--version applies to chart URLs, and every --chart is a local chart")
	case urls > 1 && len(o.Versions) > 0 && len(o.Versions) != urls:
		return nil, usageErrorf("give one --version per chart URL, in the same order: %d chart URLs, %d --version", urls, len(o.Versions))
	}
	var out []ChartOptions
	next := 0
	for _, c := range o.Charts {
		source := o.Chart
		source.Chart, source.Version = c, ""
		switch {
		case !isChartURL(c):
			out = append(out, source)
		case urls == 1 && len(o.Versions) > 0:
			for _, v := range o.Versions {
				source.Version = v
				out = append(out, source)
			}
		default:
			if next < len(o.Versions) {
				source.Version = o.Versions[next]
				next++
			}
			out = append(out, source)
		}
	}
	return out, nil
}

// RunConvert converts the object of opts.File to opts.To and prints it to out; notes
// go to errOut.
func RunConvert(ctx context.Context, out, errOut io.Writer, opts *ConvertOptions) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	sources, err := opts.chartSources()
	if err != nil {
		return err
	}
	obj, err := readConvertObject(opts.File, opts.Stdin)
	if err != nil {
		return err
	}
	gv, err := schema.ParseGroupVersion(stringOf(obj, "apiVersion"))
	switch {
	case stringOf(obj, "apiVersion") == "":
		return fmt.Errorf("%s: the object has no apiVersion", displayName(opts.File))
	case err != nil || gv.Version == "":
		return fmt.Errorf("%s: apiVersion %q is not %s/<version>", displayName(opts.File), stringOf(obj, "apiVersion"), vocab.CompositionGroup)
	case gv.Group != vocab.CompositionGroup:
		return fmt.Errorf("%s: apiVersion %s is not in the group %s: not a composition", displayName(opts.File), gv, vocab.CompositionGroup)
	case stringOf(obj, "kind") == "":
		return fmt.Errorf("%s: the object has no kind", displayName(opts.File))
	}
	from := gv.Version
	ref := objectRef(obj)

	crdObj, err := convertCRD(ctx, sources)
	if err != nil {
		return err
	}
	schemas, err := conversion.SchemasFromCRD(crdObj)
	if err != nil {
		return err
	}
	kind := crdObj.Spec.Names.Kind
	if k := stringOf(obj, "kind"); k != kind {
		return fmt.Errorf("%s is a %s, but the charts give the kind %s", ref, k, kind)
	}
	served := strings.Join(schemas.Served(), ", ")
	if !isServed(schemas, opts.To) {
		msg := fmt.Sprintf("unknown --to version %q: the charts give %s", opts.To, served)
		if opts.To == schemas.Hub() {
			msg += fmt.Sprintf(" (%s is the storage version, which no client reads)", opts.To)
		} else if name, err := crd.VersionName(opts.To); err == nil && isServed(schemas, name) {
			msg += fmt.Sprintf(" (chart version %s is served as %s)", opts.To, name)
		}
		return usageErrorf("%s", msg)
	}
	if !isServed(schemas, from) {
		return fmt.Errorf("%s is of version %s, which none of the charts gives (they give %s): add that chart version with --chart", ref, from, served)
	}

	metadata, err := objectField(obj, "metadata", "metadata")
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	labels, err := objectField(metadata, "labels", "metadata.labels")
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	switch pin, ok := labels[vocab.LabelCompositionVersion]; {
	case !ok:
		fmt.Fprintf(errOut, "Note: %s has no %s label: taking it as pinned to its own version %s\n", ref, vocab.LabelCompositionVersion, from)
		labels[vocab.LabelCompositionVersion] = from
	default:
		s, _ := pin.(string)
		if !isServed(schemas, s) {
			return fmt.Errorf("%s is pinned to %v (label %s), which none of the charts gives (they give %s): add that chart version with --chart",
				ref, pin, vocab.LabelCompositionVersion, served)
		}
	}

	// As the API server converts an object it stores and one it reads: to the storage
	// version, then to the version asked for.
	if err := schemas.Convert(obj, from, schemas.Hub()); err != nil {
		return fmt.Errorf("converting %s from %s to the storage version: %w", ref, from, err)
	}
	if err := schemas.Convert(obj, schemas.Hub(), opts.To); err != nil {
		return fmt.Errorf("converting %s from the storage version to %s: %w", ref, opts.To, err)
	}

	var b []byte
	if opts.Output == "json" {
		b, err = json.MarshalIndent(obj, "", "  ")
		b = append(b, '\n')
	} else {
		b, err = yaml.Marshal(obj)
	}
	if err != nil {
		return fmt.Errorf("encoding %s: %w", ref, err)
	}
	_, err = out.Write(b)
	return err
}

// convertCRD loads the charts and builds their CRD, every chart a served version, as
// the reconciler builds it.
func convertCRD(ctx context.Context, sources []ChartOptions) (*apiextensionsv1.CustomResourceDefinition, error) {
	var (
		name     string
		versions []crd.ServedVersion
		from     = map[string]string{} // served version → the --chart that gives it
	)
	for _, source := range sources {
		what := source.Chart
		if source.Version != "" {
			what += " " + source.Version
		}
		lc, err := loadChart(ctx, source)
		if err != nil {
			return nil, err
		}
		ch := lc.Chart
		switch {
		case name == "":
			name = ch.Name()
		case ch.Name() != name:
			return nil, usageErrorf("--chart %s is the chart %s, not %s: the charts must be versions of one chart", what, ch.Name(), name)
		}
		version, err := crd.VersionName(ch.Metadata.Version)
		if err != nil {
			return nil, fmt.Errorf("--chart %s: %w", what, err)
		}
		if other, ok := from[version]; ok {
			return nil, usageErrorf("--chart %s and --chart %s both give the version %s", other, what, version)
		}
		from[version] = what
		served, _, err := crd.ServedVersionOf(ch)
		if err != nil {
			return nil, err
		}
		versions = append(versions, served)
	}
	built, _, err := crd.Build(crd.BuildOptions{ChartName: name, Versions: versions, Conversion: crd.ConversionWebhook{URL: convertWebhookURL}})
	if err != nil {
		return nil, fmt.Errorf("building the CRD of chart %s: %w", name, err)
	}
	return built, nil
}

// readConvertObject reads the one object of file (YAML or JSON) as the conversion
// webhook decodes it: numbers as json.Numbers.
func readConvertObject(file string, stdin io.Reader) (map[string]any, error) {
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
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", displayName(file), err)
		}
		if t := bytes.TrimSpace(doc); len(t) > 0 && !isYAMLComments(t) {
			docs = append(docs, doc)
		}
	}
	switch len(docs) {
	case 0:
		return nil, fmt.Errorf("%s holds no object", displayName(file))
	case 1:
	default:
		return nil, fmt.Errorf("%s holds %d documents: convert takes one object", displayName(file), len(docs))
	}
	raw := bytes.TrimSpace(docs[0])
	if raw[0] != '{' {
		// JSON is YAML, but going through YAML would round numbers: JSON is decoded as is.
		j, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", displayName(file), conversion.ErrMalformedObject, err)
		}
		raw = j
	}
	obj, err := conversion.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", displayName(file), err)
	}
	return obj, nil
}

// isYAMLComments tells whether a YAML document is only comments.
func isYAMLComments(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			return false
		}
	}
	return true
}

// isServed tells whether version is a served version of the CRD: the hub is not one,
// no client sees it.
func isServed(s *conversion.Schemas, version string) bool {
	return version != s.Hub() && s.Has(version)
}

func stringOf(obj map[string]any, key string) string {
	s, _ := obj[key].(string)
	return s
}

// objectField is obj[key], an object, created when absent; path names it in errors.
func objectField(obj map[string]any, key, path string) (map[string]any, error) {
	v, ok := obj[key]
	if !ok || v == nil {
		m := map[string]any{}
		obj[key] = m
		return m, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not an object", conversion.ErrMalformedObject, path)
	}
	return m, nil
}

// objectRef names obj in messages: Kind/name.
func objectRef(obj map[string]any) string {
	metadata, _ := obj["metadata"].(map[string]any)
	name, _ := metadata["name"].(string)
	if name == "" {
		return stringOf(obj, "kind") + " (no name)"
	}
	return stringOf(obj, "kind") + "/" + name
}
