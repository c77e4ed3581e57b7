package crd

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/util/webhook"
)

const (
	// HubVersion is the unserved storage version: it keeps every field, so objects
	// stored through any served version never need migrating
	// (docs/conversion.md#versions-and-the-hub).
	HubVersion = "hub"
	// DefaultMaxBytes is the size budget of a generated CRD in JSON.
	DefaultMaxBytes = 1 << 20
	// ConvertPath is the path of Compositor's conversion webhook.
	ConvertPath = "/convert"
)

// DefaultCategories are the kubectl categories of generated CRDs
// (kubectl get compositions).
var DefaultCategories = []string{"compositions"}

var (
	// ErrNoVersions means BuildOptions listed no served version.
	ErrNoVersions = errors.New("no served version")
	// ErrDuplicateVersion means two chart versions map to the same served version name.
	ErrDuplicateVersion = errors.New("two chart versions give the same version name")
	// ErrNoConversionWebhook means neither a Service nor a URL was given for /convert.
	ErrNoConversionWebhook = errors.New("no conversion webhook client configuration")
	// ErrInvalidCABundle means the conversion webhook's CA bundle is not PEM
	// certificates; the API server would never mark such a CRD Established.
	ErrInvalidCABundle = errors.New("invalid conversion webhook CA bundle")
	// ErrTooLarge means the CRD exceeds the size budget even without descriptions.
	ErrTooLarge = errors.New("CRD exceeds the size budget")
	// ErrInvalidCRD means the API server's validation refuses the generated CRD. It
	// indicates a bug in this package: Build never returns such a CRD.
	ErrInvalidCRD = errors.New("generated CRD is invalid")
)

// BuildOptions describe the CRD of one chart.
type BuildOptions struct {
	// Group defaults to Group.
	Group string
	// ChartName gives the kind and plural (see Kind, Plural).
	ChartName string
	// Versions are the served versions, in any order.
	Versions []ServedVersion
	// Conversion is where the API server sends ConversionReviews.
	Conversion ConversionWebhook
	// Categories defaults to DefaultCategories.
	Categories []string
	// MaxBytes defaults to DefaultMaxBytes.
	MaxBytes int
}

// ServedVersion is one chart version and the spec schema translated from it.
type ServedVersion struct {
	ChartVersion string
	// Spec comes from Translate or TranslateChart; nil keeps any value (a chart
	// without values.schema.json).
	Spec *apiextensionsv1.JSONSchemaProps
	// Conversions are the steps from earlier chart versions' values to this one's
	// (package conversion), kept in the annotation
	// vocab.AnnotationPrefixConversions + the version's name with the chart version.
	Conversions []corev1alpha1.ConversionStep
}

// ConversionWebhook locates Compositor's conversion endpoint: a Service (its Path
// defaults to ConvertPath) or a URL, and the PEM CA bundle that signs its certificate
// (empty while cert-manager's cainjector is to fill it in).
type ConversionWebhook struct {
	Service  *apiextensionsv1.ServiceReference
	URL      string
	CABundle []byte
}

// Build assembles the CRD <plural>.<group>: one served version per chart version
// (oldest first), each with the fixed status schema, status subresource and print
// columns, plus the unserved storage version hub and a conversion webhook. The result
// has passed Validate and fits the size budget; the Report lists what was dropped to
// make it fit.
func Build(opts BuildOptions) (*apiextensionsv1.CustomResourceDefinition, Report, error) {
	group := opts.Group
	if group == "" {
		group = vocab.CompositionGroup
	}
	kind, err := Kind(opts.ChartName)
	if err != nil {
		return nil, nil, err
	}
	plural, _ := Plural(opts.ChartName)
	if len(opts.Versions) == 0 {
		return nil, nil, ErrNoVersions
	}
	conversion, err := conversionFor(opts.Conversion)
	if err != nil {
		return nil, nil, err
	}
	versions, err := sortedVersions(opts.Versions)
	if err != nil {
		return nil, nil, err
	}
	categories := opts.Categories
	if categories == nil {
		categories = DefaultCategories
	}

	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind:       kind,
				ListKind:   kind + "List",
				Plural:     plural,
				Singular:   strings.ToLower(kind),
				Categories: append([]string(nil), categories...),
			},
			Scope:      apiextensionsv1.NamespaceScoped,
			Conversion: conversion,
		},
	}
	for _, v := range versions {
		crd.Spec.Versions = append(crd.Spec.Versions, servedVersion(kind, opts.ChartName, v))
		if err := declareConversions(crd, v); err != nil {
			return nil, nil, err
		}
	}
	crd.Spec.Versions = append(crd.Spec.Versions, hubVersion())

	report, err := fitBudget(crd, len(versions), opts.MaxBytes)
	if err != nil {
		return nil, nil, err
	}
	if err := Validate(crd); err != nil {
		return nil, nil, err
	}
	return crd, report, nil
}

// Merge adds to built, a CRD from Build, the served versions of another copy of it
// (the CRD in the cluster, which other definitions share) that keep accepts, unless
// built has a version of that name. Served versions are ordered by chart version with
// hub last; descriptions are dropped, oldest version first, until the whole CRD fits
// maxBytes (DefaultMaxBytes when 0), and the result is validated again.
func Merge(built *apiextensionsv1.CustomResourceDefinition, other []apiextensionsv1.CustomResourceDefinitionVersion, keep func(name string) bool, maxBytes int) (Report, error) {
	present := map[string]bool{}
	for _, v := range built.Spec.Versions {
		present[v.Name] = true
	}
	for _, v := range other {
		if !present[v.Name] && keep(v.Name) {
			built.Spec.Versions = append(built.Spec.Versions, *v.DeepCopy())
			present[v.Name] = true
		}
	}
	sort.SliceStable(built.Spec.Versions, func(i, j int) bool {
		return versionLess(built.Spec.Versions[i].Name, built.Spec.Versions[j].Name)
	})
	report, err := fitBudget(built, len(built.Spec.Versions)-1, maxBytes)
	if err != nil {
		return nil, err
	}
	if err := Validate(built); err != nil {
		return nil, fmt.Errorf("merging the versions of %s: %w", built.Name, err)
	}
	return report, nil
}

// versionLess orders version names as their chart versions, hub last; a name that
// VersionName cannot have given sorts after those it can, by name.
func versionLess(a, b string) bool {
	if a == HubVersion || b == HubVersion {
		return b == HubVersion && a != HubVersion
	}
	sa, sb := chartVersionOf(a), chartVersionOf(b)
	switch {
	case sa != nil && sb != nil && !sa.Equal(sb):
		return sa.LessThan(sb)
	case (sa == nil) != (sb == nil):
		return sa != nil
	default:
		return a < b
	}
}

// chartVersionOf reverses VersionName as far as ordering needs: "v1-2-3-rc-1" is
// 1.2.3-rc.1. It is nil for a name VersionName does not give.
func chartVersionOf(name string) *semver.Version {
	parts := strings.SplitN(strings.TrimPrefix(name, "v"), "-", 4)
	if !strings.HasPrefix(name, "v") || len(parts) < 3 {
		return nil
	}
	version := strings.Join(parts[:3], ".")
	if len(parts) == 4 {
		version += "-" + strings.ReplaceAll(parts[3], "-", ".")
	}
	sem, err := semver.StrictNewVersion(version)
	if err != nil {
		return nil
	}
	return sem
}

type namedVersion struct {
	name  string
	chart string
	sem   *semver.Version
	spec  *apiextensionsv1.JSONSchemaProps
	steps []corev1alpha1.ConversionStep
}

func sortedVersions(in []ServedVersion) ([]namedVersion, error) {
	seen := map[string]string{}
	var out []namedVersion
	for _, v := range in {
		name, err := VersionName(v.ChartVersion)
		if err != nil {
			return nil, err
		}
		if prev, ok := seen[name]; ok {
			return nil, fmt.Errorf("%w: %q and %q are both %s", ErrDuplicateVersion, prev, v.ChartVersion, name)
		}
		seen[name] = v.ChartVersion
		sem, _ := semver.NewVersion(v.ChartVersion)
		out = append(out, namedVersion{name: name, chart: v.ChartVersion, sem: sem, spec: v.Spec, steps: v.Conversions})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].sem.LessThan(out[j].sem) })
	return out, nil
}

func conversionFor(w ConversionWebhook) (*apiextensionsv1.CustomResourceConversion, error) {
	if errs := webhook.ValidateCABundle(field.NewPath("caBundle"), w.CABundle); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCABundle, errs.ToAggregate())
	}
	cc := &apiextensionsv1.WebhookClientConfig{CABundle: append([]byte(nil), w.CABundle...)}
	switch {
	case w.Service != nil && w.URL != "":
		return nil, fmt.Errorf("%w: give a Service or a URL, not both", ErrNoConversionWebhook)
	case w.Service != nil:
		svc := w.Service.DeepCopy()
		if svc.Path == nil {
			svc.Path = ptrTo(ConvertPath)
		}
		cc.Service = svc
	case w.URL != "":
		cc.URL = ptrTo(w.URL)
	default:
		return nil, ErrNoConversionWebhook
	}
	return &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook:  &apiextensionsv1.WebhookConversion{ClientConfig: cc, ConversionReviewVersions: []string{"v1"}},
	}, nil
}

func servedVersion(kind, chartName string, v namedVersion) apiextensionsv1.CustomResourceDefinitionVersion {
	spec := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTo(true)}
	if v.spec != nil {
		spec = *v.spec.DeepCopy()
	}
	if spec.Description == "" {
		spec.Description = fmt.Sprintf("Values of the Helm chart %s %s, as in a values file.", chartName, v.chart)
	}
	return apiextensionsv1.CustomResourceDefinitionVersion{
		Name:    v.name,
		Served:  true,
		Storage: false,
		Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Description: fmt.Sprintf("%s is a release of the Helm chart %s %s.", kind, chartName, v.chart),
			Type:        "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"apiVersion": {Type: "string"},
				"kind":       {Type: "string"},
				"metadata":   {Type: "object"},
				"spec":       spec,
				"status":     statusSchema(),
			},
		}},
		Subresources:             &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
		AdditionalPrinterColumns: printColumns(),
	}
}

func hubVersion() apiextensionsv1.CustomResourceDefinitionVersion {
	return apiextensionsv1.CustomResourceDefinitionVersion{
		Name:    HubVersion,
		Served:  false,
		Storage: true,
		Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Description:            "Storage version: keeps every field of every served version.",
			Type:                   "object",
			XPreserveUnknownFields: ptrTo(true),
		}},
		Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
	}
}

func statusSchema() apiextensionsv1.JSONSchemaProps {
	str := func(desc string) apiextensionsv1.JSONSchemaProps {
		return apiextensionsv1.JSONSchemaProps{Type: "string", Description: desc}
	}
	generation := apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64", Minimum: ptrTo(0.0)}
	return apiextensionsv1.JSONSchemaProps{
		Type:                   "object",
		XPreserveUnknownFields: ptrTo(true),
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"conditions": {
				Type:         "array",
				XListType:    ptrTo("map"),
				XListMapKeys: []string{"type"},
				Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
					Type:                   "object",
					Required:               []string{"type", "status"},
					XPreserveUnknownFields: ptrTo(true),
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"type":               str("Ready or Synced."),
						"status":             str("True, False or Unknown."),
						"reason":             str(""),
						"message":            str(""),
						"lastTransitionTime": {Type: "string", Format: "date-time"},
						"observedGeneration": generation,
					},
				}},
			},
			"helmChartUrl":       str("URL of the chart installed."),
			"helmChartVersion":   str("Version of the chart installed."),
			"releaseName":        str("Helm release name."),
			"digest":             str("Digest of the chart installed."),
			"observedGeneration": generation,
		},
	}
}

func printColumns() []apiextensionsv1.CustomResourceColumnDefinition {
	return []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "READY", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].status`},
		{Name: "HEALTHY", Type: "string", JSONPath: `.status.conditions[?(@.type=="Healthy")].status`},
		{Name: "CHART VERSION", Type: "string", JSONPath: ".status.helmChartVersion"},
		{Name: "RELEASE", Type: "string", JSONPath: ".status.releaseName"},
		{Name: "AGE", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	}
}

// fitBudget drops the descriptions of spec schemas, oldest served version first,
// until the CRD's JSON fits maxBytes.
func fitBudget(crd *apiextensionsv1.CustomResourceDefinition, served, maxBytes int) (Report, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	var report Report
	for i := 0; ; i++ {
		b, err := json.Marshal(crd)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidCRD, err)
		}
		if len(b) <= maxBytes {
			return report, nil
		}
		if i >= served {
			return nil, fmt.Errorf("%w: %d bytes without descriptions, budget %d", ErrTooLarge, len(b), maxBytes)
		}
		v := &crd.Spec.Versions[i]
		spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
		dropDescriptions(&spec)
		v.Schema.OpenAPIV3Schema.Properties["spec"] = spec
		report = append(report, Loss{
			Keyword: "description",
			Reason:  fmt.Sprintf("descriptions of version %s dropped to keep the CRD under %d bytes", v.Name, maxBytes),
		})
	}
}

func dropDescriptions(p *apiextensionsv1.JSONSchemaProps) {
	if p == nil {
		return
	}
	p.Description = ""
	for k, c := range p.Properties {
		dropDescriptions(&c)
		p.Properties[k] = c
	}
	if p.Items != nil {
		dropDescriptions(p.Items.Schema)
	}
	if p.AdditionalProperties != nil {
		dropDescriptions(p.AdditionalProperties.Schema)
	}
}

// declareConversions records the chart version of v and the conversion steps it
// declares in the CRD's annotations, where the conversion webhook reads them.
func declareConversions(crd *apiextensionsv1.CustomResourceDefinition, v namedVersion) error {
	text, err := json.Marshal(corev1alpha1.ConversionDeclaration{Chart: v.chart, Steps: v.steps})
	if err != nil {
		return fmt.Errorf("encoding the conversions of %s: %w", v.chart, err)
	}
	if crd.Annotations == nil {
		crd.Annotations = map[string]string{}
	}
	crd.Annotations[vocab.AnnotationPrefixConversions+v.name] = string(text)
	return nil
}

// KeepDeclarations copies into built the conversion declarations of the versions it
// serves from annotations, the annotations of the CRD Merge took those versions from.
func KeepDeclarations(built *apiextensionsv1.CustomResourceDefinition, annotations map[string]string) {
	for _, v := range built.Spec.Versions {
		key := vocab.AnnotationPrefixConversions + v.Name
		if text, ok := annotations[key]; ok && built.Annotations[key] == "" {
			if built.Annotations == nil {
				built.Annotations = map[string]string{}
			}
			built.Annotations[key] = text
		}
	}
}
