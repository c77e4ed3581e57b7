package crd

import (
	"math"
	"slices"
	"strings"
)

// typeSet is the set of JSON types a schema accepts. Integers are a subset of numbers:
// "number" is tInteger|tFraction, so union and intersection need no special cases.
type typeSet uint8

const (
	tNull typeSet = 1 << iota
	tBoolean
	tInteger
	tFraction // numbers that are not integers
	tString
	tArray
	tObject

	tNumber = tInteger | tFraction
	tAll    = tNull | tBoolean | tNumber | tString | tArray | tObject
)

func typeFromName(name string) typeSet {
	switch name {
	case "null":
		return tNull
	case "boolean":
		return tBoolean
	case "integer":
		return tInteger
	case "number":
		return tNumber
	case "string":
		return tString
	case "array":
		return tArray
	case "object":
		return tObject
	}
	return 0
}

func (t typeSet) String() string {
	if t == tAll {
		return "any"
	}
	var names []string
	for _, c := range []struct {
		t    typeSet
		name string
	}{{tObject, "object"}, {tArray, "array"}, {tString, "string"}, {tBoolean, "boolean"}, {tNull, "null"}} {
		if t&c.t != 0 {
			names = append(names, c.name)
		}
	}
	switch t & tNumber {
	case tNumber:
		names = append(names, "number")
	case tInteger:
		names = append(names, "integer")
	case tFraction:
		names = append(names, "fraction")
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// kinds groups types by the validators Kubernetes applies to them: a value validation
// (maxLength, minimum, required, minItems, ...) only ever applies to one kind.
func (t typeSet) kinds() typeSet {
	k := t
	if k&tNumber != 0 {
		k |= tNumber
	}
	return k &^ tNull
}

// bound is a numeric limit already rounded (outwards) to float64.
type bound struct {
	value     float64
	exclusive bool
}

// rules are the value validations of one schema node.
type rules struct {
	hasEnum    bool
	enum       []any // JSON values; objects and arrays never kept
	minimum    *bound
	maximum    *bound
	multipleOf *float64
	minLength  *int64
	maxLength  *int64
	pattern    string
	format     string
	minItems   *int64
	maxItems   *int64
	unique     bool
	minProps   *int64
	maxProps   *int64
	required   []string
}

func (r *rules) empty() bool {
	return !r.hasEnum && r.minimum == nil && r.maximum == nil && r.multipleOf == nil &&
		r.minLength == nil && r.maxLength == nil && r.pattern == "" && r.format == "" &&
		r.minItems == nil && r.maxItems == nil && !r.unique && r.minProps == nil &&
		r.maxProps == nil && len(r.required) == 0
}

// merge adds o's rules to r where they can be combined exactly (the tighter bound
// wins, required lists join) and returns what could not be combined, to be kept as a
// separate allOf entry.
func (r *rules) merge(o rules) (rest rules) {
	if o.hasEnum {
		if r.hasEnum {
			rest.hasEnum, rest.enum = true, o.enum
		} else {
			r.hasEnum, r.enum = true, o.enum
		}
	}
	r.minimum = tighter(r.minimum, o.minimum, 1)
	r.maximum = tighter(r.maximum, o.maximum, -1)
	if o.multipleOf != nil {
		if r.multipleOf == nil {
			r.multipleOf = o.multipleOf
		} else if *r.multipleOf != *o.multipleOf {
			rest.multipleOf = o.multipleOf
		}
	}
	r.minLength = maxInt(r.minLength, o.minLength)
	r.maxLength = minInt(r.maxLength, o.maxLength)
	r.minItems = maxInt(r.minItems, o.minItems)
	r.maxItems = minInt(r.maxItems, o.maxItems)
	r.minProps = maxInt(r.minProps, o.minProps)
	r.maxProps = minInt(r.maxProps, o.maxProps)
	if o.pattern != "" {
		if r.pattern == "" {
			r.pattern = o.pattern
		} else if r.pattern != o.pattern {
			rest.pattern = o.pattern
		}
	}
	if o.format != "" {
		if r.format == "" {
			r.format = o.format
		} else if r.format != o.format {
			rest.format = o.format
		}
	}
	r.unique = r.unique || o.unique
	for _, k := range o.required {
		if !slices.Contains(r.required, k) {
			r.required = append(r.required, k)
		}
	}
	return rest
}

// relevant keeps the rules that can apply to a value of types: a maximum on a schema
// that only accepts strings never applies, and must not start applying to numbers
// when that schema's rules join a parent that also accepts numbers.
func (r rules) relevant(types typeSet) rules {
	if types&tNumber == 0 {
		r.minimum, r.maximum, r.multipleOf = nil, nil, nil
	}
	if types&tString == 0 {
		r.minLength, r.maxLength, r.pattern, r.format = nil, nil, "", ""
	}
	if types&tArray == 0 {
		r.minItems, r.maxItems, r.unique = nil, nil, false
	}
	if types&tObject == 0 {
		r.minProps, r.maxProps, r.required = nil, nil, nil
	}
	return r
}

// tighter returns the stricter of two bounds; dir is 1 for minimums, -1 for maximums.
func tighter(a, b *bound, dir float64) *bound {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.value*dir > b.value*dir:
		return a
	case b.value*dir > a.value*dir:
		return b
	}
	return &bound{value: a.value, exclusive: a.exclusive || b.exclusive}
}

func maxInt(a, b *int64) *int64 {
	if a == nil || (b != nil && *b > *a) {
		return b
	}
	return a
}

func minInt(a, b *int64) *int64 {
	if a == nil || (b != nil && *b < *a) {
		return b
	}
	return a
}

// node is a translated schema. Used structurally it describes the shape (types,
// properties, items, map values) plus its value validations; used as a value-only node
// (inside allOf/anyOf of a structural node) only rules, props, items and the nested
// allOf/anyOf count, because Kubernetes forbids types and extensions there.
type node struct {
	types      typeSet
	hasDefault bool // values.yaml sets this key, so null must stay possible (it deletes it)
	desc       string
	props      map[string]*node
	closed     bool  // additionalProperties: false
	addl       *node // typed additionalProperties
	items      *node
	v          rules
	allOf      []*node   // value-only
	anyOf      [][]*node // value-only branches, one slice per anyOf
	path       string    // values path, for the report
	ptr        string    // schema location, for the report
}

func anyNode(path, ptr string) *node { return &node{types: tAll, path: path, ptr: ptr} }

// valueEmpty tells whether n, used as a value-only node, constrains nothing.
func (n *node) valueEmpty() bool {
	if n == nil {
		return true
	}
	if !n.v.empty() || len(n.allOf) > 0 || len(n.anyOf) > 0 {
		return false
	}
	for _, c := range n.props {
		if !c.valueEmpty() {
			return false
		}
	}
	return n.items.valueEmpty()
}

// intersect merges b into a (allOf): a value must satisfy both.
func intersect(a, b *node) *node {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	a.types &= b.types
	a.hasDefault = a.hasDefault || b.hasDefault
	if a.desc == "" {
		a.desc = b.desc
	}
	if len(b.props) > 0 && a.props == nil {
		a.props = map[string]*node{}
	}
	for k, bp := range b.props {
		a.props[k] = intersect(a.props[k], bp)
	}
	a.closed = a.closed || b.closed
	a.addl = intersect(a.addl, b.addl)
	a.items = intersect(a.items, b.items)
	if rest := a.v.merge(b.v); !rest.empty() {
		a.allOf = append(a.allOf, &node{types: tAll, v: rest, path: b.path, ptr: b.ptr})
	}
	a.allOf = append(a.allOf, b.allOf...)
	a.anyOf = append(a.anyOf, b.anyOf...)
	return a
}

// structure copies n without any value validation: the shape a union is built from.
func structure(n *node) *node {
	if n == nil {
		return nil
	}
	c := &node{types: n.types, hasDefault: n.hasDefault, desc: n.desc, closed: n.closed, path: n.path, ptr: n.ptr}
	if n.props != nil {
		c.props = make(map[string]*node, len(n.props))
		for k, p := range n.props {
			c.props[k] = structure(p)
		}
	}
	c.addl = structure(n.addl)
	c.items = structure(n.items)
	return c
}

// valueOnly projects n to its value validations, for use as an anyOf branch.
func valueOnly(n *node) *node {
	if n == nil {
		return nil
	}
	c := &node{types: tAll, v: n.v.relevant(n.types), allOf: n.allOf, anyOf: n.anyOf, path: n.path, ptr: n.ptr}
	if n.types&tObject != 0 {
		for k, p := range n.props {
			if vp := valueOnly(p); !vp.valueEmpty() {
				if c.props == nil {
					c.props = map[string]*node{}
				}
				c.props[k] = vp
			}
		}
	}
	if vi := valueOnly(n.items); n.types&tArray != 0 && !vi.valueEmpty() {
		c.items = vi
	}
	// additionalProperties cannot appear in a value validation; a value-only addl is
	// reported by the caller when it matters.
	return c
}

func finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }
