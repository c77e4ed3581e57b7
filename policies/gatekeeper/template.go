package gatekeeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Group and version of ConstraintTemplates, and the group of the Constraints they define.
const (
	TemplatesGroup   = "templates.gatekeeper.sh"
	ConstraintsGroup = "constraints.gatekeeper.sh"
	// AdmissionTarget is the only target Gatekeeper's admission webhook, and Compositor,
	// enforce.
	AdmissionTarget = "admission.k8s.gatekeeper.sh"
	// engineRego and engineCEL name the code engines of a target.
	engineRego = "Rego"
	engineCEL  = "K8sNativeValidation"
)

// AnnotationInventory opts a referential template into Compositor's inventory: with
// the value "release", data.inventory holds the objects of the composition's own
// release. Without it, a template that reads data.inventory is refused.
const AnnotationInventory = "compositor.dev/inventory"

// ErrUnsupported marks a template Compositor cannot enforce as written: one with no
// Rego, or one that reads data.inventory without opting into the release inventory.
var ErrUnsupported = errors.New("not supported")

// TemplateSource is the part of a ConstraintTemplate (templates.gatekeeper.sh v1,
// v1beta1 or v1alpha1; they share this shape) that Compositor reads.
type TemplateSource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
	Spec struct {
		CRD struct {
			Spec struct {
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
				Validation *struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema,omitempty"`
				} `json:"validation,omitempty"`
			} `json:"spec"`
		} `json:"crd"`
		Targets []targetSource `json:"targets"`
	} `json:"spec"`
}

type targetSource struct {
	Target string   `json:"target"`
	Rego   string   `json:"rego,omitempty"`
	Libs   []string `json:"libs,omitempty"`
	Code   []struct {
		Engine string          `json:"engine"`
		Source json.RawMessage `json:"source"`
	} `json:"code,omitempty"`
}

// regoSource is the source of a code entry of engine Rego.
type regoSource struct {
	Rego    string   `json:"rego"`
	Libs    []string `json:"libs,omitempty"`
	Version string   `json:"version,omitempty"`
}

// ParseTemplate reads a ConstraintTemplate from YAML or JSON.
func ParseTemplate(data []byte) (*TemplateSource, error) {
	var t TemplateSource
	if err := yaml.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("reading the ConstraintTemplate: %w", err)
	}
	return &t, nil
}

// TemplateFromObject reads a ConstraintTemplate held as an unstructured object.
func TemplateFromObject(obj map[string]any) (*TemplateSource, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return ParseTemplate(raw)
}

// checkKind refuses a constraint kind no CRD can have: its constraints could never be
// served, so the template is refused where its author sees it, in its status, rather
// than when its CRD is written. The API server wants the lower case of the kind, and
// of its list kind, to be DNS-1035 labels (the CRD's plural is the former).
func checkKind(kind string) error {
	for _, k := range []string{kind, kind + "List"} {
		if errs := validation.IsDNS1035Label(strings.ToLower(k)); len(errs) > 0 {
			return fmt.Errorf("spec.crd.spec.names.kind %q cannot name a CRD: in lower case, %q %s", kind, strings.ToLower(k), strings.Join(errs, "; "))
		}
	}
	return nil
}

// Template is a compiled ConstraintTemplate, ready to review objects for its
// Constraints. It is immutable and safe for concurrent use.
type Template struct {
	// Name is the template's metadata.name.
	Name string
	// Kind is the kind of its Constraints (spec.crd.spec.names.kind).
	Kind string
	// Referential says that the template reads data.inventory.
	Referential bool
	// RegoVersion is "v0" or "v1".
	RegoVersion string
	// HasCEL says that the template also has K8sNativeValidation code, which Compositor
	// does not run: its Rego is enforced instead.
	HasCEL bool
	// ParametersSchema is spec.crd.spec.validation.openAPIV3Schema, nil when absent.
	ParametersSchema map[string]any
	// ReadsHistory says that the template may read input.review.operation or
	// input.review.oldObject (or input.review as a whole), so a reviewer must tell an
	// object's creation from its update and give its old version.
	ReadsHistory bool

	query rego.PreparedEvalQuery
	// What a Library needs to compile the template together with others (batch.go):
	// its modules as parsed and checked (never modified), its package, the
	// capabilities it compiled with, an identity for the cache of such compilations,
	// whether it may be relocated, and whether it reads of input only input.review and
	// input.parameters.
	modules     map[string]*ast.Module
	own         ast.Ref
	caps        *ast.Capabilities
	id          uint64
	relocatable bool
	plainInput  bool
}

// Options are how templates compile.
type Options struct {
	// Capabilities are the built-ins templates may call.
	Capabilities *ast.Capabilities
	// AnyInventory accepts templates that read data.inventory whatever their
	// annotations: a suite gives their inventory case by case.
	AnyInventory bool
}

// Compile checks and compiles a template's Rego for the admission target.
// It fails, naming the field, for: a name other than the kind in lower case, no kind,
// no admission target, a target with no Rego (only CEL: ErrUnsupported), Rego that
// does not parse or compile, a template without a violation rule, libraries outside
// package lib, references to data other than data.lib and data.inventory, and
// data.inventory without the opt-in annotation (ErrUnsupported).
func Compile(ctx context.Context, t *TemplateSource, opts Options) (*Template, error) {
	caps := opts.Capabilities
	kind := t.Spec.CRD.Spec.Names.Kind
	switch {
	case kind == "":
		return nil, errors.New("spec.crd.spec.names.kind is required")
	case t.Metadata.Name != strings.ToLower(kind):
		return nil, fmt.Errorf("metadata.name %q must be the lower case of spec.crd.spec.names.kind %q, as Gatekeeper requires", t.Metadata.Name, kind)
	}
	if err := checkKind(kind); err != nil {
		return nil, err
	}
	out := &Template{Name: t.Metadata.Name, Kind: kind}
	if v := t.Spec.CRD.Spec.Validation; v != nil {
		out.ParametersSchema = v.OpenAPIV3Schema
	}
	var target *targetSource
	for i := range t.Spec.Targets {
		if t.Spec.Targets[i].Target == AdmissionTarget {
			if target != nil {
				return nil, fmt.Errorf("spec.targets: target %s is given twice", AdmissionTarget)
			}
			target = &t.Spec.Targets[i]
		}
	}
	if target == nil {
		return nil, fmt.Errorf("spec.targets: no target %s", AdmissionTarget)
	}
	src, hasCEL, err := targetRego(target)
	if err != nil {
		return nil, err
	}
	out.HasCEL = hasCEL
	version := ast.RegoV0
	out.RegoVersion = "v0"
	switch src.Version {
	case "", "v0":
	case "v1":
		version, out.RegoVersion = ast.RegoV1, "v1"
	default:
		return nil, fmt.Errorf("spec.targets[%s].code[Rego].source.version %q must be v0 or v1", AdmissionTarget, src.Version)
	}
	parse := ast.ParserOptions{RegoVersion: version, Capabilities: caps}
	entry, err := ast.ParseModuleWithOpts("template.rego", src.Rego, parse)
	if err != nil {
		return nil, fmt.Errorf("rego: %w", err)
	}
	if entry == nil {
		return nil, errors.New("rego: the module is empty")
	}
	if entry.Package.Path.HasPrefix(libRoot) {
		return nil, errors.New("rego: the template's package must not be under data.lib, which is for its libs")
	}
	if !slices.ContainsFunc(entry.Rules, func(r *ast.Rule) bool {
		return r.Head.Name.Equal(ast.Var("violation")) || r.Head.Ref().HasPrefix(ast.Ref{ast.VarTerm("violation")})
	}) {
		return nil, errors.New("rego: the template has no violation rule: Gatekeeper templates define violation[{\"msg\": msg}]")
	}
	modules := map[string]*ast.Module{"template.rego": entry}
	for i, lib := range src.Libs {
		file := fmt.Sprintf("lib_%d.rego", i)
		m, err := ast.ParseModuleWithOpts(file, lib, parse)
		if err != nil {
			return nil, fmt.Errorf("libs[%d]: %w", i, err)
		}
		if m == nil {
			return nil, fmt.Errorf("libs[%d]: the module is empty", i)
		}
		if !m.Package.Path.HasPrefix(libRoot) {
			return nil, fmt.Errorf("libs[%d]: package %s must be under data.lib, as Gatekeeper requires", i, m.Package.Path)
		}
		modules[file] = m
	}
	own := entry.Package.Path
	for file, m := range modules {
		if err := checkDataRefs(file, m, own, out); err != nil {
			return nil, err
		}
		out.ReadsHistory = out.ReadsHistory || readsHistory(m)
	}
	if out.Referential && !opts.AnyInventory && t.Metadata.Annotations[AnnotationInventory] != "release" {
		return nil, fmt.Errorf("%w: the template reads data.inventory (a referential constraint); Compositor holds no copy of the cluster, so it enforces such a template only with annotation %s: release, which makes data.inventory the objects of the composition's own release", ErrUnsupported, AnnotationInventory)
	}
	compiler := ast.NewCompiler().WithCapabilities(caps).WithEnablePrintStatements(false)
	compiler.Compile(modules)
	if compiler.Failed() {
		return nil, fmt.Errorf("rego: %w", compiler.Errors)
	}
	query := "violation := " + own.String() + ".violation"
	if out.Referential {
		query += " with input as input.input with data.inventory as input.inventory"
	}
	pq, err := rego.New(rego.Compiler(compiler), rego.Query(query), rego.Capabilities(caps)).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("rego: %w", err)
	}
	out.query = pq
	out.modules, out.own, out.caps, out.id = modules, own, caps, templateIDs.Add(1)
	out.relocatable, out.plainInput = relocatable(own, modules), readsInputPlainly(modules)
	return out, nil
}

var libRoot = ast.MustParseRef("data.lib")

var (
	reviewRef     = ast.MustParseRef("input.review")
	historyFields = []*ast.Term{ast.StringTerm("operation"), ast.StringTerm("oldObject")}
)

// readsHistory tells whether a module may read input.review.operation or
// input.review.oldObject: a reference to either, to input.review or input as a whole,
// or to an input.review field by a variable.
func readsHistory(m *ast.Module) bool {
	found := false
	ast.WalkRefs(m, func(r ast.Ref) bool {
		switch {
		case found || !r.HasPrefix(ast.InputRootRef):
		case len(r) <= len(reviewRef):
			found = r.HasPrefix(reviewRef) || len(r) == 1
		case r.HasPrefix(reviewRef):
			field := r[len(reviewRef)]
			_, isVar := field.Value.(ast.Var)
			found = isVar || slices.ContainsFunc(historyFields, field.Equal)
		}
		return false
	})
	return found
}

// targetRego picks the Rego of a target: the code entry of engine Rego, else the
// legacy rego and libs fields.
func targetRego(t *targetSource) (regoSource, bool, error) {
	var hasCEL bool
	var found *regoSource
	for i, c := range t.Code {
		switch c.Engine {
		case engineRego:
			var src regoSource
			if err := json.Unmarshal(c.Source, &src); err != nil {
				return src, false, fmt.Errorf("spec.targets[%s].code[%d].source: %w", AdmissionTarget, i, err)
			}
			found = &src
		case engineCEL:
			hasCEL = true
		}
	}
	switch {
	case found != nil:
		return *found, hasCEL, nil
	case t.Rego != "":
		return regoSource{Rego: t.Rego, Libs: t.Libs}, hasCEL, nil
	case hasCEL:
		return regoSource{}, true, fmt.Errorf("%w: the template has only K8sNativeValidation (CEL) code, and Compositor runs the Rego of templates", ErrUnsupported)
	default:
		return regoSource{}, false, fmt.Errorf("spec.targets[%s]: no Rego code", AdmissionTarget)
	}
}

// checkDataRefs allows what Gatekeeper allows a template to read of data: its libs
// (data.lib), data.inventory, and its own package.
func checkDataRefs(file string, m *ast.Module, own ast.Ref, t *Template) error {
	var bad error
	ast.WalkRefs(m, func(r ast.Ref) bool {
		if bad != nil || !r.HasPrefix(ast.DefaultRootRef) {
			return false
		}
		switch {
		case len(r) < 2:
			// data as a whole (import data as d): what it reads cannot be told.
			bad = fmt.Errorf("%s%s: data is read as a whole: templates may read only data.lib and data.inventory", file, location(r))
		case r.HasPrefix(libRoot), r.HasPrefix(own):
		case r[1].Equal(ast.StringTerm("inventory")):
			t.Referential = true
		default:
			bad = fmt.Errorf("%s%s: %s: templates may read only data.lib and data.inventory", file, location(r), r)
		}
		return false
	})
	return bad
}

func location(r ast.Ref) string {
	if r[0].Location == nil {
		return ""
	}
	return fmt.Sprintf(":%d", r[0].Location.Row)
}
