package policies

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/resource"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
	goyaml "sigs.k8s.io/yaml/goyaml.v2"
	goyaml3 "sigs.k8s.io/yaml/goyaml.v3"
)

// How Compositor reads rendered manifests
//
// The objects the policies judge are the objects Helm's kube client creates. Helm's
// Client.Build reads a manifest with cli-runtime's resource builder
// (Unstructured().Stream().Flatten()): its StreamVisitor splits the stream with
// apimachinery's YAMLOrJSONDecoder; UnstructuredJSONScheme reads any document with a
// non-null "items" key as a list, giving items without apiVersion and kind those of the
// list (kind without "List"); FlattenListVisitor hands on the list's items instead of
// the document (an item that is itself a list makes Build fail). Compositor runs those
// same functions — the same stream decoder over the same text, then a local resource
// builder (which never asks a server and fills in no namespace) over the documents it
// gave, or, for documents that are no list, the builder's own steps on them (buildPlain)
// — so the objects are the same by construction (FuzzParseMatchesHelmBuild compares
// them with Helm's real Client.Build, FuzzDecodeAndBuildPlain the shortcuts with the
// stream decoder and the builder). It adds the template each object comes from, and
// refuses, with an error wrapping ErrRender that names the template and the document,
// what Helm reads in a way a reader of the manifest would not expect:
//
//   - an "items" key in a document whose kind does not end in "List": Helm creates the
//     items, not the object the document names (issue 25's injection through a value);
//     a List whose items are not a list of objects, or hold a list;
//   - a key twice in one mapping, counting keys as Helm's YAML-to-JSON conversion names
//     them (1 and "1" are one key, and which value wins then depends on map order):
//     parsers disagree on which value counts;
//   - a merge key ("<<") placed after an explicit key it also brings: Helm's YAML
//     decoder lets the merged value win, the YAML spec and other decoders the explicit
//     one;
//   - text after the end of a YAML document ("..." or a "---" not at the start of a
//     line, as after a lone carriage return): Helm ignores it, other parsers read more
//     documents; JSON and YAML documents mixed without a "---";
//   - apiVersion, kind or metadata (name, annotations) in another case next to the head:
//     Helm reads the head (hook or not) without regard to case, the API server with it;
//   - a document without kind or apiVersion (Helm would use the cluster's preferred
//     version), or that is not a mapping, or that Helm cannot read at all.
//
// YAML anchors and aliases, and merge keys placed before explicit keys, are kept: Helm
// resolves them and so does this code, with the same decoder, so the judged object is
// the created one. YAML 1.1 scalars (yes, on, y, 0777) are read as Helm reads them, for
// the same reason.

// streamBufferSize is how far the stream decoder looks for a JSON stream, as Helm's
// StreamVisitor calls it.
const streamBufferSize = 4096

// maxReason bounds the decoder's own error text quoted in a refusal.
const maxReason = 300

// manifestDecoder turns rendered manifests into the objects Helm's kube client builds
// from them, numbering documents per template for refusals.
type manifestDecoder struct {
	docs map[string]int
	out  []RenderedObject
}

func newManifestDecoder() *manifestDecoder {
	return &manifestDecoder{docs: map[string]int{}}
}

// part is one piece of a stream, from a line starting with "---" (or the stream's
// start) to the next such line: the stream decoder never reads a document across it.
type part struct {
	text     string
	template string
	raws     [][]byte
	// objects are the non-empty documents of raws decoded as refuseAmbiguous decodes
	// them, in order, once checkPart has accepted them.
	objects []map[string]any
}

// add reads stream as Helm's kube client Build reads it and appends its objects, each
// attributed to templateOf the part it comes from.
func (d *manifestDecoder) add(stream string, templateOf func(part string) string) error {
	texts := splitParts(stream)
	var whole [][]byte
	var wholeErr error
	if len(texts) > 1 {
		whole, wholeErr = decodeDocuments(stream)
	}
	parts := make([]part, 0, len(texts))
	var joined [][]byte
	for _, text := range texts {
		p := part{text: text, template: templateOf(text)}
		raws, err := decodeDocuments(text)
		if err != nil {
			return d.refuse(p.template, 0, "Helm cannot read it: %s", short(err))
		}
		p.raws = raws
		parts = append(parts, p)
		joined = append(joined, raws...)
	}
	if len(texts) == 1 {
		whole = joined
	}
	if wholeErr != nil {
		return d.refuse("", 0, "Helm cannot read them: %s", short(wholeErr))
	}
	jsonStream := utilyaml.IsJSONBuffer([]byte(stream[:min(len(stream), streamBufferSize)]))
	for i := range parts {
		if err := d.checkPart(&parts[i], i == 0 && jsonStream); err != nil {
			return err
		}
	}
	if !sameDocuments(whole, joined) {
		// Not seen with the decoder as it is; if it ever happens, refuse rather than
		// attribute objects to the wrong template.
		return d.refuse("", 0, "their documents cannot be told apart as Helm's kube client reads them")
	}
	for _, p := range parts {
		objs, ok := buildPlain(p.raws, p.objects)
		var err error
		if !ok {
			objs, err = build(p.raws)
		}
		if err != nil {
			return d.refuse(p.template, 0, "Helm cannot build it: %s", short(err))
		}
		for _, obj := range objs {
			d.out = append(d.out, RenderedObject{Template: p.template, Object: obj})
		}
	}
	return nil
}

// decodeDocuments splits stream into documents as Helm's StreamVisitor does: the JSON of
// each, empty for an empty or null one.
func decodeDocuments(stream string) ([][]byte, error) {
	var dec interface{ Decode(any) error }
	if utilyaml.IsJSONBuffer([]byte(stream[:min(len(stream), streamBufferSize)])) {
		dec = utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), streamBufferSize)
	} else {
		// The stream decoder guesses JSON from these same bytes (GuessJSONStream peeks
		// at most streamBufferSize bytes of a reader that gives them all) and, when it
		// guesses not, only ever calls a YAMLToJSONDecoder over a StreamReader, which
		// hands on the stream's bytes as they are, and returns its errors unchanged:
		// that decoder over the stream itself reads the same documents.
		br := lineReaders.Get().(*bufio.Reader)
		br.Reset(strings.NewReader(stream))
		defer func() {
			br.Reset(nil)
			lineReaders.Put(br)
		}()
		// NewYAMLToJSONDecoder keeps br (bufio.NewReader returns a *bufio.Reader of its
		// default size as it is) and copies what it reads into the documents it returns.
		dec = utilyaml.NewYAMLToJSONDecoder(br)
	}
	var out [][]byte
	for {
		ext := runtime.RawExtension{}
		if err := dec.Decode(&ext); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		raw := bytes.TrimSpace(ext.Raw)
		if bytes.Equal(raw, []byte("null")) {
			raw = nil
		}
		out = append(out, raw)
	}
}

func sameDocuments(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// lineReaders are the buffered readers decodeDocuments and yamlDocument read streams
// with, of bufio's default size, the size apimachinery's YAML readers use.
var lineReaders = sync.Pool{New: func() any { return bufio.NewReader(nil) }}

// splitParts cuts stream before every line that starts with "---", where the stream
// decoder ends a document (or fails on a separator followed by text).
func splitParts(stream string) []string {
	var out []string
	start := 0
	for i := 0; i < len(stream); {
		if i > start && strings.HasPrefix(stream[i:], "---") {
			out = append(out, stream[start:i])
			start = i
		}
		nl := strings.IndexByte(stream[i:], '\n')
		if nl < 0 {
			break
		}
		i += nl + 1
	}
	return append(out, stream[start:])
}

// build gives the objects Helm's kube client builds from the documents raws (the JSON
// the stream decoder gave, as its StreamVisitor hands them on): the same resource
// builder (unstructured, flattened, continuing past errors), local so that no server is
// asked and no namespace is filled in.
func build(raws [][]byte) ([]map[string]any, error) {
	var stream bytes.Buffer
	for _, raw := range raws {
		if len(raw) > 0 {
			stream.Write(raw)
			stream.WriteByte('\n')
		}
	}
	if stream.Len() == 0 {
		return nil, nil
	}
	infos, err := resource.NewLocalBuilder().
		Unstructured().
		ContinueOnError().
		Flatten().
		Stream(&stream, "manifest").
		Do().Infos()
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, 0, len(infos))
	for _, info := range infos {
		u, ok := info.Object.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("unexpected %T", info.Object)
		}
		out = append(out, u.Object)
	}
	return out, nil
}

// buildPlain gives what build gives from raws, the documents of a part checkPart
// accepted, when none is a list; objects are the part's objects (refuseAmbiguous). ok is
// false, and build must be asked, when some document is a list or the resource builder
// would fail on one.
//
// For such documents the builder's work, step by step, is what buildPlain does:
//   - build writes each non-empty document (a JSON object: refuseAmbiguous decoded it
//     as one) followed by a newline; the StreamVisitor's decoder sees "{" first and
//     reads the stream with encoding/json, which hands each object back as written
//     (RawExtension keeps the bytes of the value; every document is valid JSON, as
//     sigs.k8s.io/json, which shares encoding/json's scanner, read it), in order;
//     no schema is set, so none is validated;
//   - its decoder, metadataValidatingDecoder over UnstructuredJSONScheme, finds no
//     "items" key (the same case-sensitive decoder as m's) and so decodes the document
//     as an Unstructured whose Object is util/json.Unmarshal (that is
//     sigs.k8s.io/json's UnmarshalCaseSensitivePreserveInts) into a new map: the
//     decoding that gave objects[i], which nothing has modified since; it fails when
//     the GroupVersionKind has no kind (an apiVersion that does not parse), then when
//     the document does not decode into metav1.TypeMeta and ObjectMeta; buildPlain
//     calls the same functions and leaves such a document to build;
//   - being local, the builder maps nothing, so the FlattenListVisitors pass the
//     object on (it is no list: it has no "items"), RetrieveLazy does nothing (the
//     object is there), and FilterNamespace, the Info having no Mapping, removes
//     metadata.namespace when the namespace its accessor reads is empty: buildPlain
//     calls the same accessor;
//   - without an error, ContinueOnError changes nothing and Infos lists the objects
//     in the order of the documents.
func buildPlain(raws [][]byte, objects []map[string]any) (out []map[string]any, ok bool) {
	n := 0
	for _, raw := range raws {
		if len(raw) == 0 {
			continue
		}
		if n >= len(objects) {
			return nil, false
		}
		m := objects[n]
		n++
		if _, list := m["items"]; list {
			return nil, false
		}
		if (&unstructured.Unstructured{Object: m}).GroupVersionKind().Kind == "" {
			return nil, false
		}
		if utiljson.Unmarshal(raw, &metadataOnlyObject{}) != nil {
			return nil, false
		}
	}
	if n != len(objects) {
		return nil, false
	}
	out = make([]map[string]any, 0, n)
	for _, m := range objects {
		u := &unstructured.Unstructured{Object: m}
		if ns, _ := namespaceAccessor.Namespace(u); ns == "" {
			if err := namespaceAccessor.SetNamespace(u, ""); err != nil {
				return nil, false
			}
		}
		out = append(out, m)
	}
	return out, true
}

// metadataOnlyObject is the type cli-runtime's metadataValidatingDecoder decodes a
// document into to check its metadata.
type metadataOnlyObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// namespaceAccessor is the accessor cli-runtime's FilterNamespace reads and clears the
// namespace with.
var namespaceAccessor = meta.NewAccessor()

// checkPart refuses the documents of p whose reading is ambiguous. jsonStream says the
// stream decoder reads p (the stream's start) as JSON first.
func (d *manifestDecoder) checkPart(p *part, jsonStream bool) error {
	var docs [][]byte
	if jsonStream {
		values := leadingJSONValues(p.text)
		if len(values) > 0 {
			for i, v := range values {
				if i >= len(p.raws) || !bytes.Equal(bytes.TrimSpace(v), p.raws[i]) {
					return d.refuse(p.template, 0, "the JSON documents cannot be told apart as Helm reads them")
				}
				if strict, err := kjson.UnmarshalStrict(v, new(any), kjson.DisallowDuplicateFields); err == nil && len(strict) > 0 {
					return d.refuse(p.template, d.docs[p.template]+i+1, "has a duplicate key (%s): parsers disagree on which value counts", short(strict[0]))
				}
			}
			for _, raw := range p.raws[len(values):] {
				if len(raw) > 0 {
					return d.refuse(p.template, 0, "JSON and YAML documents are mixed without a \"---\" between them")
				}
			}
			docs = p.raws
		}
	}
	if docs == nil {
		if len(p.raws) > 1 {
			return d.refuse(p.template, 0, "the documents cannot be told apart as Helm reads them")
		}
		text, err := yamlDocument(p.text, jsonStream)
		if err != nil {
			return d.refuse(p.template, 0, "Helm cannot read it: %s", short(err))
		}
		if len(p.raws) == 1 && len(p.raws[0]) > 0 {
			if err := d.checkText(*p, text, jsonStream); err != nil {
				return err
			}
		}
		docs = p.raws
	}
	for _, raw := range docs {
		if len(raw) == 0 {
			continue
		}
		d.docs[p.template]++
		m, err := d.refuseAmbiguous(p.template, d.docs[p.template], raw)
		if err != nil {
			return err
		}
		p.objects = append(p.objects, m)
	}
	return nil
}

// leadingJSONValues are the JSON values at the start of text, as many as decode one
// after the other: what the stream decoder reads as JSON before it turns to YAML.
func leadingJSONValues(text string) []json.RawMessage {
	dec := json.NewDecoder(strings.NewReader(text))
	var out []json.RawMessage
	for {
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return out
		}
		out = append(out, v)
	}
}

// yamlDocument is the YAML text the stream decoder converts for the one document of
// part: its lines without the separator, as apimachinery's YAMLReader gives them. A JSON
// stream that is not JSON after all is read from its first non-blank line.
func yamlDocument(part string, jsonStream bool) (string, error) {
	if jsonStream {
		part = consumeWhitespace(part)
	}
	br := lineReaders.Get().(*bufio.Reader)
	br.Reset(strings.NewReader(part))
	defer func() {
		br.Reset(nil)
		lineReaders.Put(br)
	}()
	doc, err := utilyaml.NewYAMLReader(br).Read()
	if errors.Is(err, io.EOF) {
		return "", nil
	}
	return string(doc), err
}

// consumeWhitespace drops leading white space up to and including the first newline,
// as the stream decoder does when it turns from JSON to YAML.
func consumeWhitespace(s string) string {
	for i, r := range s {
		if !unicode.IsSpace(r) {
			return s[i:]
		}
		if r == '\n' {
			return s[i+1:]
		}
	}
	return ""
}

// checkText refuses a YAML document whose text other parsers would read differently
// from Helm (see duplicateIn, lateMerge), or that has text after the end of the
// document ("..." or a "---" not at the start of a line, as after a lone carriage
// return), which Helm ignores and other parsers read as more documents. verify checks
// first that text is what the stream decoder read, when yamlDocument had to reproduce
// how it turns from JSON to YAML.
func (d *manifestDecoder) checkText(p part, text string, verify bool) error {
	n := d.docs[p.template] + 1
	dec := goyaml.NewDecoder(strings.NewReader(text))
	var doc goyaml.MapSlice
	if err := dec.Decode(&doc); err != nil {
		return d.refuse(p.template, n, "is not a mapping")
	}
	if key := duplicateIn(doc); key != "" {
		return d.refuse(p.template, n, "has the key %q twice in a mapping: parsers disagree on which value counts", key)
	}
	var next any
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return d.refuse(p.template, n, "has text after the end of its YAML document (after \"...\" or a \"---\" not at the start of a line): Helm ignores it, other parsers read more documents")
	}
	// A merge key is a plain << or has a tag.
	if strings.Contains(text, "<<") || strings.ContainsRune(text, '!') {
		if key, ok := lateMerge(text); !ok && strings.Contains(text, "<<") {
			return d.refuse(p.template, n, "has a merge key (<<) in YAML that parsers read differently")
		} else if key != "" {
			return d.refuse(p.template, n, "has a merge key (<<) after the key %q it also brings: Helm keeps the merged value, the YAML spec the explicit one; put \"<<\" first", key)
		}
	}
	if verify {
		converted, err := yaml.YAMLToJSON([]byte(text))
		if err != nil || !bytes.Equal(bytes.TrimSpace(converted), p.raws[0]) {
			return d.refuse(p.template, n, "cannot be read the way Helm reads it")
		}
	}
	return nil
}

// duplicateIn returns a key that a mapping in v (a document decoded into MapSlices) has
// twice, as Helm's YAML-to-JSON conversion names keys (so 1 and "1" are the same key,
// and the value Helm keeps depends on map order), or "". Keys brought by a merge key
// are not in a MapSlice: an explicit key overrides them.
func duplicateIn(v any) string {
	switch v := v.(type) {
	case goyaml.MapSlice:
		seen := make(map[string]bool, len(v))
		for _, item := range v {
			k := jsonKey(item.Key)
			if seen[k] {
				return k
			}
			seen[k] = true
			if dup := duplicateIn(item.Value); dup != "" {
				return dup
			}
		}
	case []any:
		for _, e := range v {
			if dup := duplicateIn(e); dup != "" {
				return dup
			}
		}
	}
	return ""
}

// jsonKey is the JSON key sigs.k8s.io/yaml's YAMLToJSON makes of a YAML key.
func jsonKey(k any) string {
	switch k := k.(type) {
	case string:
		return k
	case int:
		return strconv.Itoa(k)
	case int64:
		return strconv.FormatInt(k, 10)
	case float64:
		switch s := strconv.FormatFloat(k, 'g', -1, 32); s {
		case "+Inf":
			return ".inf"
		case "-Inf":
			return "-.inf"
		case "NaN":
			return ".nan"
		default:
			return s
		}
	case bool:
		return strconv.FormatBool(k)
	default:
		return fmt.Sprintf("%v", k)
	}
}

// lateMerge returns a key of a mapping in text that a merge key ("<<") placed after it
// also brings, or a mapping's second merge key: Helm's YAML decoder applies a merge
// where it stands, so the merged value overrides an earlier explicit one, while the
// YAML spec (and other decoders) keeps explicit keys. ok is false when text does not
// parse as YAML 1.2.
func lateMerge(text string) (key string, ok bool) {
	var doc goyaml3.Node
	if err := goyaml3.Unmarshal([]byte(text), &doc); err != nil {
		return "", false
	}
	return lateMergeIn(&doc, map[*goyaml3.Node]bool{}), true
}

func lateMergeIn(n *goyaml3.Node, visited map[*goyaml3.Node]bool) string {
	if n == nil || visited[n] {
		return ""
	}
	visited[n] = true
	if n.Kind == goyaml3.MappingNode {
		explicit := map[string]bool{}
		merges := 0
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if isMergeKey(k) {
				if merges++; merges > 1 {
					return "<<"
				}
				for _, m := range mergedKeys(n.Content[i+1], map[*goyaml3.Node]bool{}) {
					if explicit[m] {
						return m
					}
				}
				continue
			}
			explicit[k.Value] = true
		}
	}
	for _, c := range n.Content {
		if key := lateMergeIn(c, visited); key != "" {
			return key
		}
	}
	return lateMergeIn(n.Alias, visited)
}

func isMergeKey(k *goyaml3.Node) bool {
	return k.Kind == goyaml3.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

// mergedKeys are the keys the value of a merge key brings.
func mergedKeys(v *goyaml3.Node, visited map[*goyaml3.Node]bool) []string {
	if v == nil || visited[v] {
		return nil
	}
	visited[v] = true
	var out []string
	switch v.Kind {
	case goyaml3.AliasNode:
		return mergedKeys(v.Alias, visited)
	case goyaml3.SequenceNode:
		for _, c := range v.Content {
			out = append(out, mergedKeys(c, visited)...)
		}
	case goyaml3.MappingNode:
		for i := 0; i+1 < len(v.Content); i += 2 {
			if isMergeKey(v.Content[i]) {
				out = append(out, mergedKeys(v.Content[i+1], visited)...)
			} else {
				out = append(out, v.Content[i].Value)
			}
		}
	}
	return out
}

// headKeys are the keys Helm reads, case-insensitively, to sort a document and to tell a
// hook (releaseutil.SimpleHead); the API server reads them case-sensitively.
var headKeys = []string{"apiVersion", "kind", "metadata"}
var headMetadataKeys = []string{"name", "annotations"}

// refuseAmbiguous refuses document n of template (raw is its JSON) when what Helm creates
// from it is not what a reader of it would expect. Else it returns the document as
// unstructured.UnstructuredJSONScheme decodes an object (the same function into a new
// map), untouched.
func (d *manifestDecoder) refuseAmbiguous(template string, n int, raw []byte) (map[string]any, error) {
	var m map[string]any
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &m); err != nil || m == nil {
		return nil, d.refuse(template, n, "is not a mapping")
	}
	if k := caseVariant(m, headKeys); k != "" {
		return nil, d.refuse(template, n, "has the key %q: Helm reads a document's head without regard to case, the API server with it", k)
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		if k := caseVariant(md, headMetadataKeys); k != "" {
			return nil, d.refuse(template, n, "has the key metadata.%s: Helm reads a document's head without regard to case, the API server with it", k)
		}
	}
	kind, _ := m["kind"].(string)
	if kind == "" {
		return nil, d.refuse(template, n, "has no kind")
	}
	if apiVersion, _ := m["apiVersion"].(string); apiVersion == "" {
		return nil, d.refuse(template, n, "is a %s without an apiVersion: Helm would use whichever version the cluster prefers", kind)
	}
	items, isList := m["items"]
	if !isList {
		return m, nil
	}
	article := "a"
	if strings.ContainsRune("AEIOU", rune(kind[0])) {
		article = "an"
	}
	if !strings.HasSuffix(kind, "List") {
		if list, ok := items.([]any); ok {
			return nil, d.refuse(template, n, "is %s %s with an items list: Helm would create the %d objects in it, not the %s", article, kind, len(list), kind)
		}
		return nil, d.refuse(template, n, "is %s %s with an items key: Helm would read it as a list, not as the %s", article, kind, kind)
	}
	if items == nil {
		return m, nil
	}
	list, ok := items.([]any)
	if !ok {
		return nil, d.refuse(template, n, "is %s %s whose items are not a list", article, kind)
	}
	for i, item := range list {
		obj, ok := item.(map[string]any)
		if !ok {
			return nil, d.refuse(template, n, "is %s %s whose item %d is not an object", article, kind, i+1)
		}
		if _, nested := obj["items"]; nested {
			return nil, d.refuse(template, n, "is %s %s whose item %d has an items key: a list inside a list", article, kind, i+1)
		}
	}
	return m, nil
}

// caseVariant returns a key of m that is one of names in another case, or "".
func caseVariant(m map[string]any, names []string) string {
	for k := range m {
		for _, name := range names {
			if k != name && strings.EqualFold(k, name) {
				return k
			}
		}
	}
	return ""
}

// refuse is the error for document n (0: no document in particular) of template.
func (d *manifestDecoder) refuse(template string, n int, format string, args ...any) error {
	where := "the manifests"
	if template != "" {
		where = "template " + template
	}
	if n > 0 {
		where += fmt.Sprintf(": document %d", n)
	} else {
		where += ":"
	}
	return fmt.Errorf("%w: %s %s; refused", ErrRender, where, fmt.Sprintf(format, args...))
}

// short is err's text on one line, cut to maxReason bytes.
func short(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) <= maxReason {
		return s
	}
	cut := maxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// yamlReason is the YAML decoder's strict error without its "error converting YAML to
// JSON: yaml: unmarshal errors:" preamble.
func yamlReason(err error) string {
	s := short(err)
	if i := strings.LastIndex(s, "errors: "); i >= 0 {
		s = s[i+len("errors: "):]
	}
	return s
}

// ObjectKey identifies an object by its whole content: the SHA-256, in hex, of its
// canonical JSON (encoding/json, map keys sorted) with metadata.namespace left out when
// it is empty or releaseNamespace (Helm's kube client fills an empty namespace with the
// release's) and an emptied metadata left out. The install gate checks that every object
// Helm's kube client builds to create has the key of an object the policies judged. A
// cluster-scoped object written with another namespace keeps it in its key, while Helm
// drops it, so it does not match. obj is not modified.
func ObjectKey(obj map[string]any, releaseNamespace string) string {
	if md, ok := obj["metadata"].(map[string]any); ok {
		ns, has := md["namespace"]
		drop := has && (ns == nil || ns == "" || ns == releaseNamespace)
		if drop || len(md) == 0 {
			copied := make(map[string]any, len(obj))
			for k, v := range obj {
				copied[k] = v
			}
			rest := make(map[string]any, len(md))
			for k, v := range md {
				if k != "namespace" || !drop {
					rest[k] = v
				}
			}
			if len(rest) == 0 {
				delete(copied, "metadata")
			} else {
				copied["metadata"] = rest
			}
			obj = copied
		}
	}
	data, err := json.Marshal(obj)
	if err != nil {
		// Not JSON (a value no decoder produces): a key no JSON object can have.
		data = fmt.Appendf(nil, "unencodable %#v", obj)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
