package webhooks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/ownership"
)

// definitionChecks are the validations every CompositionDefinition write goes through.
func definitionChecks(reader client.Reader, authorizer Authorizer) Chain {
	return Chain{declaredConversions{}, keepServedCompositions{reader: reader}, secretAccess{authorizer: authorizer}}
}

// declaredConversions refuses spec.conversions that do not compile, naming the field:
// the reconciler checks them against the chart's schemas later, when it has the chart.
type declaredConversions struct{}

func (declaredConversions) Check(_ context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Operation == admissionv1.Delete || req.Object == nil {
		return nil, nil
	}
	def := &corev1alpha1.CompositionDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(req.Object.Object, def); err != nil {
		return nil, nil // the API server's schema judges the shape
	}
	if _, err := conversion.CompileSteps(def.Spec.Conversions, field.NewPath("spec", "conversions")); err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "conversions"), field.OmitValueType{}, err.Error())}, nil
	}
	return nil, nil
}

// Authorizer creates SubjectAccessReviews; a controller-runtime client is one.
type Authorizer interface {
	Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error
}

// passwordRefPath is the field a definition names its credentials' Secret in.
var passwordRefPath = field.NewPath("spec", "chart", "credentials", "passwordRef")

// Fields of spec.chart that say where a definition's credentials are sent.
var (
	chartURLPath      = field.NewPath("spec", "chart", "url")
	chartRepoPath     = field.NewPath("spec", "chart", "repo")
	chartInsecurePath = field.NewPath("spec", "chart", "insecureSkipVerifyTLS")
	usernamePath      = field.NewPath("spec", "chart", "credentials", "username")
)

// secretAccess refuses a definition whose author may not get the Secret its
// credentials name. Compositor reads that Secret with its own rights and sends it as
// Basic auth to the definition's chart source; without this check, whoever may write a
// definition could send any Secret Compositor can read to a server of their choosing.
// The API server decides, through a SubjectAccessReview with the author's identity.
//
// Credentials stay with the source they were approved for: the check runs on a create
// with credentials, and on every update of a definition with credentials that changes
// where they go or what they are, its chart source (sourceChanges): the URL, the
// repository, the credentials as a whole, or TLS verification turned off. An update
// that changes none of these (a chart version, labels, annotations) is not asked about:
// the credentials keep going to the source someone who may read them approved. A
// version is not a source: a repository's index and an OCI repository are read at the
// approved URL, and the fetcher sends credentials only to that URL's origin.
type secretAccess struct {
	authorizer Authorizer
}

func (s secretAccess) Check(ctx context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Kind.Kind != "CompositionDefinition" || req.Object == nil ||
		(req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return nil, nil
	}
	chart, err := chartOf(req.Object)
	if err != nil {
		// The CRD's schema admits nothing that fails here; should it, nobody can tell
		// where credentials would go, so nothing is admitted.
		return field.ErrorList{field.Invalid(field.NewPath("spec", "chart"), field.OmitValueType{}, err.Error())}, nil
	}
	if chart == nil || chart.Credentials == nil {
		return nil, nil
	}
	ref := chart.Credentials.PasswordRef
	var changed []*field.Path
	if req.Operation == admissionv1.Update {
		old, err := chartOf(req.OldObject)
		if err != nil {
			old = nil // unreadable: everything counts as changed
		}
		if changed = sourceChanges(old, chart); len(changed) == 0 {
			return nil, nil
		}
	}
	if ref.Namespace == "" {
		ref.Namespace = req.Namespace
	}
	at := passwordRefPath
	if len(changed) > 0 {
		at = changed[0]
	}
	if s.authorizer == nil {
		return field.ErrorList{field.InternalError(at, errors.New(
			"Compositor was started without a way to ask the API server who may read Secrets, so definitions with credentials are refused"))}, nil
	}
	allowed, reason, err := s.mayGet(ctx, req.UserInfo, &ref)
	if err != nil {
		return field.ErrorList{field.InternalError(at, fmt.Errorf(
			"asking the API server whether %q may get Secret %s/%s: %w", req.UserInfo.Username, ref.Namespace, ref.Name, err))}, nil
	}
	if allowed {
		return nil, nil
	}
	if len(changed) == 0 || (len(changed) == 1 && changed[0] == passwordRefPath) {
		return field.ErrorList{field.Forbidden(passwordRefPath, fmt.Sprintf(
			"user %q may not get Secret %s/%s (%s): a definition may only name credentials its author can read; ask for get on that Secret, or name one you can read",
			req.UserInfo.Username, ref.Namespace, ref.Name, reason))}, nil
	}
	names := make([]string, len(changed))
	for i, p := range changed {
		names[i] = p.String()
	}
	return field.ErrorList{field.Forbidden(at, fmt.Sprintf(
		"user %q may not get Secret %s/%s (%s): changing %s of a definition with credentials changes where Compositor sends that Secret, so only someone who may read it may change it; ask for get on that Secret, have someone who may read it make the change, or remove spec.chart.credentials in the same change",
		req.UserInfo.Username, ref.Namespace, ref.Name, reason, strings.Join(names, ", ")))}, nil
}

// sourceChanges lists the fields of spec.chart that decide where the credentials of
// updated are sent, or which credentials, and differ from old: the URL, the repository,
// the username, the password's Secret reference (its name, namespace or key), and TLS
// verification turned off. A nil old (no chart, or credentials added) counts as a
// change of the credentials.
func sourceChanges(old, updated *corev1alpha1.ChartInfo) []*field.Path {
	if updated == nil || updated.Credentials == nil {
		return nil // nothing is sent
	}
	if old == nil || old.Credentials == nil {
		return []*field.Path{passwordRefPath}
	}
	var changed []*field.Path
	if old.URL != updated.URL {
		changed = append(changed, chartURLPath)
	}
	if old.Repo != updated.Repo {
		changed = append(changed, chartRepoPath)
	}
	if updated.InsecureSkipVerifyTLS && !old.InsecureSkipVerifyTLS {
		changed = append(changed, chartInsecurePath)
	}
	if old.Credentials.Username != updated.Credentials.Username {
		changed = append(changed, usernamePath)
	}
	if old.Credentials.PasswordRef != updated.Credentials.PasswordRef {
		changed = append(changed, passwordRefPath)
	}
	return changed
}

// mayGet asks the API server whether user may get the Secret ref names, and why not.
func (s secretAccess) mayGet(ctx context.Context, user authenticationv1.UserInfo, ref *corev1alpha1.SecretKeySelector) (bool, string, error) {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user.Username,
		Groups: user.Groups,
		UID:    user.UID,
		Extra:  extraOf(user),
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ref.Namespace, Verb: "get", Version: "v1", Resource: "secrets", Name: ref.Name,
		},
	}}
	if err := s.authorizer.Create(ctx, review); err != nil {
		return false, "", err
	}
	reason := review.Status.Reason
	if reason == "" {
		reason = "no RBAC rule allows it"
	}
	if review.Status.EvaluationError != "" {
		reason += "; " + review.Status.EvaluationError
	}
	return review.Status.Allowed && !review.Status.Denied, reason, nil
}

func extraOf(user authenticationv1.UserInfo) map[string]authorizationv1.ExtraValue {
	if len(user.Extra) == 0 {
		return nil
	}
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	return extra
}

// chartOf returns a definition's spec.chart, or nil when it has none.
func chartOf(obj *unstructured.Unstructured) (*corev1alpha1.ChartInfo, error) {
	if obj == nil {
		return nil, nil
	}
	raw, found, err := unstructured.NestedMap(obj.Object, "spec", "chart")
	if err != nil || !found {
		return nil, err
	}
	chart := &corev1alpha1.ChartInfo{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, chart); err != nil {
		return nil, err
	}
	return chart, nil
}

// keepServedCompositions refuses to delete a definition while compositions of a version
// it serves exist and no other definition serves that version: they would be left
// without a controller. Its versions are the one its status serves and those it
// retains (status.retained) for the compositions still pinned to them.
type keepServedCompositions struct {
	reader client.Reader
}

func (k keepServedCompositions) Check(ctx context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Operation != admissionv1.Delete || req.Kind.Kind != "CompositionDefinition" || req.OldObject == nil {
		return nil, nil
	}
	def := &corev1alpha1.CompositionDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(req.OldObject.Object, def); err != nil {
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("decoding the definition: %w", err))}, nil
	}
	served, ok := ownership.Served(def)
	if !ok {
		return nil, nil // it never served an API
	}
	versions := []schema.GroupVersionKind{served}
	for _, r := range def.Status.Retained {
		if gv, err := schema.ParseGroupVersion(r.APIVersion); err == nil && gv.Group == served.Group && gv.Version != served.Version {
			versions = append(versions, gv.WithKind(served.Kind))
		}
	}

	definitions := &corev1alpha1.CompositionDefinitionList{}
	if err := k.reader.List(ctx, definitions); err != nil {
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("listing definitions: %w", err))}, nil
	}
	versions = slices.DeleteFunc(versions, func(gvk schema.GroupVersionKind) bool {
		return ownership.ServedByAnother(definitions.Items, def, gvk)
	})
	if len(versions) == 0 {
		return nil, nil
	}

	// The compositions are listed through any version the CRD still serves: the
	// definition's own may be gone already (an upgrade in flight).
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k.reader.Get(ctx, client.ObjectKey{Name: def.Status.Resource + "." + served.Group}, crd); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil // no API, no compositions
		}
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("reading the CRD of %s: %w", def.Status.Kind, err))}, nil
	}
	via := ""
	for _, v := range crd.Spec.Versions {
		if v.Served {
			via = v.Name
			break
		}
	}
	if via == "" {
		return nil, nil
	}
	for _, version := range versions {
		compositions := &metav1.PartialObjectMetadataList{}
		compositions.SetGroupVersionKind(schema.GroupVersionKind{Group: served.Group, Version: via, Kind: served.Kind + "List"})
		if err := k.reader.List(ctx, compositions, client.MatchingLabels{vocab.LabelCompositionVersion: version.Version}); err != nil {
			return field.ErrorList{field.InternalError(nil, fmt.Errorf("listing %s compositions: %w", def.Status.Kind, err))}, nil
		}
		if n := len(compositions.Items); n > 0 {
			return field.ErrorList{field.Forbidden(field.NewPath("metadata", "name"), fmt.Sprintf(
				"%d %s of version %s still exist and no other definition serves that version: delete them first (kubectl delete %s.%s.%s --all -A), or move them to another version",
				n, served.Kind, version.Version, def.Status.Resource, version.Version, served.Group))}, nil
		}
	}
	return nil, nil
}
