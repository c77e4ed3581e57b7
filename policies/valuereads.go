package policies

import (
	"cmp"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strings"
	"text/template/parse"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/lru"
)

// UnreadValue is a key of a composition's values that its chart neither declares (in
// its values.schema.json or values.yaml, or a subchart's) nor reads in a template: a
// typo, most of the time, which Helm takes silently and the release runs without.
type UnreadValue struct {
	// Path is the key's path in the values, e.g. ["replicaCuont"].
	Path []string
	// Suggestion is the path of the declared or read key nearest to it, nil when none is
	// near: ["replicaCount"].
	Suggestion []string
}

// Field is u's path as the composition names it, spec.replicaCuont, printable as a
// warning (see Violation.Warning): its keys are the writer's.
func (u UnreadValue) Field() string {
	elems := make([]pathElem, len(u.Path))
	for i, key := range u.Path {
		elems[i] = pathElem{key: key}
	}
	return printable(joinPath(field.NewPath("spec"), elems))
}

// Shorten cuts s to at most n bytes without splitting a character, marking the cut.
func Shorten(s string, n int) string { return truncate(s, n) }

// Warning is the admission warning for u: its field and Message, at most
// MaxWarningLength bytes.
func (u UnreadValue) Warning(kind, version string) string {
	return truncate(u.Field()+": "+u.Message(kind, version), MaxWarningLength)
}

// Message says that the version of kind has no such value, and which key was meant
// when one is near: "FireworksApp v1-1-5 has no such value (did you mean
// spec.replicaCount?)".
func (u UnreadValue) Message(kind, version string) string {
	msg := kind + " " + version + " has no such value"
	if u.Suggestion != nil {
		msg += " (did you mean spec." + strings.Join(u.Suggestion, ".") + "?)"
	}
	return printable(msg)
}

// knownValues is the tree of the values a chart declares or reads. A node that is
// open has no unread keys below it: a map the chart leaves open on purpose (an
// additionalProperties schema, an empty map of values.yaml) or one a template reads
// whole (toYaml, range, include, tpl over it).
type knownValues struct {
	open     bool
	children map[string]*knownValues
	// computedKeys, at the root, tells that a template reads the values at a key it
	// computes: a string of the composition's values may name the key.
	computedKeys bool
}

func (k *knownValues) child(key string) *knownValues {
	if k.children == nil {
		k.children = map[string]*knownValues{}
	}
	c, ok := k.children[key]
	if !ok {
		c = &knownValues{}
		k.children[key] = c
	}
	return c
}

// at is the node of path, made as needed.
func (k *knownValues) at(path []string) *knownValues {
	n := k
	for _, seg := range path {
		n = n.child(seg)
	}
	return n
}

// merge adds what o knows to k.
func (k *knownValues) merge(o *knownValues) {
	if o == nil {
		return
	}
	k.open = k.open || o.open
	for key, c := range o.children {
		k.child(key).merge(c)
	}
}

// unreadKey is a key of the values that a tree does not know, and the node of its
// parent, whose children are the keys it may have meant.
type unreadKey struct {
	path   []string
	parent *knownValues
}

// unread appends the keys of values below k that neither k nor also (nil: nothing)
// knows, each with its path below prefix, in sorted order. Values equal to those of
// old at the same path (an update's unchanged values) are left out.
func (k *knownValues) unread(values, old map[string]any, also *knownValues, prefix []string, out []unreadKey) []unreadKey {
	if k.open || also != nil && also.open {
		return out
	}
	for _, key := range slices.Sorted(maps.Keys(values)) {
		path := append(slices.Clip(prefix), key)
		was, had := old[key]
		c, ok := k.children[key]
		var alsoChild *knownValues
		if also != nil {
			alsoChild = also.children[key]
		}
		switch {
		case !ok && alsoChild == nil:
			if !had || !equality.Semantic.DeepEqual(was, values[key]) {
				out = append(out, unreadKey{path: path, parent: k})
			}
			continue
		case !ok:
			c = &knownValues{} // known through also only
		}
		if m, isMap := values[key].(map[string]any); isMap {
			wasMap, _ := was.(map[string]any)
			out = c.unread(m, wasMap, alsoChild, path, out)
		}
	}
	return out
}

// told are the first max of keys (all when max < 0) as UnreadValues, each with the key
// nearest to it.
func told(keys []unreadKey, max int) []UnreadValue {
	if max >= 0 && len(keys) > max {
		keys = keys[:max]
	}
	out := make([]UnreadValue, 0, len(keys))
	for _, u := range keys {
		v := UnreadValue{Path: u.path}
		if near := nearestKey(u.path[len(u.path)-1], u.parent.children); near != "" {
			v.Suggestion = append(slices.Clone(u.path[:len(u.path)-1]), near)
		}
		out = append(out, v)
	}
	return out
}

// maxSuggestedKey bounds the length of a key a suggestion is looked for (a longer one
// is no typo), and maxSuggestionCandidates the keys it is looked for among.
const (
	maxSuggestedKey         = 64
	maxSuggestionCandidates = 4096
)

// nearestKey is the key of known nearest to key by edit distance (a transposition
// counting as one edit, case ignored), "" when none is within two edits (one for keys
// of four characters or fewer). Ties go to the first key in sorted order.
func nearestKey(key string, known map[string]*knownValues) string {
	if len(key) > maxSuggestedKey || len(known) > maxSuggestionCandidates {
		return ""
	}
	limit := 2
	if len(key) <= 4 {
		limit = 1
	}
	best, bestDistance := "", limit+1
	for candidate := range known {
		if candidate == key {
			continue
		}
		d := editDistanceWithin(key, candidate, limit)
		if d < bestDistance || (d == bestDistance && candidate < best) {
			best, bestDistance = candidate, d
		}
	}
	if bestDistance > limit {
		return ""
	}
	return best
}

// editDistanceWithin is the optimal string alignment distance of a and b (the fewest
// insertions, deletions, substitutions and swaps of neighbours, ASCII case ignored)
// when it is at most limit, else limit+1. Only the cells within limit of the diagonal
// are computed: O(len(a) * limit).
func editDistanceWithin(a, b string, limit int) int {
	far := limit + 1
	if len(a)-len(b) > limit || len(b)-len(a) > limit {
		return far // the distance is at least the difference of the lengths
	}
	fold := func(c byte) byte {
		if 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = min(j, far)
	}
	for i := 1; i <= len(a); i++ {
		for j := range cur {
			cur[j] = far
		}
		cur[0] = min(i, far)
		rowMin := cur[0]
		for j := max(1, i-limit); j <= min(len(b), i+limit); j++ {
			cost := 1
			if fold(a[i-1]) == fold(b[j-1]) {
				cost = 0
			}
			d := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && fold(a[i-1]) == fold(b[j-2]) && fold(a[i-2]) == fold(b[j-1]) {
				d = min(d, prev2[j-2]+1)
			}
			cur[j] = min(d, far)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= far {
			return far
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// valueReads keeps what each chart declares and reads, per chart digest: the analysis
// parses every template, and charts are shared by many compositions.
type valueReads struct {
	cache *lru.Cache
}

// valueReadsSize bounds the charts whose reads are kept: a tree is a few kilobytes, and
// every chart version served may be written to.
const valueReadsSize = 2048

func newValueReads() *valueReads { return &valueReads{cache: lru.New(valueReadsSize)} }

// known is what ch declares or reads; digest "" keeps nothing.
func (v *valueReads) known(ch *chart.Chart, digest string) *knownValues {
	if digest != "" {
		if k, ok := v.cache.Get(digest); ok {
			return k.(*knownValues)
		}
	}
	k := chartKnownValues(ch)
	if digest != "" {
		v.cache.Add(digest, k)
	}
	return k
}

// UnreadValues are the keys of values (a composition's spec) that ch neither declares
// nor reads, at any depth, subcharts and global included, in sorted order.
func UnreadValues(ch *chart.Chart, values map[string]any) []UnreadValue {
	known := chartKnownValues(ch)
	return told(known.unread(values, nil, requestReads(values, known.computedKeys), nil, nil), -1)
}

// chartKnownValues is what ch and its subcharts declare or read, as Helm hands values
// to them: a subchart's under its alias or name, and global to every chart.
func chartKnownValues(ch *chart.Chart) *knownValues {
	root := &knownValues{}
	if ch == nil {
		root.open = true
		return root
	}
	// The named templates of every chart share one namespace, and their dot is what
	// their caller passed: what they read is known in every chart's values.
	a := &chartReads{shared: &knownValues{}, literals: map[string]bool{}}
	var charts []*knownValues
	addChart(root, root, a, ch, &charts)
	if a.dynamic {
		// Some template reads the values at a key it computes (Bitnami's
		// common.utils.getValueFromKey splits "auth.rootPassword" on dots): the keys
		// are the chart's own strings, and each that reads as a path is read; so may
		// those of the values (requestReads).
		for path := range a.literals {
			a.shared.at(strings.Split(path, ".")).open = true
		}
		root.computedKeys = true
	}
	for _, at := range charts {
		at.merge(a.shared)
	}
	return root
}

// addChart adds what ch declares and reads to at, its values, and what it reads of
// global to the root's; what is read by named templates and at computed keys goes to
// a, and at to charts.
func addChart(root, at *knownValues, a *chartReads, ch *chart.Chart, charts *[]*knownValues) {
	*charts = append(*charts, at)
	at.merge(schemaKnownValues(ch.Schema))
	at.merge(valuesKnownValues(ch.Values))
	for _, f := range ch.Templates {
		if f == nil || !strings.HasPrefix(f.Name, "templates/") {
			continue
		}
		if !a.template(f.Name, string(f.Data), at) {
			at.open = true
		}
	}
	// Files and values that hold templates, which a chart renders with tpl in its own
	// context (tpl (.Files.Get "config.tpl") .): what does not parse is not a template.
	for _, f := range ch.Files {
		if f != nil && strings.Contains(string(f.Data), "{{") {
			a.template(f.Name, string(f.Data), at)
		}
	}
	a.values(ch.Values, at)
	if at != root {
		root.child("global").merge(at.children["global"])
	}
	if ch.Metadata != nil {
		// Helm reads the tags and conditions of the dependencies itself.
		for _, d := range ch.Metadata.Dependencies {
			if d == nil {
				continue
			}
			for _, tag := range d.Tags {
				root.child("tags").child(tag) // Helm reads tags at the top only
			}
			for _, cond := range strings.Split(d.Condition, ",") {
				if cond = strings.TrimSpace(cond); cond != "" {
					at.at(strings.Split(cond, "."))
				}
			}
		}
	}
	for key, sub := range dependencies(ch) {
		addChart(root, at.child(key), a, sub, charts)
	}
}

// dependencies are the subcharts of parent under the keys of its values they read:
// each alias of its Chart.yaml (Helm makes a copy of the chart per alias), else the
// chart's name.
func dependencies(parent *chart.Chart) map[string]*chart.Chart {
	out := map[string]*chart.Chart{}
	named := map[string]bool{}
	if parent.Metadata != nil {
		for _, d := range parent.Metadata.Dependencies {
			if d == nil {
				continue
			}
			for _, sub := range parent.Dependencies() {
				if sub != nil && sub.Metadata != nil && sub.Name() == d.Name {
					out[cmp.Or(d.Alias, d.Name)] = sub
					named[d.Name] = true
				}
			}
		}
	}
	for _, sub := range parent.Dependencies() {
		if sub != nil && sub.Metadata != nil && !named[sub.Name()] {
			out[sub.Name()] = sub
		}
	}
	return out
}

// schemaKnownValues is what a values.schema.json declares: its properties, at any
// depth, through allOf, anyOf, oneOf, if/then/else and local $refs. An object it leaves
// open (additionalProperties or patternProperties with a schema, or no properties at
// all) is open. A schema that does not parse declares nothing and opens nothing: the
// schema check says what is wrong with it.
func schemaKnownValues(raw []byte) *knownValues {
	k := &knownValues{}
	if len(raw) == 0 {
		return k
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return k
	}
	w := &schemaWalk{doc: doc, budget: maxSchemaNodes, active: map[string]bool{}}
	w.into(k, doc)
	return k
}

// maxSchemaNodes bounds the walk of a schema: branches that name the same definition
// twice make it exponential in the schema's size. What is past the bound is open.
const maxSchemaNodes = 20000

// schemaWalk walks one values.schema.json within its budget of nodes; active are the
// $refs being walked, whose recursion (a filter of filters) makes the node open.
type schemaWalk struct {
	doc    any
	budget int
	active map[string]bool
}

func (w *schemaWalk) into(k *knownValues, node any) {
	if w.budget--; w.budget < 0 {
		k.open = true
		return
	}
	s, ok := node.(map[string]any)
	if !ok {
		if b, isBool := node.(bool); isBool && b {
			k.open = true // true allows anything
		}
		return
	}
	if ref, ok := s["$ref"].(string); ok {
		target, found := localRef(w.doc, ref)
		switch {
		case !found, w.active[ref]:
			k.open = true // what it allows cannot be read here, or has no end
		default:
			w.active[ref] = true
			w.into(k, target)
			delete(w.active, ref)
		}
	}
	for _, keyword := range []string{"allOf", "anyOf", "oneOf"} {
		branches, _ := s[keyword].([]any)
		for _, b := range branches {
			w.into(k, b)
		}
	}
	for _, keyword := range []string{"then", "else"} {
		if b, ok := s[keyword]; ok {
			w.into(k, b)
		}
	}
	// dependentSchemas (and draft 7's dependencies) add keys when another is there.
	for _, keyword := range []string{"dependentSchemas", "dependencies"} {
		deps, _ := s[keyword].(map[string]any)
		for _, d := range deps {
			if _, isSchema := d.(map[string]any); isSchema {
				w.into(k, d)
			}
		}
	}
	props, hasProps := s["properties"].(map[string]any)
	for key, p := range props {
		w.into(k.child(key), p)
	}
	if pattern, ok := s["patternProperties"].(map[string]any); ok && len(pattern) > 0 {
		k.open = true
	}
	for _, keyword := range []string{"additionalProperties", "unevaluatedProperties"} {
		switch extra := s[keyword].(type) {
		case bool:
			k.open = k.open || extra && hasProps
		case map[string]any:
			k.open = true
		}
	}
	if !hasProps && declaresObject(s) {
		k.open = true
	}
}

// declaresObject tells whether s is, or may be, an object without saying which keys
// it has: type object, a list of types with object, or no type and no other shape.
func declaresObject(s map[string]any) bool {
	switch t := s["type"].(type) {
	case string:
		return t == "object"
	case []any:
		return slices.Contains(t, any("object"))
	}
	for _, keyword := range []string{"$ref", "allOf", "anyOf", "oneOf", "enum", "const", "items"} {
		if _, ok := s[keyword]; ok {
			return false
		}
	}
	return true
}

// localRef resolves a $ref within doc ("#/definitions/x", "#/$defs/x").
func localRef(doc any, ref string) (any, bool) {
	pointer, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, false
	}
	node := doc
	for _, seg := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		if seg == "" {
			continue
		}
		seg = strings.NewReplacer("~1", "/", "~0", "~").Replace(seg)
		m, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = m[seg]; !ok {
			return nil, false
		}
	}
	return node, true
}

// valuesKnownValues is what a chart's values.yaml declares: its keys, at any depth.
// An empty or null map is open: a place for the user's keys (annotations, labels,
// resources).
func valuesKnownValues(values map[string]any) *knownValues {
	k := &knownValues{}
	for key, v := range values {
		c := k.child(key)
		switch v := v.(type) {
		case map[string]any:
			if len(v) == 0 {
				c.open = true
				continue
			}
			c.merge(valuesKnownValues(v))
		case nil:
			c.open = true
		}
	}
	return k
}

// requestReads is what a composition's own values make the chart read: the values its
// strings read as templates (a chart renders some with tpl in its context:
// extraDeploy, tplvalues), and, when the chart reads the values at computed keys
// (computedKeys), each of its strings that reads as a path. nil when there is none.
func requestReads(values map[string]any, computedKeys bool) *knownValues {
	var extra *knownValues
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if !strings.Contains(v, "{{") && !(computedKeys && valuesPath.MatchString(v)) {
				return
			}
			if extra == nil {
				extra = &knownValues{}
			}
			if strings.Contains(v, "{{") {
				a := &chartReads{shared: extra, literals: map[string]bool{}}
				a.template("values", v, extra)
			} else {
				extra.at(strings.Split(v, ".")).open = true
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(values)
	return extra
}

// chartReads is what the templates of a chart and its subcharts read beyond their
// own top-level templates.
type chartReads struct {
	// shared is what named templates read: their dot is their caller's.
	shared *knownValues
	// literals are the strings of the templates that read as values paths
	// ("auth.rootPassword"), and dynamic tells that a template reads the values at a
	// key it computes: then each of them may be read.
	literals map[string]bool
	dynamic  bool
}

// values adds the reads of the templates a chart's values hold as strings, which its
// templates may render with tpl in the chart's context.
func (a *chartReads) values(values map[string]any, reads *knownValues) {
	for _, v := range values {
		switch v := v.(type) {
		case string:
			if strings.Contains(v, "{{") {
				a.template("values", v, reads)
			}
		case map[string]any:
			a.values(v, reads)
		case []any:
			for _, e := range v {
				a.values(map[string]any{"": e}, reads)
			}
		}
	}
}

// template adds to reads what the template text of name reads of .Values, and to a
// what its named templates read; false when it does not parse (Helm would refuse the
// chart; nothing can be said of what it reads).
func (a *chartReads) template(name, text string, reads *knownValues) bool {
	t := parse.New(name)
	t.Mode = parse.SkipFuncCheck
	trees := map[string]*parse.Tree{}
	if _, err := t.Parse(text, "", "", trees); err != nil {
		return false
	}
	for treeName, tree := range trees {
		if tree == nil || tree.Root == nil {
			continue
		}
		w := &readWalker{reads: reads, chart: a}
		dot := ref{kind: refRoot}
		if treeName != name {
			// A named template: its dot is its caller's.
			w.reads, dot = a.shared, ref{}
		}
		w.list(tree.Root, &scope{dot: dot, dollar: dot})
	}
	return true
}

// refKind says what a template expression evaluates to, as far as the values go.
type refKind int

const (
	refUnknown   refKind = iota // anything: a value not of .Values, or one that cannot be told
	refRoot                     // the chart's top-level context, whose .Values are the values
	refValues                   // the values at path
	refSubcharts                // the root's .Subcharts
	refSubchart                 // .Subcharts.<path[0]>, a subchart's top-level context
)

type ref struct {
	kind refKind
	path []string
}

func (r ref) field(name string) ref {
	switch {
	case r.kind == refValues:
		return ref{kind: refValues, path: append(slices.Clip(r.path), name)}
	case r.kind == refRoot && name == "Subcharts":
		return ref{kind: refSubcharts}
	case r.kind == refSubcharts:
		return ref{kind: refSubchart, path: []string{name}}
	case r.kind == refSubchart:
		if name == "Values" {
			return ref{kind: refValues, path: r.path} // the subchart's values, under its key
		}
		return ref{}
	case name == "Values":
		// .Values of the root, or of a context passed down in a dict (.context.Values,
		// $root.Values): Helm's top-level context is the only thing with Values.
		return ref{kind: refValues}
	}
	return ref{}
}

type scope struct {
	dot, dollar ref
	vars        map[string]ref
}

func (s *scope) with(dot ref) *scope {
	vars := make(map[string]ref, len(s.vars))
	for k, v := range s.vars {
		vars[k] = v
	}
	return &scope{dot: dot, dollar: s.dollar, vars: vars}
}

// readWalker records what a template reads of the values. A read is whole when the
// value itself is used (printed, passed to a function, ranged over, handed to a named
// template): every key below it is read. A path only tested (if, not, eq, hasKey) or
// only walked through (.Values.image.tag reads image only to get to tag) is known
// without what is below it.
type readWalker struct {
	reads *knownValues
	chart *chartReads
}

// valuesPath is what a string of a template must look like to be counted as a values
// path.
var valuesPath = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$`)

// computedKey records that r is read at the keys keys compute: r whole, or, for the
// values themselves, each string of the chart and of the composition's values that
// reads as a path (a key split from a constant, or a value's: index .Values
// .Values.environment). A key built by a function (printf "%sConfig") can be any:
// every value is read.
func (w *readWalker) computedKey(r ref, keys []parse.Node) {
	if r.kind != refValues || len(r.path) > 0 {
		w.record(r, true)
		return
	}
	for _, k := range keys {
		if _, built := k.(*parse.PipeNode); built {
			w.record(r, true)
			return
		}
	}
	w.chart.dynamic = true
}

func (w *readWalker) record(r ref, whole bool) {
	if r.kind == refRoot && whole {
		w.reads.open = true // the whole context as data (toYaml $): every value is read
		return
	}
	if r.kind != refValues {
		return
	}
	n := w.reads.at(r.path)
	n.open = n.open || whole
}

func (w *readWalker) list(l *parse.ListNode, s *scope) {
	if l == nil {
		return
	}
	for _, n := range l.Nodes {
		w.node(n, s)
	}
}

func (w *readWalker) node(n parse.Node, s *scope) {
	switch n := n.(type) {
	case *parse.ActionNode:
		// Printed, or bound to a variable: known, and read whole when printed.
		w.record(w.pipe(n.Pipe, s), len(n.Pipe.Decl) == 0)
	case *parse.IfNode:
		w.record(w.pipe(n.Pipe, s), false)
		w.list(n.List, s)
		w.list(n.ElseList, s)
	case *parse.WithNode:
		r := w.pipe(n.Pipe, s)
		w.record(r, false)
		w.list(n.List, s.with(r))
		w.list(n.ElseList, s)
	case *parse.RangeNode:
		r := w.pipe(n.Pipe, s)
		w.record(r, true)
		inner := s.with(ref{})
		for _, d := range n.Pipe.Decl {
			inner.vars[d.Ident[0]] = ref{}
		}
		w.list(n.List, inner)
		w.list(n.ElseList, s)
	case *parse.TemplateNode:
		if n.Pipe != nil {
			// The named template's reads are its own; values handed to it are read whole.
			if r := w.pipe(n.Pipe, s); r.kind == refValues {
				w.record(r, true)
			}
		}
	case *parse.ListNode:
		w.list(n, s)
	}
}

// pipe evaluates a pipeline, recording what its commands read, and binds its
// variables in s.
func (w *readWalker) pipe(p *parse.PipeNode, s *scope) ref {
	if p == nil {
		return ref{}
	}
	var result ref
	for i, cmd := range p.Cmds {
		var piped *ref
		if i > 0 {
			piped = &result
		}
		result = w.command(cmd, s, piped)
	}
	for _, d := range p.Decl {
		if s.vars == nil {
			s.vars = map[string]ref{}
		}
		if p.IsAssign {
			w.assign(s, d.Ident[0], result)
			continue
		}
		s.vars[d.Ident[0]] = result
	}
	return result
}

// assign records $name = r. It may run in a branch, or in a with or range body, and
// be seen after it: what $name held and what it is given are both read whole, and
// $name holds neither for sure. The values themselves are never read whole so: a
// variable that held them (a walk down a computed path, as Bitnami's getValueFromKey)
// keeps them, and one given them holds them.
func (w *readWalker) assign(s *scope, name string, r ref) {
	old := s.vars[name]
	valuesRoot := func(r ref) bool { return r.kind == refValues && len(r.path) == 0 }
	switch {
	case valuesRoot(old):
		if !valuesRoot(r) {
			w.record(r, true)
		}
	case valuesRoot(r):
		w.record(old, true)
		s.vars[name] = r
	default:
		w.record(old, true)
		w.record(r, true)
		s.vars[name] = ref{}
	}
}

// The functions that hand a context on without reading it as data: what the named
// template or the dict's reader reads of it is found where it is read.
var passingFuncs = map[string]bool{
	"include": true, "tpl": true, "dict": true, "list": true, "set": true, "default": true,
	"required": true, "ternary": true, "coalesce": true, "and": true, "or": true, "fail": true,
}

// The functions that only test their arguments: what they are given is known, and
// what is below it is not read.
var testingFuncs = map[string]bool{
	"not": true, "empty": true, "eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true,
	"kindIs": true, "kindOf": true, "typeIs": true, "typeOf": true, "typeIsLike": true, "len": true,
	"hasKey": true,
}

func (w *readWalker) command(c *parse.CommandNode, s *scope, piped *ref) ref {
	if len(c.Args) == 0 {
		return ref{}
	}
	// Each operand is evaluated once: an operand may be a pipeline of its own, and
	// nested ones evaluated twice would take exponential time.
	refs := make([]ref, len(c.Args))
	for i, a := range c.Args {
		refs[i] = w.arg(a, s)
	}
	fn, isFunc := c.Args[0].(*parse.IdentifierNode)
	if !isFunc {
		if len(c.Args) == 1 && piped == nil {
			return refs[0]
		}
		// A method called with arguments, or given a pipe: what it reads is not known.
		w.uses(refs, piped, "")
		return ref{}
	}
	args, refs := c.Args[1:], refs[1:]
	if piped == nil {
		switch fn.Ident {
		case "index", "get":
			if len(args) == 0 {
				break
			}
			if keys, literal := literalKeys(args[1:]); literal {
				return fields(refs[0], keys) // index $ "Values" "extra" is .Values.extra
			}
			w.computedKey(refs[0], args[1:])
			w.uses(refs[1:], nil, "")
			return ref{}
		case "hasKey":
			if keys, ok := literalKeys(args[1:]); ok && len(args) == 2 && refs[0].kind == refValues {
				w.record(refs[0], false)
				w.record(ref{kind: refValues, path: append(slices.Clip(refs[0].path), keys...)}, false)
				return ref{}
			}
		case "dig":
			// dig "a" "b" default map: the value at a.b of map.
			if len(args) < 3 {
				break
			}
			base := refs[len(refs)-1]
			w.uses(refs[len(refs)-2:len(refs)-1], nil, "")
			if keys, literal := literalKeys(args[:len(args)-2]); literal && base.kind == refValues {
				w.record(ref{kind: refValues, path: append(slices.Clip(base.path), keys...)}, true)
				return ref{}
			}
			w.computedKey(base, args[:len(args)-2])
			return ref{}
		}
	}
	w.uses(refs, piped, fn.Ident)
	return ref{}
}

// uses records refs, and piped, given to the function fn ("": a method, or an
// argument whose use is not known).
func (w *readWalker) uses(refs []ref, piped *ref, fn string) {
	for _, r := range refs {
		w.use(r, fn)
	}
	if piped != nil {
		w.use(*piped, fn)
	}
}

// use records r given to the function fn.
func (w *readWalker) use(r ref, fn string) {
	if r.kind == refRoot && passingFuncs[fn] {
		return
	}
	w.record(r, !testingFuncs[fn])
}

// literalKeys are the string constants of args; false when one is not a constant.
func literalKeys(args []parse.Node) ([]string, bool) {
	keys := make([]string, 0, len(args))
	for _, a := range args {
		str, ok := a.(*parse.StringNode)
		if !ok {
			return nil, false
		}
		keys = append(keys, str.Text)
	}
	return keys, true
}

// arg evaluates one operand.
func (w *readWalker) arg(n parse.Node, s *scope) ref {
	switch n := n.(type) {
	case *parse.DotNode:
		return s.dot
	case *parse.FieldNode:
		return fields(s.dot, n.Ident)
	case *parse.VariableNode:
		base := ref{}
		if n.Ident[0] == "$" {
			base = s.dollar
		} else if v, ok := s.vars[n.Ident[0]]; ok {
			base = v
		}
		return fields(base, n.Ident[1:])
	case *parse.ChainNode:
		return fields(w.arg(n.Node, s), n.Field)
	case *parse.PipeNode:
		return w.pipe(n, s.with(s.dot))
	case *parse.StringNode:
		if valuesPath.MatchString(n.Text) {
			w.chart.literals[n.Text] = true
		}
	}
	return ref{}
}

func fields(r ref, idents []string) ref {
	for _, id := range idents {
		r = r.field(id)
	}
	return r
}
