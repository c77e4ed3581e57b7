package webhooks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
)

// The conversion stash (vocab.AnnotationConversionStash) carries values into the stored object
// that the version a client writes through does not show. Only Compositor's conversion
// may write it: a client could otherwise put any value into the stored object past the
// schema and the policies, which judge what the client wrote. Two guards close that:
// checkConversionData admits a stash only as conversion produced it, and asReadBy has
// the schema and the policies judge the object as it will be stored and read.

var (
	conversionDataPath   = field.NewPath("metadata", "annotations").Key(vocab.AnnotationConversionStash)
	conversionOriginPath = field.NewPath("metadata", "annotations").Key(vocab.AnnotationConversionOrigin)
)

// checkConversionOrigin refuses an origin annotation (vocab.AnnotationConversionOrigin)
// that Compositor's conversion did not write: a create carries none, and an update may
// keep it as it was read or remove it, not change it. Conversion applies it only where
// it changes nothing the writer's version shows, and the webhooks judge the object
// with it applied (asReadBy), so this is defence in depth, as for the stash.
func checkConversionOrigin(_ context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Object == nil || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return nil, nil
	}
	text, ok := metadataString(req.Object, "annotations", vocab.AnnotationConversionOrigin)
	if !ok {
		return nil, nil
	}
	if req.OldObject != nil {
		if old, ok := metadataString(req.OldObject, "annotations", vocab.AnnotationConversionOrigin); ok && old == text {
			return nil, nil
		}
	}
	return field.ErrorList{field.Forbidden(conversionOriginPath,
		"only Compositor's conversion writes this annotation; a write may keep it as it was read or remove it, not add or change it: remove the annotation and set the values in spec")}, nil
}

// checkConversionData refuses a stash that Compositor's conversion did not write. A
// create has no stored object, so no stash either. An update may keep the stash the
// old object was read with (conversion wrote it) or drop entries of it, which drops
// their values; it may not add an entry or change a value.
func checkConversionData(_ context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Object == nil || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return nil, nil
	}
	text, ok := metadataString(req.Object, "annotations", vocab.AnnotationConversionStash)
	if !ok {
		return nil, nil
	}
	written, err := conversion.ParseStash(text)
	if err != nil {
		return field.ErrorList{field.Invalid(conversionDataPath, field.OmitValueType{}, err.Error())}, nil
	}
	var read map[string]any
	if req.OldObject != nil {
		if oldText, ok := metadataString(req.OldObject, "annotations", vocab.AnnotationConversionStash); ok {
			if read, err = conversion.ParseStash(oldText); err != nil {
				read = nil // a stash conversion did not write: nothing of it is kept
			}
		}
	}
	var forged []string
	for pointer, value := range written {
		if old, ok := read[pointer]; !ok || !equality.Semantic.DeepEqual(old, value) {
			forged = append(forged, pointer)
		}
	}
	if len(forged) == 0 {
		return nil, nil
	}
	slices.Sort(forged)
	return field.ErrorList{field.Forbidden(conversionDataPath, fmt.Sprintf(
		"only Compositor's conversion writes this annotation; a write may keep the entries it was read with or remove some, not add or change %s: remove the annotation and set the values in spec",
		strings.Join(forged, ", ")))}, nil
}

// asReadBy returns obj, written through gvk, as the controller of version reader will
// read it once stored: the stash merged back into spec, as conversion to the storage
// version does, then moved out again for reader, as conversion to reader does. Read by
// gvk's own version, an object without a stash is obj itself.
func asReadBy(ctx context.Context, schemas conversion.SchemaSource, gvk schema.GroupVersionKind, obj map[string]any, reader string) (map[string]any, error) {
	if reader == gvk.Version {
		stashed, err := conversion.HasStash(obj)
		if err != nil {
			return nil, err
		}
		if !stashed {
			return obj, nil
		}
	}
	if schemas == nil {
		return nil, errors.New("cannot tell how the object will be stored: no CRD schemas")
	}
	s, err := schemas.Schemas(ctx, gvk.GroupKind(), []string{gvk.Version, reader})
	if err != nil {
		return nil, fmt.Errorf("reading the schemas of %s to judge the object as it will be stored: %w", gvk.GroupKind(), err)
	}
	for _, v := range []string{gvk.Version, reader} {
		if !s.Has(v) || v == s.Hub() {
			return nil, fmt.Errorf("%s has no served version %s", gvk.GroupKind(), v)
		}
	}
	read, err := s.AsReadThrough(obj, gvk.Version, reader)
	if err != nil {
		return nil, err
	}
	// Restored values are json.Numbers; read them back as the controller will.
	return normalizeJSON(read)
}

// foreignValues warns about the values a create or update writes at paths the version
// it writes through does not declare and another served version does (1.1.5's
// service.type written through v2-0-0): that version's clients do not see them, and
// the chart of the version the composition is pinned to may ignore them. An update is
// warned only about the values it changes.
func foreignValues(ctx context.Context, schemas conversion.SchemaSource, req *Request) admission.Warnings {
	if schemas == nil || req.Object == nil || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return nil
	}
	s, err := schemas.Schemas(ctx, schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}, []string{req.Kind.Version})
	if err != nil || !s.Has(req.Kind.Version) {
		return nil // the schema check says what is wrong
	}
	foreign := s.ForeignPaths(req.Kind.Version)
	if len(foreign) == 0 {
		return nil
	}
	spec, _ := req.Object.Object["spec"].(map[string]any)
	var oldSpec map[string]any
	if req.OldObject != nil {
		oldSpec, _ = req.OldObject.Object["spec"].(map[string]any)
	}
	var warnings admission.Warnings
	for _, f := range foreign {
		v, ok := conversion.ValueAt(spec, f.Path)
		if !ok {
			continue
		}
		if old, had := conversion.ValueAt(oldSpec, f.Path); had && equality.Semantic.DeepEqual(old, v) {
			continue
		}
		warnings = append(warnings, fmt.Sprintf("spec.%s is not a value of %s %s (%s has it): clients of %s do not see it",
			strings.Join(f.Path, "."), req.Kind.Kind, req.Kind.Version, strings.Join(f.Versions, ", "), req.Kind.Version))
	}
	return warnings
}
