package policies

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

// compiled is a policy ready to evaluate: its Rego compiled and its query prepared
// once, its selectors parsed. It is immutable, so requests share it freely.
type compiled struct {
	Policy
	query      rego.PreparedEvalQuery
	params     *ast.Term
	operations []string
	nsSelector labels.Selector // nil: no namespace selector
	selector   labels.Selector // nil: no label selector
}

// Compile compiles p without enforcing it. It returns nil when p compiles, else a
// *CompileError listing every problem with its line and column (what the webhook
// answers for a CompositionPolicy, and what its status shows).
func Compile(ctx context.Context, p Policy) error {
	_, err := compile(ctx, p)
	return err
}

func compile(ctx context.Context, p Policy) (*compiled, error) {
	p = withDefaults(p)
	c := &compiled{Policy: p}
	fail := func(errs ...v1alpha1.CompileError) error {
		return &CompileError{Policy: p.Name, File: p.File, Errors: errs}
	}
	if errs := c.prepareMatch(); len(errs) > 0 {
		return nil, fail(errs...)
	}
	params, err := ast.InterfaceToValue(p.Parameters)
	if err != nil {
		return nil, fail(v1alpha1.CompileError{Message: fmt.Sprintf("parameters: %v", err)})
	}
	if p.Parameters == nil {
		params = ast.NewObject()
	}
	c.params = ast.NewTerm(params)

	mod, err := parseModule(p.File, p.Rego)
	if err != nil {
		return nil, fail(astErrors(err)...)
	}
	query, perr := policyQuery(mod)
	if perr != nil {
		return nil, fail(*perr)
	}
	compiler := ast.NewCompiler().
		WithCapabilities(Capabilities()).
		WithEnablePrintStatements(false)
	compiler.Compile(map[string]*ast.Module{p.File: mod})
	if compiler.Failed() {
		return nil, fail(astErrors(compiler.Errors)...)
	}
	pq, err := rego.New(
		rego.Compiler(compiler),
		rego.Query(query),
		rego.Capabilities(Capabilities()),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fail(astErrors(err)...)
	}
	c.query = pq
	return c, nil
}

func withDefaults(p Policy) Policy {
	if p.Action == "" {
		p.Action = v1alpha1.EnforcementDeny
	}
	if p.Target == "" {
		p.Target = v1alpha1.TargetObject
	}
	if p.File == "" {
		p.File = p.Name + ".rego"
	}
	return p
}

// policyQuery is the one query evaluated per request: the policy's deny and warn sets,
// whichever it defines.
func policyQuery(mod *ast.Module) (string, *v1alpha1.CompileError) {
	var deny, warn bool
	for _, r := range mod.Rules {
		ref := r.Head.Ref()
		if len(ref) == 0 {
			continue
		}
		switch {
		case ref[0].Equal(ast.VarTerm("deny")):
			deny = true
		case ref[0].Equal(ast.VarTerm("warn")):
			warn = true
		}
	}
	pkg := mod.Package.Path.String()
	var parts []string
	if deny {
		parts = append(parts, "deny := "+pkg+".deny")
	}
	if warn {
		parts = append(parts, "warn := "+pkg+".warn")
	}
	if len(parts) == 0 {
		loc := mod.Package.Location
		ce := v1alpha1.CompileError{Message: "the policy defines neither deny nor warn: add a rule such as `deny contains msg if { ... }`"}
		if loc != nil {
			ce.Line, ce.Column = int32(loc.Row), int32(loc.Col)
		}
		return "", &ce
	}
	return strings.Join(parts, "; "), nil
}

var validOperations = []string{"CREATE", "UPDATE", "DELETE", "CONNECT", "*"}

// prepareMatch checks the policy's action, target and match, and parses its selectors.
func (c *compiled) prepareMatch() []v1alpha1.CompileError {
	var errs []v1alpha1.CompileError
	switch c.Action {
	case v1alpha1.EnforcementDeny, v1alpha1.EnforcementWarn, v1alpha1.EnforcementDryRun:
	default:
		errs = append(errs, v1alpha1.CompileError{Message: fmt.Sprintf("enforcementAction %q must be one of deny, warn, dryrun", c.Action)})
	}
	switch c.Target {
	case v1alpha1.TargetObject, v1alpha1.TargetRendered:
	default:
		errs = append(errs, v1alpha1.CompileError{Message: fmt.Sprintf("target %q must be object or rendered", c.Target)})
	}
	for i, k := range c.Match.Kinds {
		if k.Kind == "" {
			errs = append(errs, v1alpha1.CompileError{Message: fmt.Sprintf("match.kinds[%d].kind is required (use \"*\" for any kind)", i)})
		}
	}
	for _, op := range c.Match.Operations {
		if !slices.Contains(validOperations, string(op)) {
			errs = append(errs, v1alpha1.CompileError{Message: fmt.Sprintf("match.operations: %q must be one of %s", op, strings.Join(validOperations, ", "))})
		}
		c.operations = append(c.operations, string(op))
	}
	if len(c.operations) == 0 {
		c.operations = []string{"CREATE", "UPDATE"}
	}
	var err error
	if c.nsSelector, err = selector(c.Match.NamespaceSelector); err != nil {
		errs = append(errs, v1alpha1.CompileError{Message: fmt.Sprintf("match.namespaceSelector: %v", err)})
	}
	if c.selector, err = selector(c.Match.LabelSelector); err != nil {
		errs = append(errs, v1alpha1.CompileError{Message: fmt.Sprintf("match.labelSelector: %v", err)})
	}
	return errs
}

func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return nil, nil
	}
	return metav1.LabelSelectorAsSelector(s)
}
