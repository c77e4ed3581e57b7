// Revisions at admission: who wrote a composition's spec (compositor.dev/spec-author),
// and rollback (compositor.dev/rollback-to), which restores a CompositionRevision's spec
// and pin in the write that asks for it. The write is then judged like any other, by
// the schema and the policies in force now. Revisions are read live and proven with the
// release seal's key: a revision is a record in the tenant's namespace.

package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/ownership"
)

// RevisionVerifier proves a CompositionRevision: nil when it is as Compositor wrote it,
// sealed with the key of def, the definition the composition belongs to, and a
// revision of the composition whose UID is uid. A revision sealed with another
// definition's key fails.
type RevisionVerifier interface {
	VerifyRevision(ctx context.Context, def *corev1alpha1.CompositionDefinition, rev *corev1alpha1.CompositionRevision, uid types.UID) error
}

// RollbackPrevious, as the value of compositor.dev/rollback-to, names the revision
// before the newest one.
const RollbackPrevious = "previous"

var rollbackPath = field.NewPath("metadata", "annotations").Key(vocab.AnnotationRollbackTo)

// isRevision reports whether req writes a CompositionRevision: Compositor's records,
// proven by their seal when they are read, never judged at admission.
func isRevision(kind metav1.GroupVersionKind) bool {
	return kind.Group == corev1alpha1.GroupVersion.Group && kind.Kind == "CompositionRevision"
}

// stampAuthor sets compositor.dev/spec-author of the composition req writes: the
// requesting user when the write creates it or changes its spec, else the value stored,
// whatever the write says. It reports whether the write forged one on a composition
// stored without it, which only a patch that removes the key undoes.
func stampAuthor(req *Request) (forged bool) {
	author := req.UserInfo.Username
	if req.Operation == admissionv1.Update && sameJSON(req.OldObject.Object["spec"], req.Object.Object["spec"]) {
		stored, ok := metadataString(req.OldObject, "annotations", vocab.AnnotationSpecAuthor)
		if !ok {
			_, forged = metadataString(req.Object, "annotations", vocab.AnnotationSpecAuthor)
			if forged {
				annotations := req.Object.GetAnnotations()
				delete(annotations, vocab.AnnotationSpecAuthor)
				req.Object.SetAnnotations(annotations)
			}
			return forged
		}
		author = stored
	}
	annotations := req.Object.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[vocab.AnnotationSpecAuthor] = author
	req.Object.SetAnnotations(annotations)
	return false
}

// mayReplace reports whether defaulting req may do what defaultingPatch does not
// express (see fullPatch): the object names a revision to restore, or an author the
// stored object has not.
func mayReplace(req *Request) bool {
	if _, ok := metadataString(req.Object, "annotations", vocab.AnnotationRollbackTo); ok {
		return true
	}
	if req.Operation != admissionv1.Update {
		return false
	}
	_, written := metadataString(req.Object, "annotations", vocab.AnnotationSpecAuthor)
	_, stored := metadataString(req.OldObject, "annotations", vocab.AnnotationSpecAuthor)
	return written && !stored
}

// rollbackRequested is the revision req asks to restore, and whether it asks: an update
// that adds compositor.dev/rollback-to or changes it. A create asks too, and is refused.
func rollbackRequested(req *Request) (string, bool) {
	to, ok := metadataString(req.Object, "annotations", vocab.AnnotationRollbackTo)
	if !ok {
		return "", false
	}
	if req.Operation == admissionv1.Update {
		if old, had := metadataString(req.OldObject, "annotations", vocab.AnnotationRollbackTo); had && old == to {
			return to, false // stored before the webhook removed it: removed now, nothing restored
		}
	}
	return to, true
}

// rollback restores into req's object the revision its compositor.dev/rollback-to
// names, and removes the annotation. It returns a refusal when the revision cannot be
// restored, and whether it changed the object.
func (m *Mutator) rollback(ctx context.Context, req *Request) (changed bool, refusal *admission.Response) {
	to, asked := rollbackRequested(req)
	if _, present := metadataString(req.Object, "annotations", vocab.AnnotationRollbackTo); present {
		annotations := req.Object.GetAnnotations()
		delete(annotations, vocab.AnnotationRollbackTo)
		req.Object.SetAnnotations(annotations)
		changed = true
	}
	if !asked {
		return changed, nil
	}
	refuse := func(reason string) (bool, *admission.Response) {
		resp := respond(req, field.ErrorList{field.Invalid(rollbackPath, to, reason)}, nil)
		return false, &resp
	}
	if req.Operation != admissionv1.Update {
		return refuse("a composition being created has no revision to restore: set it on an existing composition (compositor rollback KIND/NAME)")
	}
	if m.Revisions == nil || m.Live == nil {
		return refuse("Compositor was started without the release seal, so it restores no revision")
	}
	// The revisions are sealed with the key of the definition the composition belongs
	// to, as pinned now.
	owner, err := cachedOwningDefinition(ctx, m.Definitions, req)
	if err != nil {
		resp := admission.Errored(http.StatusInternalServerError, err)
		return false, &resp
	}
	if owner == nil {
		return refuse(fmt.Sprintf("no CompositionDefinition serves %s to namespace %s, whose key would prove its revisions", req.Kind.Kind, req.Namespace))
	}
	rev, reason, err := m.findRevision(ctx, req, owner, to)
	if err != nil {
		resp := admission.Errored(http.StatusInternalServerError, err)
		return false, &resp
	}
	if reason != "" {
		return refuse(reason)
	}
	gvk := schema.GroupVersionKind(req.Kind)
	gvk.Version = rev.ServedVersion
	def, err := owningDefinition(ctx, m.Definitions, metav1.GroupVersionKind(gvk), req.Namespace, ownership.ServingVersion(gvk))
	if err != nil {
		resp := admission.Errored(http.StatusInternalServerError, err)
		return false, &resp
	}
	if def == nil {
		return refuse(fmt.Sprintf("revision %d ran version %s (chart %s), which no CompositionDefinition serves to namespace %s any more",
			rev.Revision, rev.ServedVersion, rev.ChartVersion, req.Namespace))
	}
	if err := m.restore(ctx, req, rev); err != nil {
		return refuse(fmt.Sprintf("revision %d (version %s) cannot be written through %s: %v", rev.Revision, rev.ServedVersion, req.Kind.Version, err))
	}
	return true, nil
}

// findRevision reads the revision to names among the composition's, live: its number,
// or "previous", the one before the newest. reason, when set, says why there is none
// to restore.
func (m *Mutator) findRevision(ctx context.Context, req *Request, owner *corev1alpha1.CompositionDefinition, to string) (rev *corev1alpha1.CompositionRevision, reason string, err error) {
	uid := req.OldObject.GetUID()
	number := int64(0)
	if to != RollbackPrevious {
		n, err := strconv.ParseInt(to, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Sprintf("must be a revision number (kubectl get compositionrevisions -n %s -l %s=%s) or %q", req.Namespace, vocab.LabelCompositionUID, uid, RollbackPrevious), nil
		}
		number = n
	}
	list := &corev1alpha1.CompositionRevisionList{}
	if err := m.Live.List(ctx, list, client.InNamespace(req.Namespace), client.MatchingLabels{vocab.LabelCompositionUID: string(uid)}); err != nil {
		return nil, "", fmt.Errorf("listing the CompositionRevisions of %s %s/%s: %w", req.Kind.Kind, req.Namespace, req.Name, err)
	}
	var sealed []*corev1alpha1.CompositionRevision
	var refusedN error
	for i := range list.Items {
		item := &list.Items[i]
		if err := m.Revisions.VerifyRevision(ctx, owner, item, uid); err != nil {
			if item.Revision == number && refusedN == nil {
				refusedN = err
			}
			continue
		}
		sealed = append(sealed, item)
	}
	slices.SortFunc(sealed, func(a, b *corev1alpha1.CompositionRevision) int {
		if a.Revision != b.Revision {
			return int(b.Revision - a.Revision)
		}
		return b.Time.Compare(a.Time.Time)
	})
	kept := make([]string, len(sealed))
	for i, r := range sealed {
		kept[i] = strconv.FormatInt(r.Revision, 10)
	}
	keeps := "it keeps no revision"
	if len(kept) > 0 {
		keeps = "it keeps revisions " + strings.Join(kept, ", ")
	}
	if number == 0 {
		if len(sealed) < 2 {
			return nil, fmt.Sprintf("%s %s has no revision before its newest one: %s", req.Kind.Kind, req.Name, keeps), nil
		}
		return sealed[1], "", nil
	}
	for _, r := range sealed {
		if r.Revision == number {
			return r, "", nil
		}
	}
	if refusedN != nil {
		return nil, refusedN.Error() + ": it is never restored", nil
	}
	return nil, fmt.Sprintf("%s %s has no revision %d: %s", req.Kind.Kind, req.Name, number, keeps), nil
}

// restore sets req's spec to rev's and pins it to rev's version. The spec is as
// rev's version reads it; written through another version, it is converted to that one
// as the API server would convert it back (what that version cannot show goes in the
// stash), so that the controller of rev's version reads rev's spec.
func (m *Mutator) restore(ctx context.Context, req *Request, rev *corev1alpha1.CompositionRevision) error {
	spec := map[string]any{}
	if len(rev.Spec.Raw) > 0 {
		if err := utiljson.Unmarshal(rev.Spec.Raw, &spec); err != nil {
			return fmt.Errorf("its spec is not a JSON object: %w", err)
		}
		if spec == nil {
			spec = map[string]any{}
		}
	}
	annotations := req.Object.GetAnnotations()
	// What the stash and origin held belongs to the spec being replaced.
	delete(annotations, vocab.AnnotationConversionStash)
	delete(annotations, vocab.AnnotationConversionOrigin)
	req.Object.SetAnnotations(annotations)
	if rev.ServedVersion != req.Kind.Version {
		written := schema.GroupVersionKind(req.Kind)
		written.Version = rev.ServedVersion
		obj := map[string]any{
			"apiVersion": written.GroupVersion().String(),
			"kind":       written.Kind,
			"metadata":   map[string]any{"name": req.Object.GetName(), "namespace": req.Object.GetNamespace()},
			"spec":       spec,
		}
		read, err := asReadBy(ctx, m.schemas, written, obj, req.Kind.Version)
		if err != nil {
			return err
		}
		spec, _ = read["spec"].(map[string]any)
		converted := (&unstructured.Unstructured{Object: read}).GetAnnotations()
		for _, key := range []string{vocab.AnnotationConversionStash, vocab.AnnotationConversionOrigin} {
			if v, ok := converted[key]; ok {
				annotations[key] = v
			}
		}
		req.Object.SetAnnotations(annotations)
	}
	if spec == nil {
		spec = map[string]any{}
	}
	req.Object.Object["spec"] = spec
	labels := req.Object.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[vocab.LabelCompositionVersion] = rev.ServedVersion
	req.Object.SetLabels(labels)
	return nil
}

// fullPatch is the JSON patch from before to after: for the rare writes whose defaults
// replace the spec or remove a key (a rollback, a forged author), which defaultingPatch
// does not express.
func fullPatch(before, after *unstructured.Unstructured) admission.Response {
	a, err := json.Marshal(before.Object)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	b, err := json.Marshal(after.Object)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	ops, err := jsonpatch.CreatePatch(a, b)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.Patched("", ops...)
}

// rollbackLeftOver refuses a composition stored with compositor.dev/rollback-to: the
// mutating webhook restores the revision and removes it, so one left means the write
// was not restored (another mutating webhook set it afterwards).
func rollbackLeftOver(_ context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Object == nil || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return nil, nil
	}
	to, asked := rollbackRequested(req)
	if !asked {
		return nil, nil
	}
	return field.ErrorList{field.Invalid(rollbackPath, to, "was not restored by Compositor's mutating webhook: set it alone, with compositor rollback KIND/NAME")}, nil
}
