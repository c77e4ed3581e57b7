package conversion

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

// ErrLossyRule means a declared rule loses values and does not say so.
var ErrLossyRule = errors.New("conversion rule loses values")

// checkDraws is how many values of each schema CheckDeclared converts there and back.
const checkDraws = 200

// CheckDeclared checks the steps that the definition of version declares, between each
// other served version and version, on values drawn from both versions' schemas
// (always the same draws, so the result is stable): converted there and back, a value
// must come back, and what a rule writes must be valid under the other version's
// schema. It returns what acknowledged rules lose, as ConversionLosses (nil when no
// earlier version is served to check against, not nil otherwise), and refuses
// (ErrBadRule, ErrLossyRule) a rule that fails on a valid value, writes a value the
// other version refuses, or loses values without acknowledging it; each with the path
// and a value that shows it.
func (s *Schemas) CheckDeclared(version string) ([]corev1alpha1.ConversionLoss, error) {
	mine := s.declared.charts[version]
	if mine == nil || len(s.declared.steps[version]) == 0 {
		return nil, nil
	}
	ck := &checker{s: s, seen: map[string]bool{}}
	checked := false
	for _, other := range s.served {
		theirs := s.declared.charts[other]
		if other == version || theirs == nil || !theirs.LessThan(mine) {
			continue
		}
		there := s.declared.chain(other, version)
		if there == nil {
			continue
		}
		checked = true
		back := there.reverse()
		r := rand.New(rand.NewPCG(0x636f6d706f736974, uint64(len(other))))
		ck.direction(r, other, version, there, back)
		ck.direction(r, version, other, back, there)
	}
	if checked && ck.losses == nil {
		ck.losses = []corev1alpha1.ConversionLoss{}
	}
	slices.SortFunc(ck.losses, func(a, b corev1alpha1.ConversionLoss) int {
		return strings.Compare(a.Step+a.Path, b.Step+b.Path)
	})
	return ck.losses, errors.Join(ck.refused...)
}

type checker struct {
	s       *Schemas
	losses  []corev1alpha1.ConversionLoss
	refused []error
	seen    map[string]bool // step, path and finding already reported
}

// direction converts values of from to to with there, and back with back.
func (ck *checker) direction(r *rand.Rand, from, to string, there, back *chain) {
	schema := ck.s.Structural(from)
	target := ck.s.Structural(to)
	if schema == nil || target == nil {
		return
	}
	spec, tspec := schema.Properties["spec"], target.Properties["spec"]
	validator := newSpecValidator(&spec)
	targetValidator := newSpecValidator(&tspec)
	gen := valueGen{r: r}
	for range checkDraws {
		values, ok := gen.value(&spec, 0).(map[string]any)
		if !ok || len(validation.ValidateCustomResource(nil, values, validator)) > 0 {
			continue
		}
		values = normalizeValues(values)
		converted := deepCopyJSON(values).(map[string]any)
		if err := there.applyChecked(converted); err != nil {
			ck.refuseFailure(there, from, to, values, err)
			continue
		}
		ck.checkWritten(there, from, to, values, converted, targetValidator)
		again := deepCopyJSON(converted).(map[string]any)
		if err := back.applyChecked(again); err != nil {
			ck.refuseFailure(back, to, from, converted, err)
			continue
		}
		ck.checkCameBack(there, from, to, values, again)
	}
}

// stepOf is the step of c that holds rule, named from → to in c's direction.
func stepOf(c *chain, r rule) string {
	for _, s := range c.steps {
		if slices.Contains(s.rules, r) {
			return s.Name()
		}
	}
	return ""
}

// written and read are the paths a rule writes and reads going in c's direction.
func written(c *chain, r rule) [][]string {
	if c.forward {
		return r.targets()
	}
	return r.sources()
}

func read(c *chain, r rule) [][]string {
	if c.forward {
		return r.sources()
	}
	return r.targets()
}

func (ck *checker) rules(c *chain) []rule {
	var out []rule
	for _, s := range c.steps {
		out = append(out, s.rules...)
	}
	return out
}

func (ck *checker) refuseFailure(c *chain, from, to string, values map[string]any, err error) {
	var re ruleError
	if !errors.As(err, &re) {
		ck.refused = append(ck.refused, fmt.Errorf("%w: converting %s to %s: %w", ErrBadRule, from, to, err))
		return
	}
	key := "fail " + stepOf(c, re.rule) + describeRule(re.rule.spec())
	if ck.seen[key] {
		return
	}
	ck.seen[key] = true
	ck.refused = append(ck.refused, fmt.Errorf("%w: step %s, %s: converting %s to %s fails for %s",
		ErrBadRule, stepOf(c, re.rule), re.Error(), from, to, example(values, read(c, re.rule))))
}

// checkWritten refuses a rule whose written value the target version's schema refuses.
func (ck *checker) checkWritten(c *chain, from, to string, values, converted map[string]any, v validation.SchemaValidator) {
	errs := validation.ValidateCustomResource(nil, normalizeNumbers(converted), v)
	for _, r := range ck.rules(c) {
		for _, p := range written(c, r) {
			for _, e := range errs {
				if e.Field != dotted(p) && !strings.HasPrefix(e.Field, dotted(p)+".") && !strings.HasPrefix(e.Field, dotted(p)+"[") {
					continue
				}
				key := "invalid " + stepOf(c, r) + dotted(p)
				if ck.seen[key] {
					continue
				}
				ck.seen[key] = true
				ck.refused = append(ck.refused, fmt.Errorf("%w: step %s, %s: converting %s to %s gives %s, which %s refuses: %s",
					ErrBadRule, stepOf(c, r), describeRule(r.spec()), example(values, read(c, r)), to, example(converted, [][]string{p}), to, e.ErrorBody()))
			}
		}
	}
}

// checkCameBack reports each path of from's values a rule reads that does not come
// back: a loss when the rule acknowledges it, a refusal otherwise.
func (ck *checker) checkCameBack(c *chain, from, to string, values, again map[string]any) {
	for _, r := range ck.rules(c) {
		for _, p := range read(c, r) {
			want, had := getAt(values, p)
			got, has := getAt(again, p)
			if had == has && (!had || equalJSON(want, got)) {
				continue
			}
			step := stepOf(c, r)
			key := "lost " + step + dotted(p)
			if ck.seen[key] {
				continue
			}
			ck.seen[key] = true
			shown := fmt.Sprintf("%s: %s comes back as %s (%s → %s → %s)", dotted(p), jsonOr(want, had), jsonOr(got, has), from, to, from)
			spec := r.spec()
			switch {
			case spec.AcknowledgeLoss != "":
				ck.losses = append(ck.losses, corev1alpha1.ConversionLoss{Step: step, Path: dotted(p), Example: shown, Reason: spec.AcknowledgeLoss})
			case spec.Drop != "":
				ck.losses = append(ck.losses, corev1alpha1.ConversionLoss{Step: step, Path: dotted(p), Example: shown, Reason: "dropped"})
			default:
				ck.refused = append(ck.refused, fmt.Errorf("%w: step %s, %s: %s; give the rule acknowledgeLoss to accept it",
					ErrLossyRule, step, describeRule(spec), shown))
			}
		}
	}
}

// example shows the values at paths, as JSON.
func example(values map[string]any, paths [][]string) string {
	parts := make([]string, 0, len(paths))
	for _, p := range paths {
		v, ok := getAt(values, p)
		parts = append(parts, dotted(p)+": "+jsonOr(v, ok))
	}
	return strings.Join(parts, ", ")
}

func jsonOr(v any, ok bool) string {
	if !ok {
		return "(absent)"
	}
	text, err := compactJSON(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return text
}

// normalizeValues gives values the types Decode gives them.
func normalizeValues(values map[string]any) map[string]any {
	text, err := compactJSON(values)
	if err != nil {
		return values
	}
	out, err := Decode([]byte(text))
	if err != nil {
		return values
	}
	return out
}

// newSpecValidator validates values with the schema of spec.
func newSpecValidator(spec *structuralschema.Structural) validation.SchemaValidator {
	return validation.NewSchemaValidatorFromOpenAPI(spec.ToKubeOpenAPI())
}
