package crd

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func (t *translator) loseNode(n *node, keyword, reason string) {
	t.lose(n.path, n.ptr, keyword, reason)
}

// emit writes n as a structural schema: one type per node (or int-or-string, or no
// type with unknown fields kept), object fields, items, then value validations.
//
// keyed is true for the value of an object's key (a property or a map value). Those
// are always nullable: the API server deletes a null it may not keep, so the webhook
// would judge values without the key the user wrote (in Helm a null deletes a
// default, or is refused by the schema where there is none; the webhook decides).
func (t *translator) emit(n *node, keyed bool) apiextensionsv1.JSONSchemaProps {
	p := apiextensionsv1.JSONSchemaProps{Description: n.desc}
	nullable := n.types&tNull != 0 || n.hasDefault || keyed
	typed := n.types&^tNull != 0
	switch ts := n.types &^ tNull; {
	case ts == 0:
		if n.types == 0 {
			t.loseNode(n, "type", "no value can be valid here; the CRD keeps any value and the webhook refuses it")
		} else {
			t.loseNode(n, "type", "only null is valid here; the CRD keeps any value and the webhook refuses others")
		}
		return apiextensionsv1.JSONSchemaProps{Description: n.desc, XPreserveUnknownFields: ptrTo(true), Nullable: true}
	case ts == tObject:
		p.Type = "object"
	case ts == tArray:
		p.Type = "array"
	case ts == tString:
		p.Type = "string"
	case ts == tBoolean:
		p.Type = "boolean"
	case ts == tInteger:
		p.Type = "integer"
	case ts&^tNumber == 0:
		p.Type = "number"
	case ts == tInteger|tString:
		p.XIntOrString = true
	default:
		typed = false
		if ts != tAll&^tNull {
			t.loseNode(n, "type", fmt.Sprintf("%s cannot be one CRD type; any value is kept and the webhook checks the type", ts))
		}
		p.XPreserveUnknownFields = ptrTo(true)
	}
	p.Nullable = nullable
	switch p.Type {
	case "object":
		t.emitObject(n, &p)
	case "array":
		t.emitArray(n, &p)
	default:
		if !typed && (len(n.props) > 0 || n.items != nil || n.addl != nil) {
			t.loseNode(n, "properties", "the value may have several types, so its properties and items are enforced by the webhook only")
		}
	}
	t.emitRules(n, n.v, &p, true)
	for _, a := range n.allOf {
		if e := t.emitValue(a, &p); e != nil {
			p.AllOf = append(p.AllOf, *e)
		}
	}
	for _, group := range n.anyOf {
		if branches := t.emitBranches(n, group, &p); branches != nil {
			if p.AnyOf == nil {
				p.AnyOf = branches
			} else {
				p.AllOf = append(p.AllOf, apiextensionsv1.JSONSchemaProps{AnyOf: branches})
			}
		}
	}
	return p
}

func (t *translator) emitObject(n *node, p *apiextensionsv1.JSONSchemaProps) {
	if len(n.props) > 0 {
		p.Properties = make(map[string]apiextensionsv1.JSONSchemaProps, len(n.props))
		for _, k := range sortedKeys(n.props) {
			p.Properties[k] = t.emit(n.props[k], true)
		}
	}
	switch {
	case n.closed:
		// additionalProperties: false. Pruning would drop a typo before the webhook
		// sees it (clients without strict field validation only get a warning), so
		// the key is kept and the webhook refuses it with Helm's message.
		p.XPreserveUnknownFields = ptrTo(true)
	case n.addl != nil && len(n.props) == 0:
		s := t.emit(n.addl, true)
		p.AdditionalProperties = &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &s}
	case n.addl != nil:
		t.loseNode(n, "additionalProperties", "a schema for undeclared keys next to declared properties is not expressible in a CRD; undeclared keys are kept and checked by the webhook")
		p.XPreserveUnknownFields = ptrTo(true)
	default:
		p.XPreserveUnknownFields = ptrTo(true) // Helm accepts keys the schema does not declare
	}
}

func (t *translator) emitArray(n *node, p *apiextensionsv1.JSONSchemaProps) {
	items := apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: ptrTo(true), Nullable: true}
	if n.items != nil {
		items = t.emit(n.items, false)
	}
	p.Items = &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &items}
}

// emitRules writes value validations. On a structural node that may be null, an enum
// goes into allOf: Kubernetes checks enum even for null, but never allOf.
func (t *translator) emitRules(n *node, r rules, p *apiextensionsv1.JSONSchemaProps, structural bool) {
	if r.hasEnum {
		values := make([]apiextensionsv1.JSON, 0, len(r.enum))
		for _, v := range r.enum {
			raw, err := json.Marshal(v)
			if err != nil {
				continue
			}
			values = append(values, apiextensionsv1.JSON{Raw: raw})
		}
		if structural && p.Nullable {
			p.AllOf = append(p.AllOf, apiextensionsv1.JSONSchemaProps{Enum: values})
		} else {
			p.Enum = values
		}
	}
	if b := t.kubeBound(n, r.minimum, "minimum", p.Type); b != nil {
		p.Minimum, p.ExclusiveMinimum = ptrTo(b.value), b.exclusive
	}
	if b := t.kubeBound(n, r.maximum, "maximum", p.Type); b != nil {
		p.Maximum, p.ExclusiveMaximum = ptrTo(b.value), b.exclusive
	}
	p.MultipleOf = r.multipleOf
	p.MinLength, p.MaxLength = r.minLength, r.maxLength
	p.Pattern = r.pattern
	if r.format != "" {
		if !structural || p.Type == "string" {
			p.Format = r.format
		} else {
			t.loseNode(n, "format", "format on a value that need not be a string; enforced by the webhook")
		}
	}
	p.MinItems, p.MaxItems = r.minItems, r.maxItems
	p.MinProperties, p.MaxProperties = r.minProps, r.maxProps
	if len(r.required) > 0 {
		p.Required = append([]string(nil), r.required...)
	}
	if r.unique {
		if structural && p.Type == "array" && scalarItems(p.Items) {
			p.XListType = ptrTo("set")
		} else {
			t.loseNode(n, "uniqueItems", "only a list of non-null scalars can be a CRD set; enforced by the webhook")
		}
	}
}

// kubeBound adapts a limit to how Kubernetes compares numbers. On an integer field it
// refuses any limit that is not a whole int64, so the limit is rounded inwards to the
// nearest whole number (exact for whole values). Elsewhere it truncates the limit to
// an int64 before comparing a whole number with it: a fractional exclusive limit
// would then refuse valid values (0 < 0.5 becomes 0 < 0), so it is made inclusive,
// and a limit beyond the int64 range would overflow, so it is dropped.
func (t *translator) kubeBound(n *node, b *bound, kw, typ string) *bound {
	if b == nil {
		return nil
	}
	out := *b
	if out.value != math.Trunc(out.value) {
		if typ == "integer" {
			out.exclusive = false
			if kw == "minimum" {
				out.value = math.Ceil(out.value)
			} else {
				out.value = math.Floor(out.value)
			}
		} else if out.exclusive {
			out.exclusive = false
			t.loseNode(n, "exclusive"+strings.ToUpper(kw[:1])+kw[1:], "a fractional exclusive limit is checked inclusively by the CRD (Kubernetes truncates it for whole numbers); enforced exactly by the webhook")
		}
	}
	if math.Abs(out.value) >= 1<<63 {
		t.loseNode(n, kw, "beyond the int64 range Kubernetes compares whole numbers in; enforced by the webhook")
		return nil
	}
	return &out
}

func scalarItems(items *apiextensionsv1.JSONSchemaPropsOrArray) bool {
	if items == nil || items.Schema == nil || items.Schema.Nullable {
		return false
	}
	switch items.Schema.Type {
	case "string", "integer", "number", "boolean":
		return true
	}
	return false
}

// emitValue writes a value-only node for use inside allOf/anyOf of structural node s,
// keeping only what s declares (Kubernetes requires every field a value validation
// names to exist in the structure). It returns nil when nothing is left.
func (t *translator) emitValue(v *node, s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	var out apiextensionsv1.JSONSchemaProps
	t.emitRules(v, v.v, &out, false)
	for _, k := range sortedKeys(v.props) {
		c := v.props[k]
		if c.valueEmpty() {
			continue
		}
		if k == "metadata" {
			t.loseNode(c, "properties", "a CRD cannot constrain a key named metadata inside allOf/anyOf/oneOf; enforced by the webhook")
			continue
		}
		sp, ok := s.Properties[k]
		if !ok {
			t.loseNode(c, "properties", "constrained inside allOf/anyOf/oneOf but not declared as a field here; enforced by the webhook")
			continue
		}
		if e := t.emitValue(c, &sp); e != nil {
			if out.Properties == nil {
				out.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
			}
			out.Properties[k] = *e
		}
	}
	if !v.items.valueEmpty() {
		if s.Items != nil && s.Items.Schema != nil {
			if e := t.emitValue(v.items, s.Items.Schema); e != nil {
				out.Items = &apiextensionsv1.JSONSchemaPropsOrArray{Schema: e}
			}
		} else {
			t.loseNode(v.items, "items", "constrained inside allOf/anyOf/oneOf on a value that is not always a list; enforced by the webhook")
		}
	}
	for _, a := range v.allOf {
		if e := t.emitValue(a, s); e != nil {
			out.AllOf = append(out.AllOf, *e)
		}
	}
	for _, group := range v.anyOf {
		if branches := t.emitBranches(v, group, s); branches != nil {
			if out.AnyOf == nil {
				out.AnyOf = branches
			} else {
				out.AllOf = append(out.AllOf, apiextensionsv1.JSONSchemaProps{AnyOf: branches})
			}
		}
	}
	if reflect.DeepEqual(out, apiextensionsv1.JSONSchemaProps{}) {
		return nil
	}
	return &out
}

// emitBranches writes one anyOf. A branch with nothing left makes the whole anyOf
// always true, so it is dropped (and reported).
func (t *translator) emitBranches(n *node, group []*node, s *apiextensionsv1.JSONSchemaProps) []apiextensionsv1.JSONSchemaProps {
	var branches []apiextensionsv1.JSONSchemaProps
	for _, b := range group {
		e := t.emitValue(b, s)
		if e == nil {
			t.loseNode(n, "anyOf", "a branch has no constraint left that the CRD can express, so this anyOf/oneOf is enforced by the webhook only")
			return nil
		}
		branches = append(branches, *e)
	}
	return branches
}

func ptrTo[T any](v T) *T { return &v }
