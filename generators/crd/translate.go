package crd

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// ErrRootNotObject means the schema's root cannot accept an object, while Helm values
// always are one.
var ErrRootNotObject = errors.New("values.schema.json does not accept an object at its root")

// ErrSchemaTooComplex means the schema expands (through $ref) or nests beyond what a
// CRD can hold; such a schema is refused rather than truncated.
var ErrSchemaTooComplex = errors.New("values.schema.json is too large or too deeply nested for a CRD")

const (
	maxNodes = 20000 // translated schema nodes per chart, $ref expansions included
	maxDepth = 64    // nesting of translated schemas
)

// loc is the place a schema is translated at.
type loc struct {
	path     string     // values path
	info     schemaInfo // base URI, draft and pointer of the schema
	defaults any        // what values.yaml holds at path
}

func (l loc) sub(tokens ...string) loc {
	l.info.ptr = pointerChild(l.info.ptr, tokens...)
	return l
}

// translator turns the JSON Schema documents of a chart (and its subcharts) into nodes,
// collecting the report and enforcing the size budget.
type translator struct {
	doc        *document
	schemaFile string // file of the document being translated, prefixing its pointers; "" for the chart's own schema
	report     Report
	nodes      int
	depth      int
	expanding  map[uintptr]bool // $ref targets being expanded, to stop at recursion
	err        error
}

func newTranslator() *translator {
	return &translator{expanding: map[uintptr]bool{}}
}

func (t *translator) lose(path, ptr, keyword, reason string) {
	t.report = append(t.report, Loss{Path: path, Keyword: keyword, Reason: reason, SchemaPath: ptr})
}

func (t *translator) loseAt(l loc, keyword, reason string) {
	t.lose(l.path, l.info.ptr, keyword, reason)
}

// translateDocument translates one values.schema.json whose values live at prefix.
func (t *translator) translateDocument(schema []byte, defaults map[string]any, prefix string) (*node, error) {
	doc, err := newDocument(schema, t.schemaFile)
	if err != nil {
		return nil, err
	}
	t.doc = doc
	rootInfo := doc.resources[defaultBase].info
	if m, ok := doc.root.(map[string]any); ok {
		t.expanding[identity(m)] = true
		defer delete(t.expanding, identity(m))
	}
	n := t.translate(doc.root, loc{path: prefix, info: rootInfo, defaults: defaults})
	if t.err != nil {
		return nil, t.err
	}
	if n.types&tObject == 0 {
		return nil, fmt.Errorf("%w: it accepts %s", ErrRootNotObject, n.types)
	}
	n.types = tObject
	return n, nil
}

func (t *translator) translate(s any, l loc) *node {
	t.nodes++
	if t.nodes > maxNodes || t.depth > maxDepth {
		if t.err == nil {
			t.err = fmt.Errorf("%w: more than %d schemas or deeper than %d levels", ErrSchemaTooComplex, maxNodes, maxDepth)
		}
		return anyNode(l.path, l.info.ptr)
	}
	t.depth++
	defer func() { t.depth-- }()

	switch s := s.(type) {
	case bool:
		n := anyNode(l.path, l.info.ptr)
		if !s {
			n.types = 0
		}
		return n
	case map[string]any:
		l.info = t.doc.infoOf(s, l.info)
		return t.schemaObject(s, l)
	}
	// The compile check refuses anything else; stay permissive if it ever gets here.
	return anyNode(l.path, l.info.ptr)
}

func (t *translator) schemaObject(m map[string]any, l loc) *node {
	d := l.info.draft
	var fromRef *node
	if ref, ok := m["$ref"].(string); ok {
		fromRef = t.ref(ref, l)
		if d <= draft7 {
			return fromRef // siblings of $ref are ignored before 2019-09
		}
	}
	n := t.keywords(m, l)
	n = intersect(n, fromRef)
	if _, ok := m["$recursiveRef"]; ok && d == draft2019 {
		t.loseAt(l.sub("$recursiveRef"), "$recursiveRef", "dynamic reference: not followed in the CRD, enforced by the webhook")
	}
	if _, ok := m["$dynamicRef"]; ok && d == draft2020 {
		t.loseAt(l.sub("$dynamicRef"), "$dynamicRef", "dynamic reference: not followed in the CRD, enforced by the webhook")
	}
	if list, ok := m["allOf"].([]any); ok {
		for i, sub := range list {
			n = intersect(n, t.translate(sub, l.sub("allOf", strconv.Itoa(i))))
		}
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if list, ok := m[kw].([]any); ok {
			n = intersect(n, t.combine(kw, list, l))
		}
	}
	t.inferType(m, n, l)
	return n
}

// inferType types a schema that names no type from what Helm merges into it: a key
// whose values.yaml default is a map and whose schema describes properties is an
// object, one whose default is a list and whose schema describes items is an array.
// This is the one place the CRD may refuse what the JSON Schema allows (a composition
// replacing a default map with a string); the Report says so.
func (t *translator) inferType(m map[string]any, n *node, l loc) {
	if n.types != tAll {
		return
	}
	switch l.defaults.(type) {
	case map[string]any:
		if len(n.props) > 0 {
			n.types = tObject | tNull
			t.loseAt(l, "type", "no type given: taken as an object because values.yaml sets a map here (the CRD refuses another kind of value, which Helm only warns about)")
		}
	case []any:
		if _, ok := m["items"]; ok && n.items != nil {
			n.types = tArray | tNull
			t.loseAt(l, "type", "no type given: taken as an array because values.yaml sets a list here (the CRD refuses another kind of value)")
		}
	}
}

func (t *translator) ref(ref string, l loc) *node {
	target, err := t.doc.resolve(ref, l.info)
	if err != nil {
		reason := "remote reference: never fetched; any value is kept and the webhook decides"
		if !errors.Is(err, errRemoteRef) {
			reason = "unresolvable reference (" + err.Error() + "); any value is kept"
		}
		t.loseAt(l.sub("$ref"), "$ref", reason)
		return anyNode(l.path, l.info.ptr)
	}
	m, ok := target.node.(map[string]any)
	if !ok {
		return t.translate(target.node, loc{path: l.path, info: target.info, defaults: l.defaults})
	}
	id := identity(m)
	if t.expanding[id] {
		t.loseAt(l.sub("$ref"), "$ref", "recursive reference: this level keeps any value; the webhook checks it")
		return anyNode(l.path, l.info.ptr)
	}
	t.expanding[id] = true
	defer delete(t.expanding, id)
	return t.translate(m, loc{path: l.path, info: target.info, defaults: l.defaults})
}

// keywords translates the keywords of one schema object, except the applicators
// ($ref, allOf, anyOf, oneOf) that schemaObject combines.
func (t *translator) keywords(m map[string]any, l loc) *node {
	d := l.info.draft
	n := anyNode(l.path, l.info.ptr)
	if desc, ok := m["description"].(string); ok {
		n.desc = desc
	}
	switch tv := m["type"].(type) {
	case string:
		n.types = typeFromName(tv)
	case []any:
		n.types = 0
		for _, name := range tv {
			if s, ok := name.(string); ok {
				n.types |= typeFromName(s)
			}
		}
	}
	if c, ok := m["const"]; ok && d >= draft6 {
		t.enum(n, []any{c}, l.sub("const"), "const")
	}
	if list, ok := m["enum"].([]any); ok {
		t.enum(n, list, l.sub("enum"), "enum")
	}
	t.numeric(n, m, l)
	n.v.minLength = t.count(m, "minLength", l, false)
	n.v.maxLength = t.count(m, "maxLength", l, true)
	if p, ok := m["pattern"].(string); ok {
		if _, err := regexp.Compile(p); err != nil {
			t.loseAt(l.sub("pattern"), "pattern", "Go's regexp cannot compile it; enforced by the webhook")
		} else {
			n.v.pattern = p
		}
	}
	t.format(n, m, l)
	t.array(n, m, l)
	t.object(n, m, l)

	webhookOnly := []string{"not", "patternProperties"}
	if d >= draft6 {
		webhookOnly = append(webhookOnly, "contains", "propertyNames")
	}
	if d >= draft7 {
		webhookOnly = append(webhookOnly, "if")
	}
	if d <= draft7 {
		webhookOnly = append(webhookOnly, "dependencies")
	}
	if d >= draft2019 {
		webhookOnly = append(webhookOnly, "dependentRequired", "dependentSchemas", "unevaluatedProperties", "unevaluatedItems")
	}
	for _, kw := range webhookOnly {
		if _, ok := m[kw]; ok {
			t.loseAt(l.sub(kw), kw, "not expressible in a CRD schema; enforced by the webhook")
		}
	}
	return n
}

func (t *translator) enum(n *node, values []any, l loc, kw string) {
	var keep []any
	var types typeSet
	structured := false
	for _, v := range values {
		switch v := v.(type) {
		case nil:
			types |= tNull
		case bool:
			types |= tBoolean
			keep = append(keep, v)
		case string:
			types |= tString
			keep = append(keep, v)
		case json.Number:
			if r, ok := new(big.Rat).SetString(v.String()); ok && r.IsInt() {
				types |= tInteger
			} else {
				types |= tFraction
			}
			keep = append(keep, v)
		case map[string]any:
			types |= tObject
			structured = true
		case []any:
			types |= tArray
			structured = true
		}
	}
	n.types &= types
	switch {
	case structured:
		t.loseAt(l, kw, "object or array values: the allowed values are compared by the webhook only")
	case len(keep) > 0:
		n.v.hasEnum, n.v.enum = true, keep
	}
}

// numeric reads the numeric bounds. Inclusive limits take the nearest float64: the
// API server rounds numbers the same monotonic way, so nothing the schema allows is
// refused. An exclusive limit that float64 cannot hold exactly becomes inclusive (a
// value just above it could round onto it), which is reported.
func (t *translator) numeric(n *node, m map[string]any, l loc) {
	d := l.info.draft
	lower := t.limit(m, "minimum", l, false)
	upper := t.limit(m, "maximum", l, false)
	if d == draft4 {
		if b, _ := m["exclusiveMinimum"].(bool); b && lower != nil {
			lower.exclusive = t.exclusive(m, "minimum", l)
		}
		if b, _ := m["exclusiveMaximum"].(bool); b && upper != nil {
			upper.exclusive = t.exclusive(m, "maximum", l)
		}
	} else {
		lower = tighter(lower, t.limit(m, "exclusiveMinimum", l, true), 1)
		upper = tighter(upper, t.limit(m, "exclusiveMaximum", l, true), -1)
	}
	n.v.minimum, n.v.maximum = lower, upper
	if num, ok := m["multipleOf"].(json.Number); ok {
		r, ok := new(big.Rat).SetString(num.String())
		if ok && r.IsInt() && r.Sign() > 0 && r.Num().IsInt64() && r.Num().Int64() <= 1<<53 {
			f := float64(r.Num().Int64())
			n.v.multipleOf = &f
		} else {
			t.loseAt(l.sub("multipleOf"), "multipleOf", "not a whole number Kubernetes can divide by exactly; enforced by the webhook")
		}
	}
}

// limit reads a numeric keyword as the nearest float64.
func (t *translator) limit(m map[string]any, kw string, l loc, exclusive bool) *bound {
	num, ok := m[kw].(json.Number)
	if !ok {
		return nil
	}
	f, _, err := big.ParseFloat(num.String(), 10, 256, big.ToNearestEven)
	if err != nil {
		return nil
	}
	v, acc := f.Float64()
	if !finite(v) {
		t.loseAt(l.sub(kw), kw, "beyond the range of a float64; enforced by the webhook")
		return nil
	}
	b := &bound{value: v, exclusive: exclusive}
	if exclusive && acc != big.Exact {
		b.exclusive = false
		t.loseAt(l.sub(kw), kw, "float64 cannot hold this limit exactly, so the CRD checks it inclusively; the exclusive limit is enforced by the webhook")
	}
	return b
}

// exclusive decides whether a draft-04 boolean exclusive limit stays exclusive.
func (t *translator) exclusive(m map[string]any, kw string, l loc) bool {
	num, _ := m[kw].(json.Number)
	f, _, err := big.ParseFloat(num.String(), 10, 256, big.ToNearestEven)
	if err != nil {
		return false
	}
	if _, acc := f.Float64(); acc != big.Exact {
		t.loseAt(l.sub("exclusive"+strings.ToUpper(kw[:1])+kw[1:]), "exclusive"+strings.ToUpper(kw[:1])+kw[1:], "float64 cannot hold the limit exactly, so the CRD checks it inclusively; enforced by the webhook")
		return false
	}
	return true
}

// count reads a non-negative integer keyword (lengths, item and property counts).
func (t *translator) count(m map[string]any, kw string, l loc, isMax bool) *int64 {
	num, ok := m[kw].(json.Number)
	if !ok {
		return nil
	}
	r, ok := new(big.Rat).SetString(num.String())
	if !ok || r.Sign() < 0 {
		return nil
	}
	// A fractional count (allowed before draft-06) means the next whole number up for
	// minimums and down for maximums.
	i := new(big.Int).Quo(r.Num(), r.Denom())
	if !r.IsInt() && !isMax {
		i.Add(i, big.NewInt(1))
	}
	if !i.IsInt64() {
		if isMax {
			return nil // nothing is that long
		}
		v := int64(math.MaxInt64)
		return &v
	}
	v := i.Int64()
	return &v
}

// format keeps the formats that Helm's validator asserts (drafts up to 07; from
// 2019-09 on, format is an annotation there) and that Kubernetes checks with the same
// meaning.
func (t *translator) format(n *node, m map[string]any, l loc) {
	f, ok := m["format"].(string)
	if !ok || l.info.draft >= draft2019 {
		return
	}
	switch f {
	case "date", "ipv4", "ipv6":
		n.v.format = f
	default:
		t.loseAt(l.sub("format"), "format", fmt.Sprintf("format %q is not checked the same way by Kubernetes; enforced by the webhook", f))
	}
}

func (t *translator) array(n *node, m map[string]any, l loc) {
	d := l.info.draft
	n.v.minItems = t.count(m, "minItems", l, false)
	n.v.maxItems = t.count(m, "maxItems", l, true)
	if u, _ := m["uniqueItems"].(bool); u {
		n.v.unique = true
	}
	itemLoc := loc{path: itemsPath(l.path), info: l.info} // lists are replaced, not merged: no defaults
	items, hasItems := m["items"]
	_, tuple := items.([]any)
	if d == draft2020 {
		if _, ok := m["prefixItems"]; ok {
			t.loseAt(l.sub("prefixItems"), "prefixItems", "tuple validation is not expressible in a CRD; enforced by the webhook")
			if hasItems {
				t.loseAt(l.sub("items"), "items", "applies only after prefixItems; enforced by the webhook")
			}
			return
		}
	} else if tuple {
		t.loseAt(l.sub("items"), "items", "tuple validation (items as a list) is not expressible in a CRD; enforced by the webhook")
		if _, ok := m["additionalItems"]; ok {
			t.loseAt(l.sub("additionalItems"), "additionalItems", "belongs to the tuple; enforced by the webhook")
		}
		return
	}
	if hasItems && !tuple {
		itemLoc.info.ptr = pointerChild(l.info.ptr, "items")
		n.items = t.translate(items, itemLoc)
	}
}

func (t *translator) object(n *node, m map[string]any, l loc) {
	defaults, _ := l.defaults.(map[string]any)
	if props, ok := m["properties"].(map[string]any); ok {
		n.props = make(map[string]*node, len(props))
		for _, k := range sortedKeys(props) {
			def, has := defaults[k]
			c := t.translate(props[k], loc{path: childPath(l.path, k), info: l.sub("properties", k).info, defaults: def})
			c.hasDefault = has
			n.props[k] = c
		}
	}
	_, patterned := m["patternProperties"]
	switch ap := m["additionalProperties"].(type) {
	case bool:
		if ap {
			break
		}
		if patterned {
			t.loseAt(l.sub("additionalProperties"), "additionalProperties", "false next to patternProperties: undeclared keys are kept; enforced by the webhook")
		} else {
			n.closed = true
			t.loseAt(l.sub("additionalProperties"), "additionalProperties", closedReason)
		}
	case map[string]any:
		c := t.translate(ap, loc{path: mapValuesPath(l.path), info: l.sub("additionalProperties").info, defaults: mergedValues(defaults)})
		if patterned {
			t.loseAt(l.sub("additionalProperties"), "additionalProperties", "next to patternProperties it does not apply to every key; enforced by the webhook")
		} else {
			n.addl = c
		}
	}
	if req, ok := m["required"].([]any); ok {
		for _, r := range req {
			k, ok := r.(string)
			if !ok {
				continue
			}
			if _, defaulted := defaults[k]; defaulted {
				continue // Helm validates the merged values, where the default is present
			}
			if !contains(n.v.required, k) {
				n.v.required = append(n.v.required, k)
			}
		}
	}
	n.v.minProps = t.count(m, "minProperties", l, false)
	if n.v.minProps != nil && len(defaults) > 0 {
		// Helm counts the keys of the merged map, defaults included.
		reduced := max(*n.v.minProps-int64(len(defaults)), 0)
		t.loseAt(l.sub("minProperties"), "minProperties", fmt.Sprintf("values.yaml sets %d keys here, so the CRD asks for %d fewer; the webhook counts the merged keys", len(defaults), *n.v.minProps-reduced))
		n.v.minProps = &reduced
		if reduced == 0 {
			n.v.minProps = nil
		}
	}
	n.v.maxProps = t.count(m, "maxProperties", l, true)
}

// closedReason is the report's line for additionalProperties: false. The API server
// would prune an undeclared key, and a client without strict field validation gets at
// most a warning: the webhook would then judge values without the user's typo and
// admit them. So the key is kept for the webhook, which refuses it as Helm does.
const closedReason = "false: undeclared keys are kept (never pruned, whatever the client's field validation) and refused by the webhook with Helm's message"

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// mergedValues merges all values of a map of defaults: what any key of a map (a
// schema's additionalProperties) may have defaulted by values.yaml.
func mergedValues(defaults map[string]any) any {
	out := map[string]any{}
	for _, v := range defaults {
		if m, ok := v.(map[string]any); ok {
			deepMerge(out, m)
		}
	}
	return out
}

func deepMerge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			dm, ok := dst[k].(map[string]any)
			if !ok {
				dm = map[string]any{}
				dst[k] = dm
			}
			deepMerge(dm, sm)
			continue
		}
		if _, ok := dst[k]; !ok {
			dst[k] = v
		}
	}
}

// combine translates anyOf or oneOf. The branches' shapes are merged into one (a CRD
// has one structure per field) and what remains of each branch are its value
// validations. When every branch accepts a different kind of value (null, a string,
// an object, ...) each branch's validations only ever apply to its own kind, so they
// join the parent exactly, and oneOf's "exactly one" holds by construction.
func (t *translator) combine(kw string, list []any, l loc) *node {
	var branches []*node
	nullable := false
	for i, sub := range list {
		b := t.translate(sub, l.sub(kw, strconv.Itoa(i)))
		if b.types&^tNull == 0 {
			// Kubernetes never evaluates anyOf for null, so a null-only branch is
			// carried by nullable alone.
			nullable = nullable || b.types&tNull != 0
			continue
		}
		branches = append(branches, b)
	}
	if len(branches) == 0 {
		n := anyNode(l.path, l.info.ptr)
		n.types = 0
		if nullable {
			n.types = tNull
		}
		return n
	}
	u := structure(branches[0])
	for _, b := range branches[1:] {
		u = t.union(kw, u, structure(b))
	}
	u.path, u.ptr, u.desc = l.path, l.info.ptr, ""
	if nullable {
		u.types |= tNull
	}
	if len(branches) == 1 || disjointKinds(branches) {
		for _, b := range branches {
			u = intersect(u, rulesOf(b))
		}
		return u
	}
	sameKind := true
	var branchValues []*node
	trivial := false
	for _, b := range branches {
		if b.types.kinds() != branches[0].types.kinds() {
			sameKind = false
		}
		if !valueOnly(b.addl).valueEmpty() {
			t.loseAt(l.sub(kw), kw, "a branch constrains additionalProperties, which cannot be checked inside a CRD branch; enforced by the webhook")
		}
		vb := valueOnly(b)
		trivial = trivial || vb.valueEmpty()
		branchValues = append(branchValues, vb)
	}
	if trivial {
		for _, vb := range branchValues {
			if !vb.valueEmpty() {
				t.loseAt(l.sub(kw), kw, "one branch has no constraint a CRD can express, so the other branches' constraints are enforced by the webhook only")
				break
			}
		}
		return u
	}
	u.anyOf = append(u.anyOf, branchValues)
	if kw == "oneOf" {
		t.loseAt(l.sub(kw), kw, "the CRD checks that at least one branch matches (anyOf); that exactly one does is enforced by the webhook")
	}
	if !sameKind {
		t.loseAt(l.sub(kw), kw, "branches of different types: the CRD cannot tie each branch's constraints to its type; enforced by the webhook")
	}
	return u
}

// disjointKinds tells whether no two branches accept the same kind of value and no
// branch has a constraint that applies to every kind (enum, nested combinators).
func disjointKinds(branches []*node) bool {
	var seen typeSet
	for _, b := range branches {
		k := b.types.kinds()
		if k&seen != 0 || b.v.hasEnum || len(b.allOf) > 0 || len(b.anyOf) > 0 {
			return false
		}
		seen |= k
	}
	return true
}

// rulesOf is n without its own types, keeping the validations that can apply to
// values of those types: merged into a parent whose shape already includes n's, it
// adds exactly n's validations.
func rulesOf(n *node) *node {
	if n == nil {
		return nil
	}
	c := &node{types: tAll, v: n.v.relevant(n.types), allOf: n.allOf, anyOf: n.anyOf, path: n.path, ptr: n.ptr}
	if n.types&tObject != 0 {
		c.closed, c.addl = n.closed, n.addl
		if n.props != nil {
			c.props = make(map[string]*node, len(n.props))
			for k, p := range n.props {
				c.props[k] = p
			}
		}
	}
	if n.types&tArray != 0 {
		c.items = n.items
	}
	return c
}

// union merges the shapes of two anyOf/oneOf branches: the result accepts every value
// either accepts. A property declared in only one of two open object branches can hold
// anything under the other, so it loses its type.
func (t *translator) union(kw string, a, b *node) *node {
	u := &node{types: a.types | b.types, hasDefault: a.hasDefault || b.hasDefault, desc: a.desc, path: a.path, ptr: a.ptr}
	aObj, bObj := a.types&tObject != 0, b.types&tObject != 0
	switch {
	case aObj && bObj:
		u.closed = a.closed && b.closed
		keys := map[string]bool{}
		for k := range a.props {
			keys[k] = true
		}
		for k := range b.props {
			keys[k] = true
		}
		if len(keys) > 0 {
			u.props = map[string]*node{}
		}
		for _, k := range sortedKeys(keys) {
			ap, bp := a.props[k], b.props[k]
			switch {
			case ap != nil && bp != nil:
				u.props[k] = t.union(kw, ap, bp)
			case ap != nil:
				u.props[k] = t.onlyIn(kw, ap, b)
			default:
				u.props[k] = t.onlyIn(kw, bp, a)
			}
		}
		switch {
		case a.addl != nil && b.addl != nil:
			u.addl = t.union(kw, a.addl, b.addl)
		case a.addl != nil && b.closed:
			u.addl = a.addl
		case b.addl != nil && a.closed:
			u.addl = b.addl
		}
	case aObj:
		u.props, u.closed, u.addl = a.props, a.closed, a.addl
	case bObj:
		u.props, u.closed, u.addl = b.props, b.closed, b.addl
	}
	aArr, bArr := a.types&tArray != 0, b.types&tArray != 0
	switch {
	case aArr && bArr:
		if a.items != nil && b.items != nil {
			u.items = t.union(kw, a.items, b.items)
		}
	case aArr:
		u.items = a.items
	case bArr:
		u.items = b.items
	}
	return u
}

// onlyIn is the union shape of property p, declared by one branch only, given the
// other branch.
func (t *translator) onlyIn(kw string, p, other *node) *node {
	switch {
	case other.closed:
		return p
	case other.addl != nil:
		return t.union(kw, p, other.addl)
	}
	if p.types == tAll {
		return p
	}
	t.lose(p.path, p.ptr, kw, "declared in only some branches, so its type cannot be fixed in the CRD; enforced by the webhook")
	n := anyNode(p.path, p.ptr)
	n.hasDefault, n.desc = p.hasDefault, p.desc
	return n
}
