package crd

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Loss is one constraint of the chart's JSON Schema that the generated CRD does not
// carry (or carries only in part). The validating webhook still enforces it.
type Loss struct {
	// Path is the values path the constraint applies to, dotted: "storage.size",
	// "hosts[]" for every array item, "labels.*" for every map value, keys that need
	// it quoted as `["a.b"]`; "" is the root of the values.
	Path string `json:"path"`
	// Keyword is the JSON Schema keyword concerned, e.g. "oneOf", "$ref", "pattern".
	Keyword string `json:"keyword"`
	// Reason says what the CRD does instead, in a sentence.
	Reason string `json:"reason"`
	// SchemaPath locates the keyword in the chart's files: a JSON pointer fragment
	// ("#/properties/storage/oneOf") into values.schema.json, prefixed by the file for
	// subcharts ("charts/cache/values.schema.json#/properties/maxMemory").
	SchemaPath string `json:"schemaPath,omitempty"`
}

func (l Loss) String() string {
	p := l.Path
	if p == "" {
		p = "(root)"
	}
	return fmt.Sprintf("%s: %s: %s", p, l.Keyword, l.Reason)
}

// Report lists the constraints a translation could not carry into the CRD, sorted by
// Path, Keyword, SchemaPath and Reason, without duplicates, so it is stable from run
// to run and diffs well.
type Report []Loss

func (r Report) String() string {
	var b strings.Builder
	for _, l := range r {
		b.WriteString(l.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func (r Report) normalize() Report {
	slices.SortFunc(r, func(a, b Loss) int {
		return cmp.Or(
			cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Keyword, b.Keyword),
			cmp.Compare(a.SchemaPath, b.SchemaPath),
			cmp.Compare(a.Reason, b.Reason),
		)
	})
	return slices.Compact(r)
}

// Values paths.

func childPath(parent, key string) string {
	if key == "" || strings.ContainsAny(key, `.[]*"' `) {
		return parent + "[" + strconv.Quote(key) + "]"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func itemsPath(parent string) string { return parent + "[]" }

func mapValuesPath(parent string) string {
	if parent == "" {
		return "*"
	}
	return parent + ".*"
}

// JSON pointers.

func pointerChild(ptr string, tokens ...string) string {
	for _, t := range tokens {
		t = strings.ReplaceAll(t, "~", "~0")
		t = strings.ReplaceAll(t, "/", "~1")
		ptr += "/" + t
	}
	return ptr
}
