package conversion

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/environment"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

// ErrBadRule means a declared conversion that cannot be compiled or is not sound.
var ErrBadRule = errors.New("invalid conversion rule")

// Step is a compiled ConversionStep: it converts values of chart version From to those
// of To (Forward) and back (Backward). Values are a composition's spec, decoded as
// Decode does. A rule that cannot apply to a value (its path leads through a value that
// is not an object, or its expression fails) leaves the value as it is, so nothing is
// lost: the stash keeps what the other version does not declare.
type Step struct {
	From, To *semver.Version
	rules    []rule
}

// Name is "from → to".
func (s *Step) Name() string { return s.From.Original() + " → " + s.To.Original() }

// Forward converts values of From to To, in place.
func (s *Step) Forward(values map[string]any) { _ = s.forward(values) }

// Backward converts values of To to From, in place.
func (s *Step) Backward(values map[string]any) { _ = s.backward(values) }

// forward and backward also say which rules could not apply, and why: conversion goes
// on without them, the check of a declaration refuses them.
func (s *Step) forward(values map[string]any) error {
	var errs []error
	for _, r := range s.rules {
		if err := r.forward(values); err != nil {
			errs = append(errs, ruleError{r, err})
		}
	}
	return errors.Join(errs...)
}

func (s *Step) backward(values map[string]any) error {
	var errs []error
	for i := len(s.rules) - 1; i >= 0; i-- {
		if err := s.rules[i].backward(values); err != nil {
			errs = append(errs, ruleError{s.rules[i], err})
		}
	}
	return errors.Join(errs...)
}

// ruleError is why a rule could not apply to a value.
type ruleError struct {
	rule rule
	err  error
}

func (e ruleError) Error() string { return describeRule(e.rule.spec()) + ": " + e.err.Error() }
func (e ruleError) Unwrap() error { return e.err }

// describeRule names a rule in messages by what it converts.
func describeRule(r *corev1alpha1.ConversionRule) string {
	switch {
	case r.Move != "":
		return "move " + r.Move + " to " + r.To
	case r.Derive != "":
		return "derive " + r.Derive
	default:
		return "drop " + r.Drop
	}
}

type rule interface {
	forward(values map[string]any) error
	backward(values map[string]any) error
	// sources are the paths of From's values the rule reads, targets those of To's it
	// writes.
	sources() [][]string
	targets() [][]string
	spec() *corev1alpha1.ConversionRule
}

// CompileSteps compiles declared steps. Errors name the field, under path, and why.
// Steps must be between increasing chart versions and must not overlap, so that a chain
// between two versions is unambiguous.
func CompileSteps(declared []corev1alpha1.ConversionStep, path *field.Path) ([]*Step, error) {
	var errs []error
	out := make([]*Step, 0, len(declared))
	for i := range declared {
		d := &declared[i]
		p := path.Index(i)
		from, err := semver.NewVersion(d.From)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("from"), d.From, "not a chart version: "+err.Error()))
			continue
		}
		to, err := semver.NewVersion(d.To)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("to"), d.To, "not a chart version: "+err.Error()))
			continue
		}
		if !from.LessThan(to) {
			errs = append(errs, field.Invalid(p.Child("to"), d.To, "must be a later chart version than from ("+d.From+")"))
			continue
		}
		if len(d.Rules) == 0 {
			errs = append(errs, field.Required(p.Child("rules"), "a step needs at least one rule"))
			continue
		}
		step := &Step{From: from, To: to}
		for j := range d.Rules {
			r, err := compileRule(&d.Rules[j], p.Child("rules").Index(j))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			step.rules = append(step.rules, r)
		}
		if err := checkDisjointTargets(step, p.Child("rules")); err != nil {
			errs = append(errs, err)
		}
		out = append(out, step)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrBadRule, errors.Join(errs...))
	}
	slices.SortFunc(out, func(a, b *Step) int { return a.From.Compare(b.From) })
	for i := 1; i < len(out); i++ {
		if out[i].From.LessThan(out[i-1].To) {
			return nil, fmt.Errorf("%w: %s: the steps %s and %s overlap; chain steps between consecutive chart versions instead",
				ErrBadRule, path, out[i-1].Name(), out[i].Name())
		}
	}
	return out, nil
}

// checkDisjointTargets refuses two rules of a step that write the same path, or one
// inside the other, in either direction: their order would decide the value.
func checkDisjointTargets(step *Step, path *field.Path) error {
	type written struct {
		tokens []string
		rule   int
	}
	for _, side := range []func(rule) [][]string{rule.targets, rule.sources} {
		var all []written
		for i, r := range step.rules {
			for _, t := range side(r) {
				for _, w := range all {
					if w.rule != i && (isPrefix(w.tokens, t) || isPrefix(t, w.tokens)) {
						return field.Invalid(path.Index(i), dotted(t), fmt.Sprintf("rules %d and %d both convert %s", w.rule, i, dotted(w.tokens)))
					}
				}
				all = append(all, written{t, i})
			}
		}
	}
	return nil
}

func isPrefix(prefix, tokens []string) bool {
	return len(prefix) <= len(tokens) && slices.Equal(prefix, tokens[:len(prefix)])
}

func compileRule(r *corev1alpha1.ConversionRule, p *field.Path) (rule, error) {
	kinds := 0
	for _, set := range []bool{r.Move != "", r.Derive != "", r.Drop != ""} {
		if set {
			kinds++
		}
	}
	if kinds != 1 {
		return nil, field.Invalid(p, "", "a rule needs exactly one of move, derive and drop")
	}
	switch {
	case r.Move != "":
		return compileMove(r, p)
	case r.Derive != "":
		return compileDerive(r, p)
	default:
		if r.To != "" || r.Map != nil || r.Default != nil || r.Reverse != nil || r.ReverseDefault != nil || r.Expression != "" || r.Inverse != nil {
			return nil, field.Invalid(p, r.Drop, "drop takes no other field")
		}
		tokens, err := parseValuesPath(r.Drop, p.Child("drop"))
		if err != nil {
			return nil, err
		}
		return &dropRule{rule: r, path: tokens}, nil
	}
}

// parseValuesPath splits a dotted path of values (service.type) into its keys.
func parseValuesPath(s string, p *field.Path) ([]string, error) {
	if s == "" {
		return nil, field.Required(p, "a path of the values, such as service.type")
	}
	tokens := strings.Split(s, ".")
	for _, t := range tokens {
		if t == "" {
			return nil, field.Invalid(p, s, "a path of the values has no empty keys")
		}
	}
	return tokens, nil
}

func dotted(tokens []string) string { return strings.Join(tokens, ".") }

// moveRule moves the value at from to to, through a table of values when it has one.
type moveRule struct {
	rule        *corev1alpha1.ConversionRule
	from, to    []string
	there, back *table
}

// table converts values by their key (the string, or the JSON of any other value).
type table struct {
	values     map[string]any
	fallback   any
	hasDefault bool
}

func (t *table) convert(v any) (any, bool) {
	if t == nil {
		return v, true
	}
	if out, ok := t.values[valueKey(v)]; ok {
		return deepCopyJSON(out), true
	}
	if t.hasDefault {
		return deepCopyJSON(t.fallback), true
	}
	return nil, false
}

// valueKey is how a table names a value: strings as they are, other values as JSON.
func valueKey(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := compactJSON(normalizeNumbers(v))
	return b
}

func compileMove(r *corev1alpha1.ConversionRule, p *field.Path) (rule, error) {
	if r.Expression != "" || r.Inverse != nil {
		return nil, field.Invalid(p, r.Move, "move takes to, map, default, reverse and reverseDefault; expression and inverse belong to derive")
	}
	from, err := parseValuesPath(r.Move, p.Child("move"))
	if err != nil {
		return nil, err
	}
	to, err := parseValuesPath(r.To, p.Child("to"))
	if err != nil {
		return nil, err
	}
	m := &moveRule{rule: r, from: from, to: to}
	if r.Map == nil && (r.Default != nil || r.Reverse != nil || r.ReverseDefault != nil) {
		return nil, field.Invalid(p.Child("map"), nil, "default, reverse and reverseDefault convert through a map: give one")
	}
	if r.Map == nil {
		return m, nil
	}
	if m.there, err = newTable(r.Map, r.Default, p.Child("map"), p.Child("default")); err != nil {
		return nil, err
	}
	if r.Reverse != nil {
		if m.back, err = newTable(r.Reverse, r.ReverseDefault, p.Child("reverse"), p.Child("reverseDefault")); err != nil {
			return nil, err
		}
		return m, nil
	}
	// No reverse: invert the map, which must then be one to one.
	inverse := map[string]apiextensionsv1.JSON{}
	keys := make([]string, 0, len(r.Map))
	for k := range r.Map {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	keysOf := map[string][]string{}
	for _, k := range keys {
		v, err := decodeJSONValue(r.Map[k])
		if err != nil {
			return nil, field.Invalid(p.Child("map").Key(k), string(r.Map[k].Raw), err.Error())
		}
		vk := valueKey(v)
		keysOf[vk] = append(keysOf[vk], k)
		raw, _ := json.Marshal(k)
		inverse[vk] = apiextensionsv1.JSON{Raw: raw}
	}
	for _, vk := range slices.Sorted(maps.Keys(keysOf)) {
		if ks := keysOf[vk]; len(ks) > 1 {
			return nil, field.Invalid(p.Child("reverse"), nil, fmt.Sprintf(
				"map gives %s for %s: say in reverse which one %s converts back to", vk, strings.Join(ks, " and "), vk))
		}
	}
	if m.back, err = newTable(inverse, r.ReverseDefault, p.Child("map"), p.Child("reverseDefault")); err != nil {
		return nil, err
	}
	return m, nil
}

func newTable(m map[string]apiextensionsv1.JSON, def *apiextensionsv1.JSON, p, defPath *field.Path) (*table, error) {
	t := &table{values: make(map[string]any, len(m))}
	for k, raw := range m {
		v, err := decodeJSONValue(raw)
		if err != nil {
			return nil, field.Invalid(p.Key(k), string(raw.Raw), err.Error())
		}
		t.values[k] = v
	}
	if def != nil {
		v, err := decodeJSONValue(*def)
		if err != nil {
			return nil, field.Invalid(defPath, string(def.Raw), err.Error())
		}
		t.fallback, t.hasDefault = v, true
	}
	return t, nil
}

func decodeJSONValue(raw apiextensionsv1.JSON) (any, error) {
	if len(raw.Raw) == 0 {
		return nil, errors.New("no value")
	}
	obj, err := Decode([]byte(`{"v":` + string(raw.Raw) + `}`))
	if err != nil {
		return nil, fmt.Errorf("not a JSON value: %w", err)
	}
	return obj["v"], nil
}

func (m *moveRule) forward(values map[string]any) error {
	return moveValue(values, m.from, m.to, m.there)
}
func (m *moveRule) backward(values map[string]any) error {
	return moveValue(values, m.to, m.from, m.back)
}
func (m *moveRule) sources() [][]string { return [][]string{m.from} }
func (m *moveRule) targets() [][]string { return [][]string{m.to} }
func (m *moveRule) spec() *corev1alpha1.ConversionRule {
	return m.rule
}

// moveValue moves the value at from to to, converted by t. An absent value moves
// nothing; a value t has no entry for, or a destination that cannot hold it, stays.
func moveValue(values map[string]any, from, to []string, t *table) error {
	v, ok := getAt(values, from)
	if !ok {
		return nil
	}
	out := any(nil) // null, which leaves the chart's default in place, stays null
	if v != nil {
		if out, ok = t.convert(v); !ok {
			return fmt.Errorf("the map has no entry for %s and no default", valueKey(v))
		}
	}
	deleteAt(values, from)
	if !setAt(values, to, out) {
		setAt(values, from, v)
		return fmt.Errorf("%s leads through a value that is not an object", dotted(to))
	}
	return nil
}

// dropRule removes a value To does not have; going back there is nothing to restore
// but what the origin annotation keeps.
type dropRule struct {
	rule *corev1alpha1.ConversionRule
	path []string
}

func (d *dropRule) forward(values map[string]any) error {
	deleteAt(values, d.path)
	return nil
}
func (d *dropRule) backward(map[string]any) error      { return nil }
func (d *dropRule) sources() [][]string                { return [][]string{d.path} }
func (d *dropRule) targets() [][]string                { return nil }
func (d *dropRule) spec() *corev1alpha1.ConversionRule { return d.rule }

// deriveRule computes the value at to from From's values with a CEL expression, and
// the paths of inverse from To's values going back.
type deriveRule struct {
	rule    *corev1alpha1.ConversionRule
	to      []string
	expr    cel.Program
	inverse []inverseExpr
}

type inverseExpr struct {
	path []string
	expr cel.Program
}

// celCostLimit bounds what one expression may cost on one object (CEL's cost units),
// so that a rule cannot slow down every read of a kind.
const celCostLimit = 1_000_000

func compileDerive(r *corev1alpha1.ConversionRule, p *field.Path) (rule, error) {
	if r.To != "" || r.Map != nil || r.Default != nil || r.Reverse != nil || r.ReverseDefault != nil {
		return nil, field.Invalid(p, r.Derive, "derive takes expression and inverse; to, map, default, reverse and reverseDefault belong to move")
	}
	to, err := parseValuesPath(r.Derive, p.Child("derive"))
	if err != nil {
		return nil, err
	}
	if r.Expression == "" {
		return nil, field.Required(p.Child("expression"), "a CEL expression over self, the earlier version's values")
	}
	d := &deriveRule{rule: r, to: to}
	if d.expr, err = compileCEL(r.Expression, nil); err != nil {
		return nil, field.Invalid(p.Child("expression"), r.Expression, err.Error())
	}
	paths := make([]string, 0, len(r.Inverse))
	for k := range r.Inverse {
		paths = append(paths, k)
	}
	slices.Sort(paths)
	for _, k := range paths {
		tokens, err := parseValuesPath(k, p.Child("inverse").Key(k))
		if err != nil {
			return nil, err
		}
		prg, err := compileCEL(r.Inverse[k], nil)
		if err != nil {
			return nil, field.Invalid(p.Child("inverse").Key(k), r.Inverse[k], err.Error())
		}
		d.inverse = append(d.inverse, inverseExpr{path: tokens, expr: prg})
	}
	return d, nil
}

func (d *deriveRule) forward(values map[string]any) error {
	v, err := evalCEL(d.expr, values)
	if err != nil {
		return fmt.Errorf("expression: %w", err)
	}
	saved := deepCopyJSON(values).(map[string]any)
	for _, inv := range d.inverse {
		deleteAt(values, inv.path)
	}
	if v != nil && !setAt(values, d.to, v) {
		restoreAll(values, saved)
		return fmt.Errorf("%s leads through a value that is not an object", dotted(d.to))
	}
	return nil
}

func (d *deriveRule) backward(values map[string]any) error {
	computed := make([]any, len(d.inverse))
	for i, inv := range d.inverse {
		v, err := evalCEL(inv.expr, values)
		if err != nil {
			return fmt.Errorf("inverse of %s: %w", dotted(inv.path), err)
		}
		computed[i] = v
	}
	saved := deepCopyJSON(values).(map[string]any)
	deleteAt(values, d.to)
	for i, inv := range d.inverse {
		if computed[i] != nil && !setAt(values, inv.path, computed[i]) {
			restoreAll(values, saved)
			return fmt.Errorf("%s leads through a value that is not an object", dotted(inv.path))
		}
	}
	return nil
}

// restoreAll makes values what saved is again.
func restoreAll(values, saved map[string]any) {
	clear(values)
	maps.Copy(values, saved)
}

func (d *deriveRule) sources() [][]string {
	out := make([][]string, 0, len(d.inverse))
	for _, inv := range d.inverse {
		out = append(out, inv.path)
	}
	return out
}
func (d *deriveRule) targets() [][]string                { return [][]string{d.to} }
func (d *deriveRule) spec() *corev1alpha1.ConversionRule { return d.rule }

// celEnv is Kubernetes' CEL environment (the libraries of x-kubernetes-validations)
// with self, the values, of any type.
var celEnv = func() *cel.Env {
	envSet, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(
		environment.VersionedOptions{
			IntroducedVersion: environment.DefaultCompatibilityVersion(),
			EnvOptions:        []cel.EnvOption{cel.Variable("self", cel.DynType)},
		})
	if err != nil {
		panic(err)
	}
	env, err := envSet.Env(environment.StoredExpressions)
	if err != nil {
		panic(err)
	}
	return env
}()

// compileCEL compiles expr in env, celEnv when nil.
func compileCEL(expr string, env *cel.Env) (cel.Program, error) {
	if env == nil {
		env = celEnv
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	return env.Program(ast, cel.CostLimit(celCostLimit), cel.InterruptCheckFrequency(100))
}

// evalCEL evaluates prg with self = values, into a JSON value.
func evalCEL(prg cel.Program, values map[string]any) (any, error) {
	out, _, err := prg.Eval(map[string]any{"self": normalizeNumbers(values)})
	if err != nil {
		return nil, err
	}
	return fromCEL(out)
}

// normalizeNumbers copies v with json.Numbers as int64 or float64, which CEL reads.
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalizeNumbers(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeNumbers(e)
		}
		return out
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	default:
		return v
	}
}

// fromCEL turns a CEL value into a JSON value.
func fromCEL(v ref.Val) (any, error) {
	switch x := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		return uint64(x), nil
	case types.Double:
		if f := float64(x); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, nil
		}
		return nil, fmt.Errorf("the result %v is not a JSON number", float64(x))
	case types.String:
		return string(x), nil
	case traits.Mapper:
		out := map[string]any{}
		it := x.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("the result has a key of type %s; JSON keys are strings", k.Type().TypeName())
			}
			e, err := fromCEL(x.Get(k))
			if err != nil {
				return nil, err
			}
			out[string(ks)] = e
		}
		return out, nil
	case traits.Lister:
		out := []any{}
		it := x.Iterator()
		for it.HasNext() == types.True {
			e, err := fromCEL(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	if o, ok := v.Value().(map[string]any); ok { // self, or a part of it, as is
		return deepCopyJSON(o), nil
	}
	if o, ok := v.Value().([]any); ok {
		return deepCopyJSON(o), nil
	}
	return nil, fmt.Errorf("the result is a %s, which JSON cannot hold", v.Type().TypeName())
}

// getAt is the value at tokens.
func getAt(values map[string]any, tokens []string) (any, bool) {
	var cur any = values
	for _, tok := range tokens {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// setAt sets the value at tokens, making the objects on the way, in place of nulls too;
// false when a value on the way is something else than an object.
func setAt(values map[string]any, tokens []string, v any) bool {
	cur := values
	for _, tok := range tokens[:len(tokens)-1] {
		next, ok := cur[tok]
		if !ok || next == nil { // null means no values here: now there is one
			m := map[string]any{}
			cur[tok] = m
			cur = m
			continue
		}
		if cur, ok = next.(map[string]any); !ok {
			return false
		}
	}
	cur[tokens[len(tokens)-1]] = v
	return true
}
