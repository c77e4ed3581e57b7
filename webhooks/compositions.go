package webhooks

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/multicluster"
	"github.com/compositor-dev/compositor/ownership"
)

var (
	releaseNamePath = field.NewPath("metadata", "annotations").Key(vocab.AnnotationReleaseName)
	pausedPath      = field.NewPath("metadata", "annotations").Key(vocab.AnnotationPaused)
	placementPath   = field.NewPath("metadata", "annotations").Key(vocab.AnnotationPlacement)
)

// defaultComposition sets the release name, the pause annotation and the version label
// of a composition being created or updated. It never touches spec: Helm merges the
// chart's defaults at render time.
func defaultComposition(ctx context.Context, definitions client.Reader, req *Request) error {
	releaseName := annotationOf(req.Object, vocab.AnnotationReleaseName)
	if releaseName == "" {
		var err error
		if releaseName, err = defaultReleaseName(ctx, definitions, req); err != nil {
			return err
		}
	}
	version := pinnedVersion(req)
	current, err := retainedCreate(ctx, definitions, req)
	if err != nil {
		return err
	}
	if current == "" {
		if current, err = deprecatedMove(ctx, definitions, req); err != nil {
			return err
		}
	}
	if current != "" {
		version = current
		// What was read for the version written through is not the pinned one's: the
		// checks that follow judge the composition against the chart it will run.
		req.definition, req.definitionErr, req.definitionRead = nil, nil, false
	}
	DefaultComposition(req.Object, version, releaseName)
	return nil
}

// retainedCreate is, for a create written through a version that its definition only
// retains (an older chart version, kept for the compositions a rollout has not moved,
// or deprecated: kept served only for its clients), the version the definition serves
// now: a retained version keeps the compositions pinned to it and takes no new one, so
// that its chart can be retired; clients of the old version keep working through
// conversion. "" for any other write, or a create whose pin label names a retained
// version that is not deprecated: a deprecated version runs no composition, so a
// manifest pinned to it (exported with its labels, say) lands on the current version too.
func retainedCreate(ctx context.Context, definitions client.Reader, req *Request) (string, error) {
	if req.Operation != admissionv1.Create || definitions == nil {
		return "", nil
	}
	gvk := schema.GroupVersionKind(req.Kind)
	label := labelOf(req.Object, vocab.LabelCompositionVersion)
	if label != "" {
		gvk.Version = label
	}
	def, err := owningDefinition(ctx, definitions, metav1.GroupVersionKind(gvk), req.Namespace, ownership.ServingVersion(gvk))
	if err != nil || def == nil || !ownership.Retains(def, gvk.Version) {
		return "", err
	}
	if label != "" && !deprecates(def, gvk.Version) {
		return "", nil
	}
	return ownership.Current(def), nil
}

// deprecatedMove is, for an update whose pin label moves the composition to a version
// its definition keeps only for that version's clients (deprecated), the version it is
// pinned to now: a deprecated version runs nothing, so a client that re-applies a
// manifest naming it (a GitOps re-sync of an exported object) moves nothing. "" for
// any other write.
func deprecatedMove(ctx context.Context, definitions client.Reader, req *Request) (string, error) {
	if req.Operation != admissionv1.Update || definitions == nil {
		return "", nil
	}
	written, old := labelOf(req.Object, vocab.LabelCompositionVersion), labelOf(req.OldObject, vocab.LabelCompositionVersion)
	if written == "" || old == "" || written == old {
		return "", nil
	}
	gvk := schema.GroupVersionKind(req.Kind)
	gvk.Version = written
	def, err := owningDefinition(ctx, definitions, metav1.GroupVersionKind(gvk), req.Namespace, ownership.ServingVersion(gvk))
	if err != nil || def == nil || !deprecates(def, written) {
		return "", err
	}
	return old, nil
}

// deprecates tells whether def keeps version served only for its clients: retained,
// with a RemoveAfter.
func deprecates(def *corev1alpha1.CompositionDefinition, version string) bool {
	return deprecatedEntry(def, version) != nil
}

// deprecatedEntry is def's retained entry of version when it is deprecated, else nil.
func deprecatedEntry(def *corev1alpha1.CompositionDefinition, version string) *corev1alpha1.ServedChart {
	for i := range def.Status.Retained {
		r := &def.Status.Retained[i]
		if r.Deprecated() && r.APIVersion == vocab.CompositionGroup+"/"+version {
			return r
		}
	}
	return nil
}

// pinnedVersion is the served version whose chart the composition req writes runs: its
// label krateo.io/composition-version, which the version's controller follows. A
// create pins the version it is written through, unless it names another in the label;
// an update keeps the pin, whatever version it is written through, unless it changes
// the label itself: an explicit move, such as the definition reconciler's when a
// definition moves to a new chart version, or `kubectl label --overwrite`. So which
// version a client reads and writes through never decides which chart runs.
func pinnedVersion(req *Request) string {
	written := labelOf(req.Object, vocab.LabelCompositionVersion)
	old := labelOf(req.OldObject, vocab.LabelCompositionVersion)
	switch {
	case written != "" && written != old:
		return written
	case old != "":
		return old
	default:
		return req.Kind.Version
	}
}

// pinnedKind is req's kind in its pinned version (see pinnedVersion).
func pinnedKind(req *Request) schema.GroupVersionKind {
	gvk := schema.GroupVersionKind(req.Kind)
	gvk.Version = pinnedVersion(req)
	return gvk
}

// labelOf is obj's label key (see metadataString); nil obj has none.
func labelOf(obj *unstructured.Unstructured, key string) string {
	value, _ := metadataString(obj, "labels", key)
	return value
}

// annotationOf is obj's annotation key (see metadataString); nil obj has none.
func annotationOf(obj *unstructured.Unstructured, key string) string {
	value, _ := metadataString(obj, "annotations", key)
	return value
}

// metadataString is metadata.<field>[key] of obj (field is "labels" or "annotations")
// as GetLabels or GetAnnotations would give it, null as "" and nothing at all when a
// value is not a string, read without copying the map as they do: admission reads a few
// keys many times per review. nil obj has nothing.
func metadataString(obj *unstructured.Unstructured, field, key string) (string, bool) {
	if obj == nil {
		return "", false
	}
	metadata, _ := obj.Object["metadata"].(map[string]any)
	values, _ := metadata[field].(map[string]any)
	for _, v := range values {
		if _, ok := v.(string); !ok && v != nil {
			return "", false
		}
	}
	v, ok := values[key]
	s, _ := v.(string)
	return s, ok
}

// DefaultComposition stamps obj as running version's chart: the release name when it
// has none (empty leaves it unset), krateo.io/paused "false" when absent and the version
// label. The webhook and `compositor validate` both default with it.
func DefaultComposition(obj *unstructured.Unstructured, version, releaseName string) {
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	if annotations[vocab.AnnotationReleaseName] == "" && releaseName != "" {
		annotations[vocab.AnnotationReleaseName] = releaseName
	}
	if _, ok := annotations[vocab.AnnotationPaused]; !ok {
		annotations[vocab.AnnotationPaused] = "false"
	}
	obj.SetAnnotations(annotations)

	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[vocab.LabelCompositionVersion] = version
	obj.SetLabels(labels)
}

// defaultingPatch is the JSON patch that DefaultComposition made of an object written
// with annotations and labels: keys added to metadata.annotations and metadata.labels,
// which is all that defaulting changes. Built directly, not by diffing the two
// documents, which cost more than the rest of a mutating review.
func defaultingPatch(annotations, labels map[string]string, defaulted *unstructured.Unstructured) []jsonpatch.JsonPatchOperation {
	var ops []jsonpatch.JsonPatchOperation
	add := func(field string, before, after map[string]string) {
		if len(before) == 0 { // absent, null or empty: write the whole map
			if len(after) > 0 {
				ops = append(ops, jsonpatch.NewOperation("add", "/metadata/"+field, after))
			}
			return
		}
		keys := slices.Sorted(maps.Keys(after))
		for _, k := range keys {
			if old, ok := before[k]; !ok || old != after[k] {
				ops = append(ops, jsonpatch.NewOperation("add", "/metadata/"+field+"/"+escapePointer(k), after[k]))
			}
		}
	}
	add("annotations", annotations, defaulted.GetAnnotations())
	add("labels", labels, defaulted.GetLabels())
	return ops
}

// escapePointer escapes a key for a JSON Pointer (RFC 6901).
func escapePointer(key string) string {
	return pointerEscaper.Replace(key)
}

// pointerEscaper is built once: a Replacer builds its tables on first use, which cost
// a twentieth of what a mutating review allocated when it was built per key.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// defaultReleaseName is the release name an object without one gets: the one it had
// (an update cannot drop it), else its definition's krateo.io/release-name, else its
// own name. It is empty when none is known yet (metadata.generateName on create).
func defaultReleaseName(ctx context.Context, definitions client.Reader, req *Request) (string, error) {
	if req.OldObject != nil {
		if name := annotationOf(req.OldObject, vocab.AnnotationReleaseName); name != "" {
			return name, nil
		}
	}
	def, err := cachedOwningDefinition(ctx, definitions, req)
	if err != nil {
		return "", err
	}
	if def != nil {
		if name := def.Annotations[vocab.AnnotationReleaseName]; name != "" {
			return name, nil
		}
	}
	return req.Object.GetName(), nil
}

// owningDefinition finds the CompositionDefinition a composition of gvk in namespace
// belongs to (see package ownership), or nil when none serves gvk. It may be shared with
// a cache: callers only read it. opts narrow the list; with a cache indexed by
// ownership.IndexServed, pass ownership.ServingVersion(gvk).
func owningDefinition(ctx context.Context, definitions client.Reader, gvk metav1.GroupVersionKind, namespace string, opts ...client.ListOption) (*corev1alpha1.CompositionDefinition, error) {
	list := &corev1alpha1.CompositionDefinitionList{}
	// Only read: a cache need not copy the definitions for each review.
	if err := definitions.List(ctx, list, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		return nil, fmt.Errorf("listing CompositionDefinitions: %w", err)
	}
	return ownership.For(list.Items, schema.GroupVersionKind(gvk), namespace), nil
}

// cachedOwningDefinition is owningDefinition, of the version req's composition is pinned
// to, through the index of a cache, read once per request: defaulting and the policy
// request both need it.
func cachedOwningDefinition(ctx context.Context, cached client.Reader, req *Request) (*corev1alpha1.CompositionDefinition, error) {
	if !req.definitionRead {
		gvk := pinnedKind(req)
		req.definition, req.definitionErr = owningDefinition(ctx, cached, metav1.GroupVersionKind(gvk), req.Namespace, ownership.ServingVersion(gvk))
		req.definitionRead = true
	}
	return req.definition, req.definitionErr
}

// compositionChecks are the validations every composition write goes through. cached
// reads Helm's release records from a cache, names the release names of compositions
// (see uniqueReleaseName).
func compositionChecks(cached client.Reader, names releaseNameUsers, identities string) Chain {
	return Chain{
		identityNamespaceCheck{namespace: identities},
		CheckFunc(checkReleaseName),
		CheckFunc(checkPaused),
		CheckFunc(checkPlacement),
		CheckFunc(checkConversionData),
		CheckFunc(checkConversionOrigin),
		CheckFunc(rollbackLeftOver),
		uniqueReleaseName{reader: cached, names: names},
		CheckFunc(warnPausedDeletion),
		pinnedVersionCheck{definitions: cached},
	}
}

var versionLabelPath = field.NewPath("metadata", "labels").Key(vocab.LabelCompositionVersion)

// pinnedVersionCheck refuses a composition pinned (see pinnedVersion) to a version that
// no definition serves to its namespace, and tells a client that writes through another
// version than the pinned one that its write moved nothing.
type pinnedVersionCheck struct{ definitions client.Reader }

func (c pinnedVersionCheck) Check(ctx context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Object == nil || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return nil, nil
	}
	pinned := pinnedVersion(req)
	if pinned == req.Kind.Version {
		return nil, nil
	}
	def, err := cachedOwningDefinition(ctx, c.definitions, req)
	if err != nil {
		return field.ErrorList{field.InternalError(versionLabelPath, err)}, nil
	}
	if def == nil {
		return field.ErrorList{field.Invalid(versionLabelPath, pinned, fmt.Sprintf(
			"no CompositionDefinition serves %s version %s to namespace %s: name a version one serves (kubectl get compositiondefinitions -A -o wide)",
			req.Kind.Kind, pinned, req.Namespace))}, nil
	}
	if dep := deprecatedEntry(def, req.Kind.Version); dep != nil {
		deprecatedWritesTotal.WithLabelValues(req.Kind.Kind, req.Kind.Version, string(req.Operation)).Inc()
		return nil, admission.Warnings{fmt.Sprintf(
			"%s %s was written through %s/%s, which is deprecated and served only until %s: it runs version %s (chart %s); use apiVersion %s/%s",
			req.Kind.Kind, req.Name, req.Kind.Group, req.Kind.Version, dep.RemoveAfter.UTC().Format(time.RFC3339),
			pinned, chartOfVersion(def, pinned), req.Kind.Group, pinned)}
	}
	if labelOf(req.OldObject, vocab.LabelCompositionVersion) != pinned {
		return nil, nil // moved to pinned, explicitly
	}
	return nil, admission.Warnings{fmt.Sprintf(
		"%s %s runs the chart of version %s (label %s); this write through %s changed only what it wrote. To run the chart of %s: kubectl label -n %s %s %s %s=%s --overwrite",
		req.Kind.Kind, req.Name, pinned, vocab.LabelCompositionVersion, req.Kind.Version,
		req.Kind.Version, req.Namespace, req.Resource.Resource, req.Name, vocab.LabelCompositionVersion, req.Kind.Version)}
}

// chartOfVersion is the chart version def serves version from, as its status lists it.
func chartOfVersion(def *corev1alpha1.CompositionDefinition, version string) string {
	for _, v := range def.Status.Managed.VersionInfo {
		if v.Version == version {
			return v.Chart
		}
	}
	return def.Spec.Chart.Version
}

// checkReleaseName requires a valid Helm release name, which never changes once set.
func checkReleaseName(_ context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Object == nil {
		return nil, nil
	}
	name, ok := metadataString(req.Object, "annotations", vocab.AnnotationReleaseName)
	var errs field.ErrorList
	switch {
	case !ok || name == "":
		errs = append(errs, field.Required(releaseNamePath, "set it explicitly when metadata.generateName is used"))
	default:
		if err := chartutil.ValidateReleaseName(name); err != nil {
			errs = append(errs, field.Invalid(releaseNamePath, name, "must be a valid Helm release name: lower case letters, digits, '-' and '.', at most 53 characters"))
		}
	}
	if req.OldObject != nil {
		if old := annotationOf(req.OldObject, vocab.AnnotationReleaseName); old != "" && name != old {
			errs = append(errs, field.Invalid(releaseNamePath, name, fmt.Sprintf("field is immutable: the Helm release is %q", old)))
		}
	}
	return errs, nil
}

// checkPaused accepts only "true" and "false" as the pause annotation.
func checkPaused(_ context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Object == nil {
		return nil, nil
	}
	value, ok := metadataString(req.Object, "annotations", vocab.AnnotationPaused)
	if !ok || value == "true" || value == "false" {
		return nil, nil
	}
	return field.ErrorList{field.NotSupported(pausedPath, value, []string{"true", "false"})}, nil
}

// checkPlacement requires a placement, when there is one, to be a label selector that
// selects on something: the controller would otherwise have nowhere to install.
func checkPlacement(_ context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Object == nil {
		return nil, nil
	}
	raw, ok := metadataString(req.Object, "annotations", vocab.AnnotationPlacement)
	if !ok {
		return nil, nil
	}
	if _, err := multicluster.ParseSelector(raw); err != nil {
		return field.ErrorList{field.Invalid(placementPath, raw, err.Error())}, nil
	}
	return nil, nil
}

// uniqueReleaseName refuses a release name that another composition of the same kind
// in the same namespace already uses, or that names a Helm release already in the
// namespace (another composition's, of any kind, or one installed with helm): two
// owners would fight over one release, and the controller would upgrade what it did
// not install. It tells the writer early and plainly; the guarantee is the
// controller's, which installs and upgrades only a release labelled with its own
// composition's UID (ReleaseConflict), since two creates admitted at once can never
// see each other whatever admission reads.
type uniqueReleaseName struct {
	// reader reads the metadata of Secrets from a cache (the definition reconciler's
	// informer); names, the release names of a kind's compositions (ReleaseNames). Two
	// lists from the API server on each create cost more than the rest of the review
	// and grew with the namespace.
	reader client.Reader
	names  releaseNameUsers
}

// releaseNameUsers tells which compositions of a resource in a namespace use a release
// name; ReleaseNames does.
type releaseNameUsers interface {
	Users(ctx context.Context, resource schema.GroupVersionResource, namespace, name string) ([]string, error)
}

func (u uniqueReleaseName) Check(ctx context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Object == nil {
		return nil, nil
	}
	name := annotationOf(req.Object, vocab.AnnotationReleaseName)
	if name == "" || (req.OldObject != nil && annotationOf(req.OldObject, vocab.AnnotationReleaseName) == name) {
		return nil, nil
	}
	if u.names != nil {
		users, err := u.names.Users(ctx, schema.GroupVersionResource(req.Resource), req.Namespace, name)
		if err != nil {
			return field.ErrorList{field.InternalError(releaseNamePath, fmt.Errorf("listing %s to check the release name: %w", req.Kind.Kind, err))}, nil
		}
		for _, other := range users {
			if other != req.Object.GetName() {
				return field.ErrorList{field.Invalid(releaseNamePath, name, fmt.Sprintf(
					"already used by %s %s/%s: two compositions cannot share one Helm release", req.Kind.Kind, req.Namespace, other))}, nil
			}
		}
	}
	return u.releaseExists(ctx, req.Namespace, name)
}

// releaseExists refuses name when Helm keeps a release of that name in namespace: its
// records are Secrets labelled owner=helm and name=<release>.
func (u uniqueReleaseName) releaseExists(ctx context.Context, namespace, name string) (field.ErrorList, admission.Warnings) {
	records := &metav1.PartialObjectMetadataList{}
	records.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := u.reader.List(ctx, records, client.InNamespace(namespace), client.MatchingLabels{"owner": "helm", "name": name}, client.UnsafeDisableDeepCopy); err != nil {
		return field.ErrorList{field.InternalError(releaseNamePath, fmt.Errorf("looking for a Helm release %s in namespace %s: %w", name, namespace, err))}, nil
	}
	if len(records.Items) == 0 {
		return nil, nil
	}
	return field.ErrorList{field.Invalid(releaseNamePath, name, fmt.Sprintf(
		"a Helm release %q already exists in namespace %s, and a new composition never takes over a release it did not install: choose another release name",
		name, namespace))}, nil
}

// warnPausedDeletion admits the deletion of a paused composition and says that it waits.
func warnPausedDeletion(_ context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Operation != admissionv1.Delete || req.OldObject == nil {
		return nil, nil
	}
	if annotationOf(req.OldObject, vocab.AnnotationPaused) != "true" {
		return nil, nil
	}
	return nil, admission.Warnings{fmt.Sprintf("%s %s/%s is paused: its deletion waits until %s is \"false\"",
		req.Kind.Kind, req.Namespace, req.OldObject.GetName(), vocab.AnnotationPaused)}
}

// unsupportedKind answers a request for a group Compositor does not serve.
func unsupportedKind(kind metav1.GroupVersionKind) admission.Response {
	return admission.Errored(http.StatusBadRequest, fmt.Errorf(
		"compositor does not admit %s.%s/%s: its webhooks serve only the groups %s, %s and %s",
		kind.Kind, kind.Group, kind.Version, vocab.CompositionGroup, corev1alpha1.GroupVersion.Group, policyGroup))
}
