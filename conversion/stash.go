package conversion

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/compositor-dev/compositor/api/vocab"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
)

var (
	// ErrUnknownVersion means a version the CRD does not have.
	ErrUnknownVersion = errors.New("unknown version")
	// ErrMalformedObject means an object that is not a JSON object, or whose metadata
	// or annotations are not objects.
	ErrMalformedObject = errors.New("malformed object")
	// ErrBadStash means the StashAnnotation of an object written through a served
	// version cannot be read, or points outside spec and status.
	ErrBadStash = errors.New("unreadable " + vocab.AnnotationConversionStash + " annotation")
	// ErrStashTooLarge means the values a version lacks do not fit in the object's
	// annotations.
	ErrStashTooLarge = errors.New("the values the target version lacks do not fit in the annotations")
)

// stashedRoots are the parts of an object whose values conversion may stash: the rest
// is metadata, which conversion must leave alone.
var stashedRoots = []string{"spec", "status"}

// Convert converts obj, an object of version from as Decode returns it, to version to,
// in place. Served → hub restores the stash; hub → served stashes what the served
// version does not have; served → served goes through the hub. Both versions must be
// versions of the CRD (see Has).
func (s *Schemas) Convert(obj map[string]any, from, to string) error {
	if err := s.checkVersion(from); err != nil {
		return err
	}
	if err := s.checkVersion(to); err != nil {
		return err
	}
	if from != to {
		if from != s.hub {
			if err := restore(obj); err != nil {
				return err
			}
			if pinned := s.pinned(obj); pinned != "" {
				if err := s.declared.reshape(obj, from, pinned); err != nil {
					return err
				}
			}
		}
		if to != s.hub {
			if pinned := s.pinned(obj); pinned != "" {
				if err := s.declared.reshape(obj, pinned, to); err != nil {
					return err
				}
			}
			if err := s.stash(obj, to); err != nil {
				return err
			}
		}
	}
	obj["apiVersion"] = s.group + "/" + to
	return nil
}

// pinned is the served version obj is pinned to, whose shape its stored values have,
// or "" when its label names none of the CRD's versions.
func (s *Schemas) pinned(obj map[string]any) string {
	metadata, _ := obj["metadata"].(map[string]any)
	labels, _ := metadata["labels"].(map[string]any)
	version, _ := labels[vocab.LabelCompositionVersion].(string)
	if version == s.hub || s.versions[version] == nil {
		return ""
	}
	return version
}

func (s *Schemas) checkVersion(version string) error {
	if !s.Has(version) {
		return fmt.Errorf("%w %s of %s (it has %s)", ErrUnknownVersion, version, s.GroupKind(), strings.Join(s.Versions(), ", "))
	}
	return nil
}

// AsStored returns obj, an object of version as Decode returns it, as a client of
// version reads it back once it is stored: converted to the hub, which merges its stash
// back into spec and status, then to version again, which moves out what version does
// not have. obj is not modified.
func (s *Schemas) AsStored(obj map[string]any, version string) (map[string]any, error) {
	return s.AsReadThrough(obj, version, version)
}

// AsReadThrough returns obj, an object written through version written as Decode
// returns it, as a client of version reader reads it once it is stored: converted to the
// hub, then to reader. obj is not modified.
func (s *Schemas) AsReadThrough(obj map[string]any, written, reader string) (map[string]any, error) {
	stored := deepCopyJSON(obj).(map[string]any)
	if err := s.Convert(stored, written, s.hub); err != nil {
		return nil, err
	}
	if err := s.Convert(stored, s.hub, reader); err != nil {
		return nil, err
	}
	return stored, nil
}

// HasStash tells whether obj, a decoded object, has a StashAnnotation.
func HasStash(obj map[string]any) (bool, error) {
	annotations, err := annotationsOf(obj)
	if err != nil {
		return false, err
	}
	_, ok := annotations[vocab.AnnotationConversionStash]
	return ok, nil
}

// ParseStash decodes the text of a StashAnnotation as conversion reads it, numbers as
// json.Numbers, without checking its pointers.
func ParseStash(text string) (map[string]any, error) {
	stash := map[string]any{}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&stash); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadStash, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrBadStash)
	}
	return stash, nil
}

// restore merges the stash of obj back into spec and status and removes the
// annotation. A value the client set, or a container the client removed or replaced,
// wins over the stash: the client wrote through a served version after reading the
// stash, so its object is newer.
func restore(obj map[string]any) error {
	annotations, err := annotationsOf(obj)
	if err != nil {
		return err
	}
	raw, ok := annotations[vocab.AnnotationConversionStash]
	if !ok {
		return nil
	}
	text, ok := raw.(string)
	if !ok {
		return fmt.Errorf("%w: it is %s, not a string", ErrBadStash, jsonKind(raw))
	}
	stash, err := ParseStash(text)
	if err != nil {
		return err
	}
	// Parents before children, so a hand-written stash with both restores both.
	pointers := make([]string, 0, len(stash))
	for p := range stash {
		pointers = append(pointers, p)
	}
	slices.Sort(pointers)
	for _, p := range pointers {
		tokens, err := parsePointer(p)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadStash, err)
		}
		if len(tokens) < 2 || !slices.Contains(stashedRoots, tokens[0]) {
			return fmt.Errorf("%w: %q is not inside spec or status", ErrBadStash, p)
		}
		setIfAbsent(obj, tokens, stash[p])
	}
	removeAnnotation(obj, annotations)
	return nil
}

// stash moves out of spec and status every value that version to would not show: what
// its schema prunes, and the fields it does not declare where another served version
// does (fields of other chart versions, which it would otherwise show as unknown
// fields). Fields no version declares stay: every version shows them alike.
func (s *Schemas) stash(obj map[string]any, to string) error {
	annotations, err := annotationsOf(obj)
	if err != nil {
		return err
	}
	// A stash on a hub object is stale: the hub keeps every value itself.
	if _, ok := annotations[vocab.AnnotationConversionStash]; ok {
		removeAnnotation(obj, annotations)
	}

	target := s.versions[to]
	view := map[string]any{}
	for _, k := range stashedRoots {
		if v, ok := obj[k]; ok {
			view[k] = v
		}
	}
	undeclared := target.declared.prunedBy(view)
	if len(undeclared) == 0 {
		return nil
	}
	others := map[string]map[string]bool{}
	var pruned map[string]bool // what the API server would prune, when needed
	var moved []prunedField
	for _, f := range undeclared {
		if !s.declaredElsewhere(view, f.tokens, to, others) {
			if pruned == nil {
				pruned = pointerSet(target.pruning.prunedBy(view))
			}
			if !pruned[f.pointer] {
				continue
			}
		}
		moved = append(moved, f)
	}
	if len(moved) == 0 {
		return nil
	}
	stash := make(map[string]any, len(moved))
	for _, f := range moved {
		stash[f.pointer] = f.value
		deleteAt(obj, f.tokens)
	}
	encoded, err := compactJSON(stash)
	if err != nil {
		return fmt.Errorf("encoding the %s annotation: %w", vocab.AnnotationConversionStash, err)
	}
	annotations, err = annotationsOf(obj)
	if err != nil {
		return err
	}
	if annotations == nil {
		annotations = map[string]any{}
		metadata, _ := obj["metadata"].(map[string]any)
		if metadata == nil {
			metadata = map[string]any{}
			obj["metadata"] = metadata
		}
		metadata["annotations"] = annotations
	}
	annotations[vocab.AnnotationConversionStash] = encoded
	return checkAnnotationsSize(annotations, to)
}

// declaredElsewhere tells whether a served version other than to keeps the field at
// tokens when it drops every field it does not declare. others caches what each
// version drops from view.
func (s *Schemas) declaredElsewhere(view map[string]any, tokens []string, to string, others map[string]map[string]bool) bool {
	for _, name := range s.served {
		if name == to {
			continue
		}
		dropped, ok := others[name]
		if !ok {
			dropped = pointerSet(s.versions[name].declared.prunedBy(view))
			others[name] = dropped
		}
		if !droppedAtOrAbove(dropped, tokens) {
			return true
		}
	}
	return false
}

func droppedAtOrAbove(dropped map[string]bool, tokens []string) bool {
	var b strings.Builder
	for _, tok := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointerToken(tok))
		if dropped[b.String()] {
			return true
		}
	}
	return false
}

// annotationsOf returns metadata.annotations of obj, nil when there are none.
func annotationsOf(obj map[string]any) (map[string]any, error) {
	metadata, ok := obj["metadata"]
	if !ok || metadata == nil {
		return nil, nil
	}
	m, ok := metadata.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: metadata is %s", ErrMalformedObject, jsonKind(metadata))
	}
	annotations, ok := m["annotations"]
	if !ok || annotations == nil {
		return nil, nil
	}
	a, ok := annotations.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: metadata.annotations is %s", ErrMalformedObject, jsonKind(annotations))
	}
	return a, nil
}

// removeAnnotation removes the stash, and the annotations with it when it was the only
// one, so a round trip gives back the object it started from.
func removeAnnotation(obj map[string]any, annotations map[string]any) {
	delete(annotations, vocab.AnnotationConversionStash)
	if len(annotations) == 0 {
		delete(obj["metadata"].(map[string]any), "annotations")
	}
}

func checkAnnotationsSize(annotations map[string]any, version string) error {
	total := 0
	for k, v := range annotations {
		s, _ := v.(string)
		total += len(k) + len(s)
	}
	if total > apivalidation.TotalAnnotationSizeLimitB {
		return fmt.Errorf("%w: version %s lacks %d bytes of values, and annotations may hold %d bytes in all; read the object through a newer version",
			ErrStashTooLarge, version, len(annotations[vocab.AnnotationConversionStash].(string)), apivalidation.TotalAnnotationSizeLimitB)
	}
	return nil
}

// compactJSON encodes v without spaces or HTML escaping; maps come out with sorted keys,
// so equal stashes give equal annotations.
func compactJSON(v any) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}
