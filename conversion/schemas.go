package conversion

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var (
	// ErrUnknownKind means no CRD defines the group and kind asked for.
	ErrUnknownKind = errors.New("no CustomResourceDefinition defines this kind")
	// ErrUnconvertibleCRD means a CRD lacks what conversion needs: a storage version,
	// and a structural schema for every other version.
	ErrUnconvertibleCRD = errors.New("the CustomResourceDefinition cannot be converted")
)

// SchemaSource gives conversion the schemas of the CRD that defines a kind.
type SchemaSource interface {
	// Schemas returns the schemas of the CRD of gk. versions are the versions the
	// caller is about to convert between; a source that reads a cache may use them to
	// tell a cache that lags behind the API server from a version that does not exist.
	Schemas(ctx context.Context, gk schema.GroupKind, versions []string) (*Schemas, error)
}

// SchemaSourceFunc adapts a function to a SchemaSource.
type SchemaSourceFunc func(ctx context.Context, gk schema.GroupKind, versions []string) (*Schemas, error)

// Schemas calls f.
func (f SchemaSourceFunc) Schemas(ctx context.Context, gk schema.GroupKind, versions []string) (*Schemas, error) {
	return f(ctx, gk, versions)
}

var _ SchemaSource = SchemaSourceFunc(nil)

// Schemas are the structural schemas of one CRD's versions, as conversion uses them.
// They are immutable and safe to share between goroutines.
type Schemas struct {
	group    string
	kind     string
	hub      string
	served   []string
	versions map[string]*versionSchemas
	declared *declaredConversions

	validators sync.Map // version → validation.SchemaValidator of its spec, built on first use
	foreign    sync.Map // version → []ForeignPath, built on first use
}

// versionSchemas are the two views of one non-storage version's schema.
type versionSchemas struct {
	served bool
	// pruning is the schema the API server prunes this version's objects with.
	pruning *pruner
	// declared is pruning with unknown fields dropped wherever the schema lists
	// properties: pruning with it removes every field this version does not declare,
	// even where it keeps unknown fields. Free-form objects (no properties) still keep
	// everything, because there the version declares "any field".
	declared *pruner
}

// SchemasFromCRD reads the schemas of crd. Its storage version is the hub; every other
// version needs a structural schema. crd is only read, so it may come from a cache.
func SchemasFromCRD(crd *apiextensionsv1.CustomResourceDefinition) (*Schemas, error) {
	s := &Schemas{
		group:    crd.Spec.Group,
		kind:     crd.Spec.Names.Kind,
		versions: map[string]*versionSchemas{},
	}
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if v.Storage {
			s.hub = v.Name
			continue
		}
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return nil, fmt.Errorf("%w: %s version %s has no schema", ErrUnconvertibleCRD, crd.Name, v.Name)
		}
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			return nil, fmt.Errorf("%w: %s version %s: %w", ErrUnconvertibleCRD, crd.Name, v.Name, err)
		}
		pruning, err := structuralschema.NewStructural(internal)
		if err != nil {
			return nil, fmt.Errorf("%w: %s version %s is not structural: %w", ErrUnconvertibleCRD, crd.Name, v.Name, err)
		}
		declared := pruning.DeepCopy()
		closeListedObjects(declared)
		s.versions[v.Name] = &versionSchemas{served: v.Served, pruning: newPruner(pruning), declared: newPruner(declared)}
		if v.Served {
			s.served = append(s.served, v.Name)
		}
	}
	if s.hub == "" {
		return nil, fmt.Errorf("%w: %s has no storage version", ErrUnconvertibleCRD, crd.Name)
	}
	declared, err := readDeclarations(crd)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnconvertibleCRD, crd.Name, err)
	}
	s.declared = declared
	slices.Sort(s.served)
	return s, nil
}

func closeListedObjects(s *structuralschema.Structural) {
	if s == nil {
		return
	}
	if len(s.Properties) > 0 {
		s.XPreserveUnknownFields = false
	}
	for k, p := range s.Properties {
		closeListedObjects(&p)
		s.Properties[k] = p
	}
	closeListedObjects(s.Items)
	if s.AdditionalProperties != nil {
		closeListedObjects(s.AdditionalProperties.Structural)
	}
}

// GroupKind is the group and kind of the CRD.
func (s *Schemas) GroupKind() schema.GroupKind { return schema.GroupKind{Group: s.group, Kind: s.kind} }

// Hub is the storage version.
func (s *Schemas) Hub() string { return s.hub }

// Served lists the served versions other than the hub, in lexical order.
func (s *Schemas) Served() []string { return slices.Clone(s.served) }

// Structural is the schema the API server prunes objects of version with, or nil for
// the hub and for versions the CRD does not have.
func (s *Schemas) Structural(version string) *structuralschema.Structural {
	if v := s.versions[version]; v != nil {
		return v.pruning.schema
	}
	return nil
}

// Has tells whether version is the hub or another version of the CRD.
func (s *Schemas) Has(version string) bool {
	return version == s.hub || s.versions[version] != nil
}

// Versions lists every version of the CRD, the hub included, in lexical order.
func (s *Schemas) Versions() []string {
	out := []string{s.hub}
	for v := range s.versions {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// CRDSchemas is a SchemaSource that reads CRDs through a client and keeps the schemas
// of each CRD until its resourceVersion changes.
type CRDSchemas struct {
	cached client.Reader
	live   client.Reader

	mu    sync.Mutex
	built map[schema.GroupKind]builtSchemas
}

type builtSchemas struct {
	name            string // of the CRD, so that the next lookup is a Get, not a List
	uid             types.UID
	resourceVersion string
	schemas         *Schemas
}

var _ SchemaSource = &CRDSchemas{}

// NewCRDSchemas returns a source reading CRDs through cached, usually a manager's
// cached client. live, which may be nil, reads the API server directly; it is asked
// when cached does not know the kind or a version yet, as happens for a moment after
// the reconciler adds a version.
func NewCRDSchemas(cached, live client.Reader) *CRDSchemas {
	return &CRDSchemas{cached: cached, live: live, built: map[schema.GroupKind]builtSchemas{}}
}

// Schemas implements SchemaSource.
func (c *CRDSchemas) Schemas(ctx context.Context, gk schema.GroupKind, versions []string) (*Schemas, error) {
	s, err := c.lookup(ctx, c.cached, gk)
	if c.live != nil && (errors.Is(err, ErrUnknownKind) || (err == nil && !hasAll(s, versions))) {
		s, err = c.lookup(ctx, c.live, gk)
	}
	return s, err
}

func hasAll(s *Schemas, versions []string) bool {
	for _, v := range versions {
		if !s.Has(v) {
			return false
		}
	}
	return true
}

// lookup finds the CRD of gk through r: by the name it had last time, else among every
// CRD (a thousand definitions make a thousand CRDs, and a review converts often).
func (c *CRDSchemas) lookup(ctx context.Context, r client.Reader, gk schema.GroupKind) (*Schemas, error) {
	c.mu.Lock()
	b, known := c.built[gk]
	c.mu.Unlock()
	if known {
		// The CRDs are only read, so a cache need not copy them: a CRD can be large.
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := r.Get(ctx, client.ObjectKey{Name: b.name}, crd, client.UnsafeDisableDeepCopy)
		if err == nil && crd.Spec.Group == gk.Group && crd.Spec.Names.Kind == gk.Kind {
			return c.schemasOf(crd)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading CustomResourceDefinition %s: %w", b.name, err)
		}
	}
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing CustomResourceDefinitions: %w", err)
	}
	for i := range list.Items {
		crd := &list.Items[i]
		if crd.Spec.Group == gk.Group && crd.Spec.Names.Kind == gk.Kind {
			return c.schemasOf(crd)
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrUnknownKind, gk)
}

func (c *CRDSchemas) schemasOf(crd *apiextensionsv1.CustomResourceDefinition) (*Schemas, error) {
	gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
	c.mu.Lock()
	b, ok := c.built[gk]
	c.mu.Unlock()
	if ok && b.uid == crd.UID && b.resourceVersion == crd.ResourceVersion {
		return b.schemas, nil
	}
	s, err := SchemasFromCRD(crd)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.built[gk] = builtSchemas{name: crd.Name, uid: crd.UID, resourceVersion: crd.ResourceVersion, schemas: s}
	c.mu.Unlock()
	return s, nil
}

// Refused validates the spec of obj, an object of version, against that version's
// schema, as the API server would on a create: what its clients could not write. The
// hub and versions the CRD does not have refuse nothing.
func (s *Schemas) Refused(version string, obj map[string]any) field.ErrorList {
	root := s.Structural(version)
	if root == nil {
		return nil
	}
	v, ok := s.validators.Load(version)
	if !ok {
		spec := root.Properties["spec"]
		v, _ = s.validators.LoadOrStore(version, newSpecValidator(&spec))
	}
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil {
		return nil
	}
	return validation.ValidateCustomResource(field.NewPath("spec"), normalizeNumbers(spec), v.(validation.SchemaValidator))
}

// ForeignPaths are the value paths (dotted, under spec) that other served versions
// declare and version does not, each with the versions that declare it, sorted: a
// value written there through version is one of another chart version's, which
// version's clients do not see.
func (s *Schemas) ForeignPaths(version string) []ForeignPath {
	if v, ok := s.foreign.Load(version); ok {
		return v.([]ForeignPath)
	}
	var out []ForeignPath
	own := s.Structural(version)
	if own != nil {
		ownSpec := own.Properties["spec"]
		byPath := map[string][]string{}
		for _, other := range s.served {
			root := s.Structural(other)
			if other == version || root == nil {
				continue
			}
			spec := root.Properties["spec"]
			for _, p := range leafPaths(&spec, nil) {
				if !declares(&ownSpec, p) {
					byPath[dotted(p)] = append(byPath[dotted(p)], other)
				}
			}
		}
		for _, p := range slices.Sorted(maps.Keys(byPath)) {
			out = append(out, ForeignPath{Path: strings.Split(p, "."), Versions: byPath[p]})
		}
	}
	v, _ := s.foreign.LoadOrStore(version, out)
	return v.([]ForeignPath)
}

// ForeignPath is a value path another served version declares, and those versions.
type ForeignPath struct {
	Path     []string
	Versions []string
}

// leafPaths are the paths through the properties of s to the schemas without
// properties (scalars, arrays, free-form objects and maps).
func leafPaths(s *structuralschema.Structural, at []string) [][]string {
	if len(s.Properties) == 0 {
		if len(at) == 0 {
			return nil
		}
		return [][]string{slices.Clone(at)}
	}
	var out [][]string
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		p := s.Properties[name]
		out = append(out, leafPaths(&p, append(at, name))...)
	}
	return out
}

// declares tells whether s declares the value at path: each key a property of the
// object above it, or under an object without properties (a free-form object or a
// map, which declares any key).
func declares(s *structuralschema.Structural, path []string) bool {
	for _, key := range path {
		p, ok := s.Properties[key]
		if !ok {
			return len(s.Properties) == 0 && (s.XPreserveUnknownFields || s.AdditionalProperties != nil)
		}
		s = &p
	}
	return true
}

// ValueAt is the value at a path of values, if there is one.
func ValueAt(values map[string]any, path []string) (any, bool) { return getAt(values, path) }
