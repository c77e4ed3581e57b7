package main

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	templatesv1 "github.com/open-policy-agent/frameworks/constraint/pkg/apis/templates/v1"
	"github.com/open-policy-agent/frameworks/constraint/pkg/client/drivers/rego/schema"
	"github.com/open-policy-agent/frameworks/constraint/pkg/core/templates"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/target"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies"
)

// constraintsGroupVersion is where Gatekeeper serves the constraint kinds its
// templates define.
const constraintsGroupVersion = "constraints.gatekeeper.sh/v1beta1"

// translated is one Compositor policy as Gatekeeper runs it: a ConstraintTemplate
// holding the Rego and a Constraint holding the match, the action and the parameters.
type translated struct {
	// Policy is the Compositor policy's name; the constraint has the same name, so
	// both engines' violations are named alike.
	Policy     string
	Template   *templates.ConstraintTemplate
	Constraint *unstructured.Unstructured
}

// translate turns a Compositor policy into a template and a constraint, mechanically:
// the kind is the policy name in CamelCase, the package is renamed to the template's
// name, every `deny contains` or `warn contains` rule becomes `violation contains`
// with the object's keys other than msg moved under details, and the match, the
// parameters and the action move to the constraint. It refuses what has no
// Gatekeeper equivalent rather than translate it loosely.
func translate(p policies.Policy) (*translated, error) {
	if p.Target == v1alpha1.TargetRendered {
		return nil, fmt.Errorf("policy %s: target rendered has no Gatekeeper equivalent", p.Name)
	}
	kind := camelCase(p.Name)
	name := strings.ToLower(kind)
	src, rules, err := translateRego(p.Rego, name)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	action, err := constraintAction(p.Action, rules)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	tmpl, err := template(name, kind, src, p.Match.Operations)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	match, err := constraintMatch(p.Match)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	return &translated{Policy: p.Name, Template: tmpl, Constraint: constraint(kind, p.Name, action, match, p.Parameters)}, nil
}

// camelCase turns a policy name such as "allowed-registries" into a Kubernetes kind,
// "AllowedRegistries".
func camelCase(name string) string {
	var b strings.Builder
	upper := true
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			upper = true
			continue
		}
		if upper {
			r = unicode.ToUpper(r)
			upper = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// translateRego rewrites a Compositor Rego v1 module into a template's: package
// renamed, deny and warn rules renamed to violation. It returns the formatted source
// and the names of the rules it renamed ("deny", "warn"), which decide the action.
func translateRego(src, pkg string) (string, map[string]bool, error) {
	mod, err := ast.ParseModuleWithOpts("policy.rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return "", nil, err
	}
	mod.Package.Path = ast.Ref{ast.DefaultRootDocument, ast.StringTerm(pkg)}
	renamed := map[string]bool{}
	for _, r := range mod.Rules {
		name := r.Head.Ref().String()
		if name != "deny" && name != "warn" {
			continue
		}
		if r.Head.Key == nil {
			return "", nil, fmt.Errorf("rule %s: only `%s contains ...` rules translate", name, name)
		}
		key, err := violationKey(r.Head.Key)
		if err != nil {
			return "", nil, fmt.Errorf("rule %s: %w", name, err)
		}
		r.Head.Name = "violation"
		r.Head.Reference = ast.Ref{ast.VarTerm("violation")}
		r.Head.Key = key
		renamed[name] = true
	}
	if len(renamed) == 0 {
		return "", nil, errors.New("no deny or warn rule")
	}
	out, err := format.AstWithOpts(mod, format.Opts{RegoVersion: ast.RegoV1, IgnoreLocations: true})
	if err != nil {
		return "", nil, err
	}
	return string(out), renamed, nil
}

// violationKey is a deny/warn element in Gatekeeper's shape: {"msg": m, "details":
// {every other key}}. A string or a variable is taken to be the message, as Compositor
// reads it.
func violationKey(key *ast.Term) (*ast.Term, error) {
	switch v := key.Value.(type) {
	case ast.String, ast.Var:
		return ast.ObjectTerm(ast.Item(ast.StringTerm("msg"), key)), nil
	case ast.Object:
		msg := v.Get(ast.StringTerm("msg"))
		if msg == nil {
			return nil, errors.New("violation object without msg")
		}
		var details [][2]*ast.Term
		v.Foreach(func(k, val *ast.Term) {
			if !k.Equal(ast.StringTerm("msg")) {
				details = append(details, ast.Item(k, val))
			}
		})
		items := [][2]*ast.Term{ast.Item(ast.StringTerm("msg"), msg)}
		if len(details) > 0 {
			items = append(items, ast.Item(ast.StringTerm("details"), ast.ObjectTerm(details...)))
		}
		return ast.ObjectTerm(items...), nil
	default:
		return nil, fmt.Errorf("violation %v is neither a string nor an object", key)
	}
}

// constraintAction is the enforcementAction of the constraint. A Gatekeeper
// constraint has one action for all its violations, so a module mixing deny and warn
// rules (which Compositor splits by rule) does not translate.
func constraintAction(action v1alpha1.EnforcementAction, rules map[string]bool) (string, error) {
	if rules["deny"] && rules["warn"] {
		return "", errors.New("deny and warn rules in one module: split it into two policies")
	}
	switch {
	case action == "" || action == v1alpha1.EnforcementDeny:
		if rules["warn"] {
			return string(v1alpha1.EnforcementWarn), nil
		}
		return "deny", nil
	case action == v1alpha1.EnforcementWarn, action == v1alpha1.EnforcementDryRun:
		return string(action), nil
	default:
		return "", fmt.Errorf("unknown enforcementAction %q", action)
	}
}

// template builds the ConstraintTemplate as a user writes it (templates.gatekeeper.sh/v1,
// Rego v1 source, parameters free-form) and converts it to the version-independent form
// the client takes, defaults applied, as gator does with the templates it reads.
func template(name, kind, rego string, ops []v1alpha1.Operation) (*templates.ConstraintTemplate, error) {
	code := templatesv1.Code{
		Engine: schema.Name,
		Source: &templates.Anything{Value: (&schema.Source{Rego: rego, Version: "v1"}).ToUnstructured()},
	}
	t := &templatesv1.ConstraintTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: templatesv1.SchemeGroupVersion.String(), Kind: "ConstraintTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: templatesv1.ConstraintTemplateSpec{
			CRD: templatesv1.CRD{Spec: templatesv1.CRDSpec{
				Names: templatesv1.Names{Kind: kind},
				Validation: &templatesv1.Validation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:                   "object",
					XPreserveUnknownFields: ptr.To(true),
				}},
			}},
			Targets: []templatesv1.Target{{Target: target.Name, Code: []templatesv1.Code{code}, Operations: operations(ops)}},
		},
	}
	return t.ToVersionless()
}

// operations carries match.operations to the template's target, where the client
// honours them for reviews at the webhook's enforcement point. Empty means every
// operation to Gatekeeper and CREATE and UPDATE to Compositor; the two agree on the
// CREATE reviewed here.
func operations(ops []v1alpha1.Operation) []admissionregistrationv1.OperationType {
	var out []admissionregistrationv1.OperationType
	for _, op := range ops {
		out = append(out, admissionregistrationv1.OperationType(op))
	}
	return out
}

// constraintMatch is spec.match of the constraint. Compositor's empty or "*" group
// means any group, Gatekeeper's "*"; Gatekeeper's kinds have no versions, so a policy
// naming versions does not translate.
func constraintMatch(m v1alpha1.Match) (map[string]any, error) {
	out := map[string]any{}
	var kinds []any
	for _, k := range m.Kinds {
		if len(k.Versions) > 0 && !(len(k.Versions) == 1 && k.Versions[0] == "*") {
			return nil, fmt.Errorf("match.kinds[].versions %v has no Gatekeeper equivalent", k.Versions)
		}
		group := k.Group
		if group == "" {
			group = "*"
		}
		kinds = append(kinds, map[string]any{"apiGroups": []any{group}, "kinds": []any{k.Kind}})
	}
	if len(kinds) > 0 {
		out["kinds"] = kinds
	}
	if len(m.Namespaces) > 0 {
		out["namespaces"] = stringsToAny(m.Namespaces)
	}
	for field, sel := range map[string]*metav1.LabelSelector{"labelSelector": m.LabelSelector, "namespaceSelector": m.NamespaceSelector} {
		if sel == nil {
			continue
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sel)
		if err != nil {
			return nil, fmt.Errorf("match.%s: %w", field, err)
		}
		out[field] = u
	}
	return out, nil
}

func stringsToAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// constraint builds the Constraint of kind for the policy name. Deny is Gatekeeper's
// default action, so it is left out as a user would.
func constraint(kind, name, action string, match, params map[string]any) *unstructured.Unstructured {
	spec := map[string]any{"match": match}
	if action != "deny" {
		spec["enforcementAction"] = action
	}
	if params != nil {
		spec["parameters"] = runtime.DeepCopyJSON(params)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(constraintsGroupVersion)
	u.SetKind(kind)
	u.SetName(name)
	return u
}
