package conversion

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
)

// Declared conversions (docs/conversion.md#declared-conversions).
//
// The values of a stored object (its spec, in the hub) have the shape of the version
// the composition is pinned to (vocab.LabelCompositionVersion): they are what its
// release renders. Converting to another served version runs the steps between the two
// chart versions, those the later version's definition declares; converting back runs
// them backwards. What the steps cannot give back — a value a lossy map or a drop
// loses — rides along in the origin annotation, tagged with the version whose shape it
// has, and comes back when converting to that version again, unless the other side
// changed what it decides.

// declaredConversions are the compiled declarations of a CRD's served versions.
type declaredConversions struct {
	charts map[string]*semver.Version // served version → chart version
	steps  map[string][]*Step         // served version → the steps its definition declares
}

// readDeclarations compiles the declarations a CRD's annotations hold.
func readDeclarations(crd *apiextensionsv1.CustomResourceDefinition) (*declaredConversions, error) {
	d := &declaredConversions{charts: map[string]*semver.Version{}, steps: map[string][]*Step{}}
	for key, text := range crd.Annotations {
		version, ok := strings.CutPrefix(key, vocab.AnnotationPrefixConversions)
		if !ok {
			continue
		}
		decl := corev1alpha1.ConversionDeclaration{}
		if err := json.Unmarshal([]byte(text), &decl); err != nil {
			return nil, fmt.Errorf("annotation %s: %w", key, err)
		}
		chart, err := semver.NewVersion(decl.Chart)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: chart %q: %w", key, decl.Chart, err)
		}
		d.charts[version] = chart
		if d.steps[version], err = CompileSteps(decl.Steps, field.NewPath("metadata", "annotations").Key(key).Child("steps")); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// chain is the steps converting the values of served version from to those of to, or
// nil when the declarations say nothing about the two.
type chain struct {
	steps   []*Step
	forward bool // from is the earlier chart version
}

func (d *declaredConversions) chain(from, to string) *chain {
	if d == nil || from == to {
		return nil
	}
	a, b := d.charts[from], d.charts[to]
	if a == nil || b == nil || a.Equal(b) {
		return nil
	}
	c := &chain{forward: a.LessThan(b)}
	low, high, declarer := a, b, to
	if !c.forward {
		low, high, declarer = b, a, from
	}
	for _, s := range d.steps[declarer] {
		// A step is the change the values went through at its chart version To: any
		// version before To and from From on has From's shape as far as it goes.
		if low.LessThan(s.To) && !high.LessThan(s.To) {
			c.steps = append(c.steps, s)
		}
	}
	if len(c.steps) == 0 {
		return nil
	}
	if !c.forward {
		slices.Reverse(c.steps)
	}
	return c
}

func (c *chain) apply(values map[string]any) { _ = c.applyChecked(values) }

// applyChecked is apply that also says which rules could not apply.
func (c *chain) applyChecked(values map[string]any) error {
	var errs []error
	for _, s := range c.steps {
		if c.forward {
			errs = append(errs, s.forward(values))
		} else {
			errs = append(errs, s.backward(values))
		}
	}
	return errors.Join(errs...)
}

func (c *chain) reverse() *chain {
	steps := slices.Clone(c.steps)
	slices.Reverse(steps)
	return &chain{steps: steps, forward: !c.forward}
}

// origins are the content of the origin annotation: by served version, values that
// version showed which the object's current shape cannot hold. Each comes back when
// the object is converted to its version again, if the other side did not change what
// it decides; the others ride along.
type origins map[string]*origin

// origin is what one version's object had that the conversion away from it could not
// give back.
type origin struct {
	// Values are values the conversion could not give back, by JSON Pointer from the
	// values' root.
	Values map[string]any `json:"values,omitempty"`
	// Absent are pointers the conversion back would set, where that version had none.
	Absent []string `json:"absent,omitempty"`
}

// reshape converts the spec of obj from the shape of served version from to that of
// to, with the declared steps between them, keeping what they cannot give back.
func (d *declaredConversions) reshape(obj map[string]any, from, to string) error {
	c := d.chain(from, to)
	if c == nil {
		return nil
	}
	values, ok := obj["spec"].(map[string]any)
	if !ok {
		return nil
	}
	annotations, err := annotationsOf(obj)
	if err != nil {
		return err
	}
	kept := origins{}
	if text, ok := annotations[vocab.AnnotationConversionOrigin].(string); ok {
		if decodeUseNumber(text, &kept) != nil {
			kept = origins{} // unreadable: it cannot apply
		}
	}
	converted := deepCopyJSON(values).(map[string]any)
	c.apply(converted)
	back := c.reverse()
	if o := kept[to]; o != nil {
		converted = restoreOrigin(converted, o, back)
	}
	delete(kept, to)
	// What converting back would not give back goes along, for the next conversion.
	again := deepCopyJSON(converted).(map[string]any)
	back.apply(again)
	lost := &origin{Values: map[string]any{}}
	diffValues(values, again, nil, lost)
	delete(kept, from)
	if len(lost.Values) > 0 || len(lost.Absent) > 0 {
		kept[from] = lost
	}
	for v, o := range kept {
		if o == nil {
			delete(kept, v)
		}
	}
	obj["spec"] = converted
	if len(kept) == 0 {
		if annotations != nil {
			delete(annotations, vocab.AnnotationConversionOrigin)
			if len(annotations) == 0 {
				delete(obj["metadata"].(map[string]any), "annotations")
			}
		}
		return nil
	}
	text, err := compactJSON(kept)
	if err != nil {
		return fmt.Errorf("encoding the %s annotation: %w", vocab.AnnotationConversionOrigin, err)
	}
	return setAnnotation(obj, vocab.AnnotationConversionOrigin, text, to)
}

// restoreOrigin gives back the values kept when values were converted away from their
// version, where the other version's object does not say otherwise: a kept value comes
// back when, seen through that version (back), it changes nothing.
func restoreOrigin(values map[string]any, kept *origin, back *chain) map[string]any {
	seen := deepCopyJSON(values).(map[string]any)
	back.apply(seen)
	try := func(candidate map[string]any) bool {
		view := deepCopyJSON(candidate).(map[string]any)
		back.apply(view)
		return equalJSON(view, seen)
	}
	all := deepCopyJSON(values).(map[string]any)
	applyOrigin(all, kept, nil)
	if try(all) {
		return all
	}
	// Some of it conflicts with what the other side wrote: keep what does not.
	for _, only := range originEntries(kept) {
		candidate := deepCopyJSON(values).(map[string]any)
		applyOrigin(candidate, kept, []string{only})
		if try(candidate) {
			values = candidate
		}
	}
	return values
}

func originEntries(o *origin) []string {
	out := make([]string, 0, len(o.Values)+len(o.Absent))
	for p := range o.Values {
		out = append(out, p)
	}
	out = append(out, o.Absent...)
	slices.Sort(out)
	return out
}

// applyOrigin sets the kept values and removes the absent ones in values; only, when
// not nil, limits it to those pointers.
func applyOrigin(values map[string]any, o *origin, only []string) {
	want := func(p string) bool { return only == nil || slices.Contains(only, p) }
	for _, p := range o.Absent {
		if tokens, err := parsePointer(p); err == nil && len(tokens) > 0 && want(p) {
			deleteAt(values, tokens)
		}
	}
	for p, v := range o.Values {
		if tokens, err := parsePointer(p); err == nil && len(tokens) > 0 && want(p) {
			setAt(values, tokens, deepCopyJSON(v))
		}
	}
}

// diffValues records in lost what of want got differs: values of want that got lacks
// or has otherwise, and keys of got that want lacks. Objects are compared key by key,
// anything else as a whole.
func diffValues(want, got map[string]any, at []string, lost *origin) {
	for k, w := range want {
		p := append(slices.Clip(at), k)
		g, ok := got[k]
		if !ok {
			lost.Values[pointerOf(p)] = deepCopyJSON(w)
			continue
		}
		wm, wok := w.(map[string]any)
		gm, gok := g.(map[string]any)
		if wok && gok {
			diffValues(wm, gm, p, lost)
			continue
		}
		if !equalJSON(w, g) {
			lost.Values[pointerOf(p)] = deepCopyJSON(w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			lost.Absent = append(lost.Absent, pointerOf(append(slices.Clip(at), k)))
		}
	}
	slices.Sort(lost.Absent)
}

// equalJSON compares decoded JSON values, numbers by value whatever their Go type
// (json.Number from Decode, int64 or float64 from CEL).
func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number, int64, uint64, float64:
		p, q := normalizeNumbers(a), normalizeNumbers(b)
		if p == q {
			return true
		}
		pf, pok := asFloat(p)
		qf, qok := asFloat(q)
		return pok && qok && pf == qf
	default:
		return a == b
	}
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func decodeUseNumber(text string, into any) error {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	return dec.Decode(into)
}

// setAnnotation sets an annotation of obj, making metadata.annotations when needed, and
// checks that the annotations still fit.
func setAnnotation(obj map[string]any, key, value, version string) error {
	annotations, err := annotationsOf(obj)
	if err != nil {
		return err
	}
	if annotations == nil {
		metadata, _ := obj["metadata"].(map[string]any)
		if metadata == nil {
			metadata = map[string]any{}
			obj["metadata"] = metadata
		}
		annotations = map[string]any{}
		metadata["annotations"] = annotations
	}
	annotations[key] = value
	return checkAnnotationsSize(annotations, version)
}

// ConvertedPaths are the value paths the declared steps between served versions a and
// b read or write, in either direction: move sources and destinations, derive targets
// and the keys of their inverse, drop paths.
func (s *Schemas) ConvertedPaths(a, b string) [][]string {
	c := s.declared.chain(a, b)
	if c == nil {
		return nil
	}
	var out [][]string
	for _, step := range c.steps {
		for _, r := range step.rules {
			out = append(out, r.sources()...)
			out = append(out, r.targets()...)
		}
	}
	return out
}
