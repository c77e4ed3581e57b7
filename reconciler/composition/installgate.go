package composition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/postrender"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies"
)

// LabelCompositionUID is the Helm release label that marks a release as installed by
// Compositor for one composition: its UID. A release without it, or with another UID,
// belongs to someone else and is never upgraded or uninstalled.
const LabelCompositionUID = "compositor.dev/composition-uid"

// AnnotationAllowClusterScoped, on a CompositionDefinition, lists the cluster-scoped
// kinds its compositions may create, as Kind.group (Kind alone for the core group),
// separated by commas: e.g. "IngressClass.networking.k8s.io". Every other
// cluster-scoped kind is refused, and the kinds of neverInstalled always are.
const AnnotationAllowClusterScoped = "compositor.dev/allow-cluster-scoped"

// Reasons of the install gate's refusals: nothing was applied.
const (
	ReasonInvalidValues          = "InvalidValues"
	ReasonPolicyDenied           = "PolicyDenied"
	ReasonObjectOutsideNamespace = "ObjectOutsideNamespace"
	ReasonForbiddenObject        = "ForbiddenObject"
	ReasonReleaseConflict        = "ReleaseConflict"
)

// GateError is a refusal to install: Reason is the condition reason, Message names
// what was refused and why. Nothing of the release was applied.
type GateError struct {
	Reason  string
	Message string
}

func (e *GateError) Error() string { return e.Message }

// asGateError finds a GateError in err's chain (Helm wraps what a post-renderer returns).
func asGateError(err error) (*GateError, bool) {
	var gate *GateError
	ok := errors.As(err, &gate)
	return gate, ok
}

// neverInstalled are the kinds a composition never creates, whatever its definition
// allows: each one would let a chart reach beyond its namespace or take over the
// cluster (RBAC, admission, API serving, scheduling, storage, nodes, identities).
var neverInstalled = map[schema.GroupKind]bool{
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:                                true,
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                       true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}:       true,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 true,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:                        true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                                      true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                               true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      true,
	{Group: "", Kind: "Namespace"}:                                                    true,
	{Group: "", Kind: "PersistentVolume"}:                                             true,
	{Group: "", Kind: "Node"}:                                                         true,
}

// serviceAccountTokenType is the Secret type for which the API server mints a token of
// the ServiceAccount the Secret names.
const serviceAccountTokenType = "kubernetes.io/service-account-token"

// installGate is the Helm post-renderer that sees the exact manifests Helm is about to
// apply and refuses them, before anything is applied, when one of them leaves the
// composition's namespace, is a kind compositions never create, or a rendered policy
// denies them.
type installGate struct {
	// ctx bounds the policies' evaluation: a PostRenderer's Run takes no context.
	ctx context.Context
	// namespace is the composition's: every object stays in it.
	namespace string
	// mapper tells namespaced kinds from cluster-scoped ones.
	mapper meta.RESTMapper
	// clusterScoped are the cluster-scoped kinds the definition allows.
	clusterScoped map[schema.GroupKind]bool
	// policies evaluates the policies in force; nil evaluates none.
	policies *policies.Engine
	// request describes the composition; Rendered is set to the manifests.
	request *policies.Request
	// refusal is the gate's last refusal: Helm reports some errors (those of hooks) as
	// text only, so the reconciler reads the refusal here.
	refusal *GateError
}

var _ postrender.PostRenderer = (*installGate)(nil)

// Run returns the manifests unchanged, or a GateError.
func (g *installGate) Run(manifests *bytes.Buffer) (*bytes.Buffer, error) {
	objs, err := policies.ParseManifests(manifests.String())
	if err != nil {
		return nil, fmt.Errorf("reading the rendered manifests: %w", err)
	}
	if err := g.checkObjects(objs); err != nil {
		return nil, err
	}
	if err := g.checkPolicies(objs); err != nil {
		return nil, err
	}
	return manifests, nil
}

// checkObjects refuses the objects that leave the namespace or that compositions never
// create, naming every one of them; the first refusal's reason is the condition's.
func (g *installGate) checkObjects(objs []policies.RenderedObject) error {
	var refusals []*GateError
	for _, obj := range flatten(objs) {
		if refused := g.checkObject(obj); refused != nil {
			refusals = append(refusals, refused)
		}
	}
	if len(refusals) == 0 {
		return nil
	}
	messages := make([]string, len(refusals))
	for i, r := range refusals {
		messages[i] = r.Message
	}
	g.refusal = &GateError{Reason: refusals[0].Reason, Message: "nothing was installed: " + strings.Join(messages, "; ")}
	return g.refusal
}

// flatten expands List objects into their items: Helm applies the items one by one.
func flatten(objs []policies.RenderedObject) []policies.RenderedObject {
	var out []policies.RenderedObject
	for _, obj := range objs {
		items, isList := obj.Object["items"].([]any)
		if kind, _ := obj.Object["kind"].(string); !isList || !strings.HasSuffix(kind, "List") {
			out = append(out, obj)
			continue
		}
		for _, item := range items {
			if m, ok := item.(map[string]any); ok {
				out = append(out, flatten([]policies.RenderedObject{{Template: obj.Template, Object: m}})...)
			}
		}
	}
	return out
}

// checkObject returns why obj may not be installed, or nil.
func (g *installGate) checkObject(obj policies.RenderedObject) *GateError {
	apiVersion, _ := obj.Object["apiVersion"].(string)
	kind, _ := obj.Object["kind"].(string)
	md, _ := obj.Object["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	namespace, _ := md["namespace"].(string)
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return &GateError{Reason: ReasonForbiddenObject, Message: fmt.Sprintf("%s/%s has an unreadable apiVersion %q", kind, name, apiVersion)}
	}
	gk := gv.WithKind(kind).GroupKind()
	where := fmt.Sprintf("%s %s/%s (template %s)", apiVersion, kind, name, obj.Template)
	if obj.Template == "" {
		where = fmt.Sprintf("%s %s/%s (a Helm hook)", apiVersion, kind, name)
	}
	switch {
	case neverInstalled[gk]:
		return &GateError{Reason: ReasonForbiddenObject, Message: fmt.Sprintf("%s: compositions never create a %s", where, kind)}
	case gk == (schema.GroupKind{Kind: "Secret"}) && secretType(obj.Object) == serviceAccountTokenType:
		return &GateError{Reason: ReasonForbiddenObject, Message: fmt.Sprintf("%s: a Secret of type %s would mint a ServiceAccount token", where, serviceAccountTokenType)}
	}
	mapping, err := g.mapper.RESTMapping(gk, gv.Version)
	if err != nil {
		return &GateError{Reason: ReasonForbiddenObject, Message: fmt.Sprintf("%s: the API server does not serve this kind, so its scope cannot be checked: %v", where, err)}
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		if g.clusterScoped[gk] {
			return nil
		}
		return &GateError{Reason: ReasonForbiddenObject, Message: fmt.Sprintf(
			"%s: %s is cluster-scoped, and compositions create only namespaced objects unless their definition lists the kind in annotation %s (%s)",
			where, kind, AnnotationAllowClusterScoped, gk.String())}
	}
	if namespace != "" && namespace != g.namespace {
		return &GateError{Reason: ReasonObjectOutsideNamespace, Message: fmt.Sprintf("%s: rendered into namespace %s, outside the composition's namespace %s", where, namespace, g.namespace)}
	}
	return nil
}

func secretType(obj map[string]any) string {
	t, _ := obj["type"].(string)
	return t
}

// checkPolicies runs the policies in force on the composition, the rendered ones on
// exactly the manifests about to be applied, and refuses on any deny.
func (g *installGate) checkPolicies(objs []policies.RenderedObject) error {
	if g.policies == nil || g.request == nil {
		return nil
	}
	req := *g.request
	req.Rendered = objs
	if req.Rendered == nil {
		req.Rendered = []policies.RenderedObject{}
	}
	violations, err := g.policies.Evaluate(g.ctx, &req)
	if err != nil {
		g.refusal = &GateError{Reason: ReasonPolicyDenied, Message: fmt.Sprintf("nothing was installed: the policies could not be evaluated: %v", err)}
		return g.refusal
	}
	decision := policies.Decision{Violations: violations}
	if !decision.Denied() {
		return nil
	}
	g.refusal = &GateError{Reason: ReasonPolicyDenied, Message: "nothing was installed: " + denials(violations)}
	return g.refusal
}

// denials lists the deny violations, each naming its policy and object.
func denials(violations []policies.Violation) string {
	var lines []string
	for _, v := range violations {
		if v.Action == "" || v.Action == policyv1alpha1.EnforcementDeny {
			lines = append(lines, v.String())
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "; ")
}

// checkOwner refuses a release that Compositor did not install for this composition:
// one without the composition-UID label, or with another composition's.
func checkOwner(last *release.Release, namespace, name string, uid types.UID) error {
	if last == nil {
		return nil
	}
	switch owner := last.Labels[LabelCompositionUID]; owner {
	case string(uid):
		return nil
	case "":
		chart := "unknown chart"
		if last.Chart != nil && last.Chart.Metadata != nil {
			chart = last.Chart.Metadata.Name + "-" + last.Chart.Metadata.Version
		}
		return &GateError{Reason: ReasonReleaseConflict, Message: fmt.Sprintf(
			"Helm release %s in namespace %s (chart %s, revision %d) was not installed by Compositor for this composition (it has no %s label): it is left alone; give the composition another %s",
			name, namespace, chart, last.Version, LabelCompositionUID, "krateo.io/release-name")}
	default:
		return &GateError{Reason: ReasonReleaseConflict, Message: fmt.Sprintf(
			"Helm release %s in namespace %s belongs to another composition (UID %s): it is left alone; give this composition another krateo.io/release-name",
			name, namespace, owner)}
	}
}

// policyRequest describes the composition as the webhook does for the policies: its
// values and chart, its namespace's labels, its release. upgrade says whether the
// release exists (UPDATE) or not (CREATE).
func (r *Reconciler) policyRequest(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, ch *chart.Chart, digest string, upgrade bool) (*policies.Request, error) {
	ns := &corev1.Namespace{}
	if err := r.Live.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s for the policies' namespaceSelector: %w", obj.GetNamespace(), err)
	}
	operation := "CREATE"
	if upgrade {
		operation = "UPDATE"
	}
	return &policies.Request{
		Operation:       operation,
		Kind:            metav1.GroupVersionKind(r.GVK),
		Resource:        metav1.GroupVersionResource{Group: r.GVK.Group, Version: r.GVK.Version, Resource: def.Status.Resource},
		Namespace:       obj.GetNamespace(),
		Name:            obj.GetName(),
		Object:          obj.DeepCopy().Object,
		NamespaceLabels: ns.Labels,
		Definition:      &policies.ChartRef{URL: def.Spec.Chart.URL, Version: def.Spec.Chart.Version},
		Chart:           ch,
		ChartDigest:     digest,
		ReleaseName:     releaseName(obj),
	}, nil
}

// validateValues checks the values about to be installed against the chart's schemas
// with Compositor's validator, which never loads a reference: Helm's own check is off.
func (r *Reconciler) validateValues(ctx context.Context, request *policies.Request) error {
	if r.Checker == nil || r.Checker.Schemas == nil {
		return errors.New("the controller has no values validator, so it installs nothing")
	}
	decision, err := (&policies.Checker{Schemas: r.Checker.Schemas}).Check(ctx, request)
	if err != nil {
		return &GateError{Reason: ReasonInvalidValues, Message: fmt.Sprintf("nothing was installed: %v", err)}
	}
	if decision.Denied() {
		return &GateError{Reason: ReasonInvalidValues, Message: "nothing was installed: the values break the chart's schema: " + denials(decision.Violations)}
	}
	return nil
}

// gate is the post-renderer of one install of the composition.
func (r *Reconciler) gate(ctx context.Context, namespace string, request *policies.Request, clusterScoped map[schema.GroupKind]bool, mapper meta.RESTMapper) *installGate {
	g := &installGate{ctx: ctx, namespace: namespace, mapper: mapper, request: request, clusterScoped: clusterScoped}
	if r.Checker != nil {
		g.policies = r.Checker.Engine
	}
	return g
}

// gatedKubeClient is Helm's Kubernetes client, during an install or upgrade, with the
// install gate's object checks in front of every object Helm builds to act on: the
// release's manifests, which the post-renderer has checked already, and its hooks,
// which Helm never post-renders (and deletes by policy before creating them).
type gatedKubeClient struct {
	*kube.Client
	gate *installGate
}

// Build checks the objects of reader before Helm acts on them.
func (c *gatedKubeClient) Build(reader io.Reader, validate bool) (kube.ResourceList, error) {
	data, err := io.ReadAll(reader)
	if err != nil {
		return nil, fmt.Errorf("reading the manifests to apply: %w", err)
	}
	objs, err := policies.ParseManifests(string(data))
	if err != nil {
		return nil, fmt.Errorf("reading the manifests to apply: %w", err)
	}
	if err := c.gate.checkObjects(objs); err != nil {
		return nil, err
	}
	return c.Client.Build(bytes.NewReader(data), validate)
}

// allowedClusterScoped reads the cluster-scoped kinds def lets its compositions create
// (AnnotationAllowClusterScoped), leaving out those never installed, and the resources
// Helm must reach for them. A kind the API server does not serve is left out: the gate
// refuses its objects anyway.
func allowedClusterScoped(def *corev1alpha1.CompositionDefinition, mapper meta.RESTMapper) (map[schema.GroupKind]bool, []schema.GroupResource) {
	if def == nil {
		return nil, nil
	}
	kinds := map[schema.GroupKind]bool{}
	var resources []schema.GroupResource
	for _, entry := range strings.Split(def.Annotations[AnnotationAllowClusterScoped], ",") {
		gk := schema.ParseGroupKind(strings.TrimSpace(entry))
		if gk.Kind == "" || neverInstalled[gk] {
			continue
		}
		mapping, err := mapper.RESTMapping(gk)
		if err != nil || mapping.Scope.Name() != meta.RESTScopeNameRoot {
			continue
		}
		kinds[gk] = true
		resources = append(resources, mapping.Resource.GroupResource())
	}
	return kinds, resources
}
