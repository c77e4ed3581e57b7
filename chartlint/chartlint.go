// Package chartlint checks a chart before it is published as a CompositionDefinition:
// that its name and version can become an API, that its schemas compile and its
// defaults pass them, what the generated CRD cannot express, that its declared
// conversions compile, and the RBAC its templates would be granted; with an earlier
// version of the chart (LintUpgrade), how the values of that version convert to its
// own. `compositor lint` prints its findings.
package chartlint

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/policies"
)

// Severity grades a lint finding. Errors are what would make Compositor refuse the
// chart or its compositions; warnings what works but is likely a mistake.
type Severity string

// Severities of lint findings.
const (
	SeverityError   Severity = "ERROR"
	SeverityWarning Severity = "WARNING"
	SeverityInfo    Severity = "INFO"
)

// Finding is one result of Lint.
type Finding struct {
	Severity Severity
	// File is the chart file the finding is about, relative to the chart root, e.g.
	// "charts/cache/values.schema.json".
	File    string
	Message string
}

// String is the line lint prints; continuation lines of a long message are indented.
func (f Finding) String() string {
	return fmt.Sprintf("[%s] %s: %s", f.Severity, f.File, strings.ReplaceAll(f.Message, "\n", "\n    "))
}

// Lint runs every check on ch, in order: naming, schemas, translation, declared
// conversions (values.conversions.yaml), RBAC. The generated CRD's conversion webhook
// is conversion.
func Lint(ctx context.Context, ch *chart.Chart, conversion crd.ConversionWebhook) []Finding {
	l := &linter{conversion: conversion}
	l.run(ctx, ch)
	return l.findings
}

type linter struct {
	conversion crd.ConversionWebhook
	findings   []Finding
	plural     string
	version    string
	// translated is whether ch's schema became a CRD schema.
	translated bool
	// steps are the conversions ch declares, stepsOK whether they parse and compile.
	steps   []corev1alpha1.ConversionStep
	stepsOK bool
	// previous is the earlier version of the chart LintUpgrade checks the conversion
	// from, with its translated spec schema; nil for Lint.
	previous     *chart.Chart
	previousSpec *apiextensionsv1.JSONSchemaProps
}

func (l *linter) run(ctx context.Context, ch *chart.Chart) {
	l.naming(ch)
	if l.schemas(ctx, ch) {
		l.translated = l.translation(ch)
	}
	l.conversions(ch)
	if l.previous != nil && l.translated && l.stepsOK && l.version != "" {
		l.upgrade(ch)
	}
	l.rbac(ch)
}

func (l *linter) add(s Severity, file, format string, args ...any) {
	l.findings = append(l.findings, Finding{Severity: s, File: file, Message: fmt.Sprintf(format, args...)})
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

func (l *linter) translation(ch *chart.Chart) bool {
	_, report, err := crd.ForChart(ch, l.conversion)
	if errors.Is(err, crd.ErrBadConversionsFile) {
		return true // the check of values.conversions.yaml reports it
	}
	if err != nil {
		l.add(SeverityError, "values.schema.json", "%v", err)
		return false
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
	return true
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

// conversions checks that the conversions ch declares in values.conversions.yaml, if
// it has that file, parse and compile.
func (l *linter) conversions(ch *chart.Chart) {
	steps, err := crd.ChartConversions(ch)
	if err != nil {
		l.add(SeverityError, crd.ConversionsFile, "%v", err)
		return
	}
	if _, err := conversion.CompileSteps(steps, field.NewPath("conversions")); err != nil {
		l.add(SeverityError, crd.ConversionsFile, "%v", err)
		return
	}
	l.steps, l.stepsOK = steps, true
}

// ErrNotEarlier means the chart given to LintUpgrade as the earlier version is another
// chart, or not an earlier version.
var ErrNotEarlier = errors.New("not an earlier version of the chart")

// LintUpgrade runs Lint's checks on ch, and checks the conversion of the values of
// previous, an earlier version of the same chart, to ch's, with a CRD serving both, as
// the reconciler builds it:
//
//   - the steps of ch's values.conversions.yaml, against both versions' schemas
//     (conversion.Schemas.CheckDeclared): a rule it refuses is an error, what an
//     acknowledged rule or a drop loses is information;
//   - undeclared renames: leaf paths of the values (through object properties, up to
//     arrays and free-form objects) that one version declares and the other does not,
//     which no rule of the steps between the two reads or writes. Paths removed and
//     paths added together look like a rename: a warning lists them. Paths removed
//     alone are information.
//
// It returns an error wrapping ErrNotEarlier when previous is not an earlier version
// of ch's chart, and an error when previous's schema cannot be translated.
func LintUpgrade(ctx context.Context, ch, previous *chart.Chart, webhook crd.ConversionWebhook) ([]Finding, error) {
	if previous.Name() != ch.Name() {
		return nil, fmt.Errorf("%w: the earlier chart is %s, not %s", ErrNotEarlier, previous.Name(), ch.Name())
	}
	mine, err := semver.NewVersion(ch.Metadata.Version)
	if err != nil {
		return nil, fmt.Errorf("%w: chart %s version %q is not a semantic version: %w", ErrNotEarlier, ch.Name(), ch.Metadata.Version, err)
	}
	theirs, err := semver.NewVersion(previous.Metadata.Version)
	if err != nil {
		return nil, fmt.Errorf("%w: the earlier chart's version %q is not a semantic version: %w", ErrNotEarlier, previous.Metadata.Version, err)
	}
	if !theirs.LessThan(mine) {
		return nil, fmt.Errorf("%w: %s %s is not earlier than %s", ErrNotEarlier, previous.Name(), previous.Metadata.Version, ch.Metadata.Version)
	}
	if _, err := crd.VersionName(previous.Metadata.Version); err != nil {
		return nil, fmt.Errorf("the earlier chart %s %s: %w", previous.Name(), previous.Metadata.Version, err)
	}
	spec, _, err := crd.TranslateChart(previous)
	if err != nil {
		return nil, fmt.Errorf("translating the schema of the earlier chart %s %s: %w", previous.Name(), previous.Metadata.Version, err)
	}
	l := &linter{conversion: webhook, previous: previous, previousSpec: spec}
	l.run(ctx, ch)
	return l.findings, nil
}

// upgrade checks the conversion from l.previous to ch (see LintUpgrade). ch's schema
// translated and its steps compiled.
func (l *linter) upgrade(ch *chart.Chart) {
	spec, _, err := crd.TranslateChart(ch)
	if err != nil {
		return // translation reported it
	}
	prev := l.previous
	prevName, _ := crd.VersionName(prev.Metadata.Version)
	pair := prev.Metadata.Version + " → " + ch.Metadata.Version
	built, _, err := crd.Build(crd.BuildOptions{
		ChartName: ch.Name(),
		Versions: []crd.ServedVersion{
			{ChartVersion: prev.Metadata.Version, Spec: l.previousSpec},
			{ChartVersion: ch.Metadata.Version, Spec: spec, Conversions: l.steps},
		},
		Conversion: l.conversion,
	})
	if err != nil {
		l.add(SeverityError, "values.schema.json", "the CRD serving %s: %v", pair, err)
		return
	}
	schemas, err := conversion.SchemasFromCRD(built)
	if err != nil {
		l.add(SeverityError, "values.schema.json", "the CRD serving %s: %v", pair, err)
		return
	}
	losses, err := schemas.CheckDeclared(l.version)
	for _, e := range joined(err) {
		l.add(SeverityError, crd.ConversionsFile, "%v", e)
	}
	for _, loss := range losses {
		l.add(SeverityInfo, crd.ConversionsFile, "step %s loses %s, e.g. %s; reason: %s", loss.Step, loss.Path, loss.Example, loss.Reason)
	}
	l.renames(prev.Metadata.Version, ch.Metadata.Version, schemas, prevName)
}

// renames reports the value paths one version declares and the other does not, which
// no rule of the steps between them converts.
func (l *linter) renames(from, to string, schemas *conversion.Schemas, prevName string) {
	covered := schemas.ConvertedPaths(prevName, l.version)
	changed := func(foreign []conversion.ForeignPath) []string {
		var out []string
		for _, f := range foreign {
			if slices.ContainsFunc(covered, func(c []string) bool { return isPrefix(c, f.Path) || isPrefix(f.Path, c) }) {
				continue
			}
			out = append(out, strings.Join(f.Path, "."))
		}
		return out
	}
	removed, added := changed(schemas.ForeignPaths(l.version)), changed(schemas.ForeignPaths(prevName))
	switch {
	case len(removed) > 0 && len(added) > 0:
		l.add(SeverityWarning, crd.ConversionsFile, "%s → %s: removed: %s; added: %s. If one became the other, the chart should declare it in %s "+
			"(a move rule): conversion does not carry a %s composition's value to its new path otherwise",
			from, to, strings.Join(removed, ", "), strings.Join(added, ", "), crd.ConversionsFile, from)
	case len(removed) > 0:
		l.add(SeverityInfo, crd.ConversionsFile, "%s → %s: removed: %s; dropped without a drop rule", from, to, strings.Join(removed, ", "))
	}
}

func isPrefix(prefix, path []string) bool {
	return len(prefix) <= len(path) && slices.Equal(prefix, path[:len(prefix)])
}

// joined splits an errors.Join of errors into them.
func joined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
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

// RESTMapper is lint's offline stand-in for discovery: the kinds of a default API
// server, and any other kind guessed as a namespaced resource, as lint's RBAC preview
// guesses them. `compositor plan` resolves the types charts create with it.
func RESTMapper() meta.RESTMapper { return guessingMapper{builtinRESTMapper()} }
