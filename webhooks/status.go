package webhooks

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/ownership"
)

// StatusPath is where the API server sends the writes of a composition's status
// subresource, which the rules of ValidatePath leave out.
const StatusPath = "/validate-status"

// StatusGuard answers StatusPath: only Compositor writes the status of compositions.
// The status says what was installed and where (its conditions, status.clusters); a
// tenant who may write it could make the controller and everyone reading it believe
// something that is not so. The writers Compositor knows are:
//
//   - the identities Compositor itself runs as (Users: `compositor serve` and `dev`
//     learn theirs at start; every replica of one installation shares it);
//   - the composition controllers it runs, in process (impersonating) or as the
//     generated Deployments: each acts as the ServiceAccount generated for one
//     definition's version, named rbac.ServiceAccountName in Compositor's namespace
//     (Namespace), where no tenant writes. Such a ServiceAccount may write the status
//     of that kind and version only, and only of a composition its definition owns
//     (ownership.For): the definition of the composition's namespace, else the owner.
//     While no definition serves the version (each is being deleted), the controllers
//     of those that still report it may, as each still uninstalls;
//   - while an installation moves its identities to Compositor's namespace, the
//     controller of a version still running as the ServiceAccount it had in its
//     definition's namespace (rbac.LegacyServiceAccountName), for the compositions its
//     definition owns, only while Compositor's own record of moves
//     (rbac.IdentityMovesConfigMap, in Namespace) says that version hands over: so
//     that no write is refused before the new controller serves, and nothing a tenant
//     of that namespace writes can say so.
//
// Any other user, cluster administrators included, is refused with the reason. The
// check reads nothing but the cached definitions of the request's version, so
// controllers' status writes stay cheap; writes to compositions themselves never come
// here.
type StatusGuard struct {
	// Users are the user names Compositor runs as.
	Users []string
	// Definitions reads CompositionDefinitions from a cache indexed by
	// ownership.IndexServed; nil knows no definition, so only Users may write.
	Definitions client.Reader
	// Namespace is Compositor's, where the controllers' ServiceAccounts live
	// (rbac.Options.IdentityNamespace). Empty looks for them in their definitions'
	// namespaces, as before they moved (tests without a chart store).
	Namespace string
	// Records reads Compositor's record of moves, rbac.IdentityMovesConfigMap in
	// Namespace, from the API server: asked only when a former controller's
	// ServiceAccount writes. Nil admits no former controller.
	Records client.Reader
}

var _ admission.Handler = &StatusGuard{}

// Handle implements admission.Handler.
func (g *StatusGuard) Handle(ctx context.Context, ar admission.Request) admission.Response {
	if ar.UID == "" || ar.Kind.Kind == "" || ar.Operation == "" {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("the AdmissionReview has no request, or its request lacks uid, kind or operation"))
	}
	if ar.Kind.Group != vocab.CompositionGroup || ar.SubResource != "status" {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf(
			"compositor's status webhook judges only the status of %s kinds, not %s %s.%s/%s",
			vocab.CompositionGroup, subresourceOf(ar.SubResource), ar.Kind.Kind, ar.Kind.Group, ar.Kind.Version))
	}
	if ar.Operation != admissionv1.Update {
		// The status subresource is only ever updated (a patch is an update at
		// admission); anything else is not a write of the status.
		return admission.Allowed("")
	}
	var servers []corev1alpha1.CompositionDefinition
	if g.Definitions != nil && !slices.Contains(g.Users, ar.UserInfo.Username) {
		list := &corev1alpha1.CompositionDefinitionList{}
		gvk := schema.GroupVersionKind{Group: ar.Kind.Group, Version: ar.Kind.Version, Kind: ar.Kind.Kind}
		// Read only: the cache need not copy the definitions.
		if err := g.Definitions.List(ctx, list, ownership.ServingVersion(gvk), client.UnsafeDisableDeepCopy); err != nil {
			return admission.Errored(http.StatusInternalServerError, fmt.Errorf(
				"cannot tell whether %q may write the status of %s %s/%s: listing CompositionDefinitions: %w",
				ar.UserInfo.Username, ar.Kind.Kind, ar.Namespace, ar.Name, err))
		}
		servers = list.Items
	}
	if mayWriteStatus(ar.UserInfo, g.Users, g.Namespace, ar.Namespace, ar.Kind, ar.Resource, servers, g.moving(ctx)) {
		return admission.Allowed("")
	}
	return statusRefused(ar)
}

// moving tells, from Compositor's record of moves, whether the identity of a version
// of a definition of namespace hands over from the definition's namespace. A record
// that cannot be read says no: the write is refused and retried.
func (g *StatusGuard) moving(ctx context.Context) func(namespace, plural, version string) bool {
	return func(namespace, plural, version string) bool {
		if g.Records == nil || g.Namespace == "" {
			return false
		}
		cm := &corev1.ConfigMap{}
		if err := g.Records.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: rbac.IdentityMovesConfigMap}, cm); err != nil {
			return false
		}
		return cm.Data[rbac.MoveKey(namespace, plural, version)] == rbac.MoveHandover
	}
}

// mayWriteStatus tells whether user may write the status of a composition of kind in
// namespace, written through resource: user is one of Compositor's own users, or the
// ServiceAccount, in identities (Compositor's namespace), of the composition controller
// of the definition among servers that owns the composition (ownership.For), or the one
// that controller had in the definition's namespace while moving says it hands over.
// servers are the definitions whose status reports kind; any others are ignored.
func mayWriteStatus(user authenticationv1.UserInfo, users []string, identities, namespace string, kind metav1.GroupVersionKind,
	resource metav1.GroupVersionResource, servers []corev1alpha1.CompositionDefinition, moving func(namespace, plural, version string) bool) bool {
	if user.Username == "" {
		return false
	}
	if slices.Contains(users, user.Username) {
		return true
	}
	saNamespace, name, err := serviceaccount.SplitUsername(user.Username)
	if err != nil {
		return false
	}
	gvk := schema.GroupVersionKind(kind)
	reports := slices.DeleteFunc(slices.Clone(servers), func(def corev1alpha1.CompositionDefinition) bool {
		return !ownership.Reports(&def, gvk) || def.Status.Resource != resource.Resource
	})
	var writers []corev1alpha1.CompositionDefinition
	if owner := ownership.For(reports, gvk, namespace); owner != nil {
		writers = []corev1alpha1.CompositionDefinition{*owner}
	} else {
		// Being deleted counts while nothing serves: each controller still uninstalls.
		writers = reports
	}
	return slices.ContainsFunc(writers, func(def corev1alpha1.CompositionDefinition) bool {
		if saNamespace == cmp.Or(identities, def.Namespace) && name == rbac.ServiceAccountName(def.Namespace, resource.Resource, resource.Version) {
			return true
		}
		return identities != "" && saNamespace == def.Namespace && name == rbac.LegacyServiceAccountName(resource.Resource, resource.Version) &&
			moving != nil && moving(def.Namespace, resource.Resource, resource.Version)
	})
}

// statusRefused is the denial of a status write by someone other than Compositor.
func statusRefused(ar admission.Request) admission.Response {
	message := fmt.Sprintf("user %q may not write the status of %s %s: only Compositor writes the status of compositions",
		ar.UserInfo.Username, ar.Kind.Kind, namespacedName(ar.Namespace, ar.Name))
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusForbidden,
			Reason:  metav1.StatusReasonForbidden,
			Message: message,
			Details: &metav1.StatusDetails{Name: ar.Name, Group: ar.Kind.Group, Kind: ar.Resource.Resource},
		},
	}}
}

func namespacedName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func subresourceOf(sub string) string {
	if sub == "" {
		return "writes of"
	}
	return "the " + sub + " of"
}
