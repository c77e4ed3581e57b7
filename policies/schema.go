package policies

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

// SchemaValidator validates a composition's spec against the JSON Schemas of the chart
// version it is written for.
type SchemaValidator interface {
	// ValidateValues returns every violation of the values Helm would use for spec
	// (the chart's values.yaml coalesced with spec, subcharts under their keys). digest
	// identifies the chart content (the archive digest); empty means "compute one".
	// The error is for trouble other than invalid values: a schema that does not
	// compile (ErrSchemaCompile, ErrRemoteRef) or a chart Helm cannot process.
	ValidateValues(ctx context.Context, ch *chart.Chart, digest string, spec map[string]any) ([]Violation, error)
}

// SchemaValidatorFunc adapts a function to a SchemaValidator.
type SchemaValidatorFunc func(ctx context.Context, ch *chart.Chart, digest string, spec map[string]any) ([]Violation, error)

// ValidateValues calls f.
func (f SchemaValidatorFunc) ValidateValues(ctx context.Context, ch *chart.Chart, digest string, spec map[string]any) ([]Violation, error) {
	return f(ctx, ch, digest, spec)
}

var (
	_ SchemaValidator = SchemaValidatorFunc(nil)
	_ SchemaValidator = (*JSONSchemaValidator)(nil)
)

// DefaultSchemaCacheSize is how many chart versions a JSONSchemaValidator keeps compiled.
const DefaultSchemaCacheSize = 64

// specPath is the root of every field path: the values live in a composition's spec.
var specPath = field.NewPath("spec")

// JSONSchemaValidator validates values as `helm install` does, with the same library
// (jsonschema v6) and the same walk over subcharts, but compiles each chart's schemas
// once per digest and never loads a schema from a URL. It is safe for concurrent use.
type JSONSchemaValidator struct {
	max int
	// processed keeps charts with their dependencies processed.
	processed *processedCharts

	mu      sync.Mutex
	entries map[string]*list.Element // digest → element holding *schemaEntry
	lru     *list.List               // most recently used first
}

// schemaEntry holds the compiled schemas of one chart digest. The once makes
// concurrent first requests for a digest compile it a single time.
type schemaEntry struct {
	digest string
	once   sync.Once
	// bySchema maps a schema's text to its compiled form: an aliased subchart shares
	// its schema text with the chart it aliases.
	bySchema map[string]*jsonschema.Schema
	err      error
}

// NewJSONSchemaValidator returns a validator that keeps the compiled schemas of at most
// maxCharts chart digests (DefaultSchemaCacheSize when maxCharts <= 0).
func NewJSONSchemaValidator(maxCharts int) *JSONSchemaValidator {
	if maxCharts <= 0 {
		maxCharts = DefaultSchemaCacheSize
	}
	return &JSONSchemaValidator{max: maxCharts, processed: newProcessedCharts(), entries: map[string]*list.Element{}, lru: list.New()}
}

// ValidateValues implements SchemaValidator.
func (v *JSONSchemaValidator) ValidateValues(_ context.Context, ch *chart.Chart, digest string, spec map[string]any) ([]Violation, error) {
	if ch == nil {
		return nil, ErrNoChart
	}
	// Processed charts are kept by the digest of the whole content; the schemas' own
	// digest only identifies the schemas.
	contentDigest := digest
	if digest == "" {
		digest = schemaDigest(ch)
	}
	entry := v.entry(digest)
	entry.once.Do(func() { entry.bySchema, entry.err = compileTree(ch) })
	if entry.err != nil {
		return nil, entry.err
	}
	// Helm refuses a subchart's key holding anything but a map before any schema
	// applies; say so plainly, as a violation of the values.
	if vs := subchartKeyViolations(ch, spec, specPath, nil); len(vs) > 0 {
		SortViolations(vs)
		return vs, nil
	}
	processed, vals, err := v.processed.values(ch, contentDigest, spec)
	if err != nil {
		return []Violation{{
			Path:    specPath.String(),
			Message: fmt.Sprintf("Helm cannot merge these values with the chart's values.yaml: %v", err),
			Source:  SourceSchema,
			Action:  v1alpha1.EnforcementDeny,
		}}, nil
	}
	var out []Violation
	if err := validateTree(entry, processed, vals.AsMap(), specPath, nil, &out); err != nil {
		return nil, err
	}
	SortViolations(out)
	return out, nil
}

// Len is the number of chart digests whose schemas are cached.
func (v *JSONSchemaValidator) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lru.Len()
}

// entry returns the cache entry of digest, creating it (uncompiled) when missing and
// evicting the least recently used entry beyond the bound.
func (v *JSONSchemaValidator) entry(digest string) *schemaEntry {
	v.mu.Lock()
	defer v.mu.Unlock()
	if el, ok := v.entries[digest]; ok {
		v.lru.MoveToFront(el)
		return el.Value.(*schemaEntry)
	}
	e := &schemaEntry{digest: digest}
	v.entries[digest] = v.lru.PushFront(e)
	for v.lru.Len() > v.max {
		last := v.lru.Back()
		v.lru.Remove(last)
		delete(v.entries, last.Value.(*schemaEntry).digest)
	}
	return e
}

// schemaDigest identifies a chart by its schemas when the caller knows no archive
// digest (a chart directory given to `compositor validate`).
func schemaDigest(ch *chart.Chart) string {
	h := sha256.New()
	var walk func(c *chart.Chart, path string)
	walk = func(c *chart.Chart, path string) {
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(c.Schema))
		h.Write(c.Schema)
		for _, d := range c.Dependencies() {
			walk(d, path+"/"+d.Name())
		}
	}
	walk(ch, ch.Name())
	return "schemas:" + hex.EncodeToString(h.Sum(nil))
}

// compileTree compiles the schema of the chart and of every subchart, enabled or not:
// which are enabled depends on the values of each request.
func compileTree(ch *chart.Chart) (map[string]*jsonschema.Schema, error) {
	out := map[string]*jsonschema.Schema{}
	var walk func(c *chart.Chart, where string) error
	walk = func(c *chart.Chart, where string) error {
		if len(c.Schema) > 0 {
			if _, done := out[string(c.Schema)]; !done {
				s, err := compileSchema(c.Schema)
				if err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
				out[string(c.Schema)] = s
			}
		}
		for _, d := range c.Dependencies() {
			if err := walk(d, where+" of subchart "+d.Name()); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(ch, "values.schema.json of chart "+ch.Name()); err != nil {
		return nil, err
	}
	return out, nil
}

// schemaURL is where Helm places every chart's schema; relative $refs resolve against it.
const schemaURL = "file:///values.schema.json"

func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSchemaCompile, err)
	}
	c := jsonschema.NewCompiler()
	loader := &refuseLoader{}
	c.UseLoader(loader)
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSchemaCompile, err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		// jsonschema does not wrap its loader's error, so the loader says what it refused.
		if len(loader.refused) > 0 {
			return nil, fmt.Errorf("%w: the schema refers to %s; Compositor never loads schemas by URL: inline it or use a local $defs entry",
				ErrRemoteRef, strings.Join(loader.refused, ", "))
		}
		return nil, fmt.Errorf("%w: %w", ErrSchemaCompile, err)
	}
	return s, nil
}

// refuseLoader is the only loader the compiler gets: every $ref outside the schema
// document itself is refused, and remembered for the error message.
type refuseLoader struct {
	refused []string
}

func (l *refuseLoader) Load(url string) (any, error) {
	l.refused = append(l.refused, url)
	return nil, fmt.Errorf("%w: %s", ErrRemoteRef, url)
}

// validateTree mirrors Helm's ValidateAgainstSchema: the chart's schema over its
// values, then each enabled subchart's schema over the values under its name.
func validateTree(entry *schemaEntry, c *chart.Chart, values map[string]any, at *field.Path, subchart []string, out *[]Violation) error {
	source := SourceSchema
	if len(subchart) > 0 {
		source = SourceSchema + " of subchart " + strings.Join(subchart, ".")
	}
	if len(c.Schema) > 0 {
		s, ok := entry.bySchema[string(c.Schema)]
		if !ok {
			// Only a chart whose digest does not identify its content gets here.
			var err error
			if s, err = compileSchema(c.Schema); err != nil {
				return fmt.Errorf("%s: %w", source, err)
			}
		}
		if err := s.Validate(values); err != nil {
			var ve *jsonschema.ValidationError
			if !errors.As(err, &ve) {
				return fmt.Errorf("%s: %w", source, err)
			}
			for _, l := range explain(ve, values) {
				*out = append(*out, Violation{
					Path:    joinPath(at, l.path),
					Message: l.message,
					Source:  source,
					Action:  v1alpha1.EnforcementDeny,
				})
			}
		}
	}
	for _, sub := range c.Dependencies() {
		raw, ok := values[sub.Name()]
		if !ok || raw == nil {
			continue
		}
		subPath := at.Child(sub.Name())
		subValues, ok := raw.(map[string]any)
		if !ok {
			*out = append(*out, Violation{
				Path:    subPath.String(),
				Message: fmt.Sprintf("must be an object: it holds the values of subchart %s, not %s", sub.Name(), withArticle(jsonType(raw))),
				Source:  source,
				Action:  v1alpha1.EnforcementDeny,
			})
			continue
		}
		if err := validateTree(entry, sub, subValues, subPath, append(subchart, sub.Name()), out); err != nil {
			return err
		}
	}
	return nil
}

// subchartKeyViolations finds keys of subcharts (by name or alias) whose value is
// neither an object nor null.
func subchartKeyViolations(c *chart.Chart, values map[string]any, at *field.Path, subchart []string) []Violation {
	var out []Violation
	source := SourceSchema
	if len(subchart) > 0 {
		source = SourceSchema + " of subchart " + strings.Join(subchart, ".")
	}
	for _, sub := range c.Dependencies() {
		keys := []string{sub.Name()}
		if c.Metadata != nil {
			for _, d := range c.Metadata.Dependencies {
				if d != nil && d.Name == sub.Name() && d.Alias != "" {
					keys = append(keys, d.Alias)
				}
			}
		}
		for _, k := range keys {
			raw, ok := values[k]
			if !ok || raw == nil {
				continue
			}
			m, ok := raw.(map[string]any)
			if !ok {
				out = append(out, Violation{
					Path:    at.Child(k).String(),
					Message: fmt.Sprintf("must be an object: it holds the values of subchart %s, not %s", sub.Name(), withArticle(jsonType(raw))),
					Source:  source,
					Action:  v1alpha1.EnforcementDeny,
				})
				continue
			}
			out = append(out, subchartKeyViolations(sub, m, at.Child(k), append(subchart, k))...)
		}
	}
	return out
}
