package composition

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	release "helm.sh/helm/v4/pkg/release/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
)

// Reasons of the install gate's refusals: nothing was applied.
const (
	ReasonInvalidValues          = "InvalidValues"
	ReasonPolicyDenied           = "PolicyDenied"
	ReasonObjectOutsideNamespace = "ObjectOutsideNamespace"
	ReasonForbiddenObject        = "ForbiddenObject"
	ReasonReleaseConflict        = "ReleaseConflict"
	// ReasonIdentityNamespace: the composition is in Compositor's own namespace, which
	// holds the identities Compositor and its controllers run as.
	ReasonIdentityNamespace = "IdentityNamespace"
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

// installGate judges what Helm sends to the cluster for one install or upgrade of a
// composition, at the boundary where Helm hands objects to the cluster: Helm's
// Kubernetes client (gatedKubeClient). Every object Helm acts on comes from Build,
// Helm's one parse of a manifest, and the gate judges what that parse yields. The
// release's manifest, which an install or upgrade builds first, before any hook runs,
// is judged whole there: every object stays in the composition's namespace, is a kind
// compositions may create, and passes the rendered policies. The hooks are judged as
// Helm creates them, beside the manifest's objects. Create and Update send nothing the
// gate has not judged.
type installGate struct {
	// ctx bounds the policies' evaluation: Helm's client calls take no context.
	ctx context.Context
	// namespace is the composition's: every object stays in it.
	namespace string
	// identities is Compositor's own namespace, where the ServiceAccounts it and its
	// controllers run as live; nothing is created there (checkObjects). Empty when
	// the controller does not know it.
	identities string
	// mapper tells namespaced kinds from cluster-scoped ones.
	mapper meta.RESTMapper
	// clusterScoped are the cluster-scoped kinds the definition allows.
	clusterScoped map[schema.GroupKind]bool
	// judge judges the objects with the policies in force, and bounds what Helm
	// builds with its Renderer's bound; nil judges nothing.
	judge *policies.Judge
	// request describes the composition; Rendered is set to the manifests.
	request *policies.Request
	// refusal is the gate's last refusal: Helm reports some errors (those of hooks) as
	// text only, so the reconciler reads the refusal here.
	refusal *GateError
	// release is the name of the release the gate guards (set by gated): Helm's
	// ownership annotations name it on every object of the release.
	release string

	// awaitsManifest: the next manifest Helm builds is the release's (an install's or
	// upgrade's gate, until then). judged are its objects, as the policies saw them
	// (as Helm sends them: policies.HelmOwned), and approved the keys
	// (policies.ObjectKey) of every object judged: what Helm may create or update.
	awaitsManifest bool
	judged         []policies.RenderedObject
	approved       map[string]bool
	// manifest are the keys of the release manifest's objects as judged: anything
	// else Helm creates is a hook.
	manifest map[string]bool

	// leftBehind are the objects of the previous revision that an upgrade removes from
	// the release but cannot delete, because the controller may not even read them
	// (Helm then skips them without a word): a release moved to a chart version whose
	// controller has narrower rights leaves them in the cluster.
	leftBehind []string
}

// forUninstall is a gate like g for an uninstall, which builds no release manifest:
// it judges the hooks the uninstall creates and checks what it deletes. A hook is an
// object being created, so the policies judge it as they judge a create's objects,
// whatever the operations they match (an uninstall's are DELETE): a delete hook is
// rendered when the release is installed, with lookup results the admission render
// never saw, and is judged only when it runs.
func (g *installGate) forUninstall() *installGate {
	if g == nil {
		return nil
	}
	request := g.request
	if request != nil {
		creating := *request
		creating.Operation = "CREATE"
		creating.Uninstall = true
		request = &creating
	}
	return &installGate{ctx: g.ctx, namespace: g.namespace, identities: g.identities, mapper: g.mapper, clusterScoped: g.clusterScoped, judge: g.judge, request: request}
}

// judgeManifest judges the objects Helm built from the release's manifest, as the
// policies see them: the template of each is the one the manifest's "# Source:"
// comments name, read by policies.ParseManifests, which must find exactly the objects
// Helm's parse found. A manifest that reads two ways is refused: what the policies
// were told and what Helm applies would differ.
func (g *installGate) judgeManifest(manifest string, built []policies.RenderedObject) error {
	parsed, err := policies.ParseManifests(manifest)
	if err != nil {
		g.refusal = &GateError{Reason: ReasonForbiddenObject, Message: fmt.Sprintf("nothing was installed: reading the rendered manifests: %v", err)}
		return g.refusal
	}
	templates := map[string][]string{}
	for _, obj := range parsed {
		key := policies.ObjectKey(g.placed(obj.Object), g.namespace)
		templates[key] = append(templates[key], obj.Template)
	}
	for i := range built {
		key := policies.ObjectKey(g.placed(built[i].Object), g.namespace)
		if len(templates[key]) == 0 {
			g.refusal = &GateError{Reason: ReasonForbiddenObject, Message: fmt.Sprintf(
				"nothing was installed: Helm would apply %s, which the rendered manifests as read for the policies do not show: the manifests read two ways, so they are refused",
				objectRef(built[i]))}
			return g.refusal
		}
		built[i].Template, templates[key] = templates[key][0], templates[key][1:]
	}
	if len(parsed) != len(built) {
		g.refusal = &GateError{Reason: ReasonForbiddenObject, Message: fmt.Sprintf(
			"nothing was installed: the rendered manifests read as %d objects for the policies and as %d by Helm: they read two ways, so they are refused", len(parsed), len(built))}
		return g.refusal
	}
	// What is judged is what Helm sends: each object with the ownership metadata
	// Helm gives it between building and sending.
	owned := make([]policies.RenderedObject, len(built))
	for i, obj := range built {
		owned[i] = policies.RenderedObject{Template: obj.Template, Object: policies.HelmOwned(obj.Object, g.release, g.namespace, false)}
	}
	if err := g.checkObjects(owned); err != nil {
		return err
	}
	if err := g.checkPolicies(owned); err != nil {
		return err
	}
	g.judged = owned
	g.approved = make(map[string]bool, len(owned))
	g.manifest = make(map[string]bool, len(owned))
	for _, obj := range owned {
		key := policies.ObjectKey(obj.Object, g.namespace)
		g.approved[key], g.manifest[key] = true, true
	}
	return nil
}

// placed is obj as the API server holds it: without a namespace when the API server
// says its kind is cluster-scoped (Helm's builder drops one the chart wrote).
func (g *installGate) placed(obj map[string]any) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	if _, has := md["namespace"]; !has {
		return obj
	}
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return obj
	}
	mapping, err := g.mapper.RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version)
	if err != nil || mapping.Scope.Name() != meta.RESTScopeNameRoot {
		return obj
	}
	rest := maps.Clone(md)
	delete(rest, "namespace")
	out := maps.Clone(obj)
	out["metadata"] = rest
	return out
}

// checkObjects refuses the objects that leave the namespace or that compositions never
// create, naming every one of them; the first refusal's reason is the condition's.
func (g *installGate) checkObjects(objs []policies.RenderedObject) error {
	if len(objs) > 0 && g.identities != "" && g.namespace == g.identities {
		// One rule over where identities live, whatever the objects: a Pod, any
		// workload's template, a token Secret or a TokenRequest can use a ServiceAccount
		// of its own namespace only, so nothing of a release is created in this one.
		g.refusal = &GateError{Reason: ReasonIdentityNamespace, Message: fmt.Sprintf(
			"nothing was installed: namespace %s is Compositor's own, which holds the identities Compositor and its controllers run as; no composition installs there",
			g.namespace)}
		return g.refusal
	}
	var refusals []*GateError
	for _, obj := range objs {
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
			where, kind, vocab.AnnotationAllowClusterScoped, gk.String())}
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
	if g.judge == nil || g.request == nil {
		return nil
	}
	decision := g.judge.Objects(g.ctx, g.request, objs)
	if !decision.Denied() {
		return nil
	}
	g.refusal = &GateError{Reason: ReasonPolicyDenied, Message: "nothing was installed: " + denials(decision.Violations)}
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
	switch owner := last.Labels[vocab.LabelCompositionUID]; owner {
	case string(uid):
		return nil
	case "":
		chart := "unknown chart"
		if last.Chart != nil && last.Chart.Metadata != nil {
			chart = last.Chart.Metadata.Name + "-" + last.Chart.Metadata.Version
		}
		return &GateError{Reason: ReasonReleaseConflict, Message: fmt.Sprintf(
			"Helm release %s in namespace %s (chart %s, revision %d) was not installed by Compositor for this composition (it has no %s label): it is left alone; give the composition another %s",
			name, namespace, chart, last.Version, vocab.LabelCompositionUID, "krateo.io/release-name")}
	default:
		return &GateError{Reason: ReasonReleaseConflict, Message: fmt.Sprintf(
			"Helm release %s in namespace %s belongs to another composition (UID %s): it is left alone; give this composition another krateo.io/release-name",
			name, namespace, owner)}
	}
}

// policyRequest describes the composition as the webhook does for the policies: its
// values and chart, its namespace's labels, its release. operation is CREATE when the
// release does not exist, UPDATE when it does, DELETE for its uninstall (def and ch
// may then be nil).
func (r *Reconciler) policyRequest(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, ch *chart.Chart, digest, operation string) (*policies.Request, error) {
	ns := &corev1.Namespace{}
	if err := r.Live.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s for the policies' namespaceSelector: %w", obj.GetNamespace(), err)
	}
	return policies.NewRequest(policies.Write{
		Operation: operation,
		Object:    obj.DeepCopy().Object,
		// Who the policies see: the spec's author, whom the mutating webhook records
		// and keeps (a write that does not change the spec cannot change it). Their
		// groups are not recorded.
		UserInfo:        authenticationv1.UserInfo{Username: obj.GetAnnotations()[vocab.AnnotationSpecAuthor]},
		NamespaceLabels: ns.Labels,
		Definition:      def,
		Chart:           ch,
		ChartDigest:     digest,
	}), nil
}

// installGate is the gate of installing w over last (nil: nothing installed yet): the
// composition described for the policies as the webhook describes it, an UPDATE of
// last's objects as Helm sent them when there is a last revision (Gatekeeper
// constraints tell an object's update from its creation by it; a manifest that does
// not read leaves them unknown), and its values checked against the chart's schemas
// first (a GateError when they break them: nothing is rendered).
func (r *Reconciler) installGate(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, w work, last *release.Release, clusterScoped map[schema.GroupKind]bool, mapper meta.RESTMapper) (*installGate, error) {
	operation := "CREATE"
	if last != nil {
		operation = "UPDATE"
	}
	request, err := r.policyRequest(ctx, obj, def, w.chart, w.digest, operation)
	if err != nil {
		return nil, err
	}
	if last != nil {
		if previous, err := policies.ParseManifests(last.Manifest); err == nil {
			for i := range previous {
				previous[i].Object = policies.HelmOwned(previous[i].Object, last.Name, last.Namespace, false)
			}
			request.Previous = previous
		}
	}
	if err := r.validateValues(ctx, request); err != nil {
		return nil, err
	}
	return r.gate(ctx, obj.GetNamespace(), request, clusterScoped, mapper), nil
}

// uninstallGate is the gate of an uninstall of obj's release on s: what it creates
// (the release's delete hooks) is judged as an install's objects are, and what it
// deletes stays in the namespace.
func (r *Reconciler) uninstallGate(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, mapper meta.RESTMapper) (*installGate, []schema.GroupResource, error) {
	request, err := r.policyRequest(ctx, obj, def, nil, "", "DELETE")
	if err != nil {
		return nil, nil, err
	}
	request.Rendered = []policies.RenderedObject{}
	clusterKinds, clusterResources := allowedClusterScoped(def, mapper)
	return r.gate(ctx, obj.GetNamespace(), request, clusterKinds, mapper).forUninstall(), clusterResources, nil
}

// validateValues checks the values about to be installed against the chart's schemas
// with Compositor's validator, which never loads a reference: Helm's own check is off.
func (r *Reconciler) validateValues(ctx context.Context, request *policies.Request) error {
	if r.Judge == nil {
		return &GateError{Reason: ReasonInvalidValues, Message: "nothing was installed: the controller has no values validator"}
	}
	decision, err := r.Judge.Values(ctx, request)
	if err != nil {
		return &GateError{Reason: ReasonInvalidValues, Message: fmt.Sprintf("nothing was installed: %v", err)}
	}
	if decision.Denied() {
		return &GateError{Reason: ReasonInvalidValues, Message: "nothing was installed: the values break the chart's schema: " + denials(decision.Violations)}
	}
	return nil
}

// renderBounds are the deadline and the Renderer of the render the gate lets Helm
// apply: its judge's, so that what is installed renders under the bounds of what
// admission judged.
func (g *installGate) renderBounds() (time.Duration, *policies.Renderer) {
	if g == nil || g.judge == nil {
		return policies.DefaultTimeout, nil
	}
	return g.judge.Timeout(), g.judge.Renderer()
}

// renderer bounds what the gate lets Helm build as the judge's renders are bounded.
func (g *installGate) renderer() *policies.Renderer {
	_, renderer := g.renderBounds()
	return renderer
}

// identityNamespace is Compositor's own namespace, as the controller knows it: where
// the chart archives are kept, which is where the generated ServiceAccounts live
// (rbac.Options.IdentityNamespace). In process Compositor's chart store has it; a
// generated Deployment is given it (--chart-archive-namespace).
func (r *Reconciler) identityNamespace() string {
	if r.Charts == nil || r.Charts.Store == nil {
		return ""
	}
	return r.Charts.Store.Namespace
}

// gate is the gate of one install or upgrade of the composition.
func (r *Reconciler) gate(ctx context.Context, namespace string, request *policies.Request, clusterScoped map[schema.GroupKind]bool, mapper meta.RESTMapper) *installGate {
	if request != nil {
		// The policies see an object of a kind as cluster-scoped only when the API
		// server says it is (the definition's annotation may list a namespaced kind).
		request.ClusterScoped = clusterScoped
	}
	g := &installGate{ctx: ctx, namespace: namespace, identities: r.identityNamespace(), mapper: mapper, request: request, clusterScoped: clusterScoped, awaitsManifest: true}
	g.judge = r.Judge
	return g
}

// gatedKubeClient is Helm's Kubernetes client behind the install gate: the boundary
// where Helm hands objects to the cluster. Every object Helm acts on comes from Build,
// Helm's one parse of a manifest (the release's, a hook's, or a stored revision's), so
// Build checks each object's namespace and kind, and judges the release's manifest
// whole (installGate.judgeManifest), as Helm will send it. Create and Update send an
// object only as the gate judged it: one whose content, as it is about to be sent, is
// not what was judged (a hook, or anything changed after Build) is judged there, as
// it is. Whatever Helm's actions call besides goes to Helm's own client.
type gatedKubeClient struct {
	inner *kube.Client
	gate  *installGate

	mu sync.Mutex
}

var (
	_ kube.Interface            = (*gatedKubeClient)(nil)
	_ kube.InterfaceWaitOptions = (*gatedKubeClient)(nil)
)

// Build is Helm's parse of reader, with every object checked; the first manifest an
// install or upgrade builds, the release's, is judged whole.
func (c *gatedKubeClient) Build(reader io.Reader, validate bool) (kube.ResourceList, error) {
	data, err := io.ReadAll(reader)
	if err != nil {
		return nil, fmt.Errorf("reading the manifests to apply: %w", err)
	}
	c.mu.Lock()
	release := c.gate.awaitsManifest
	c.mu.Unlock()
	if release {
		// Helm applies the sandbox's render (render.go), which kept to the bound;
		// what Helm adds to it (its "# Source:" framing aside) is checked again here,
		// where it is handed to the cluster.
		name := c.gate.release
		if req := c.gate.request; req != nil && req.Chart != nil {
			name = req.Chart.Name()
		}
		if err := c.gate.renderer().CheckRendered(name, map[string]string{"manifests": unframed(data)}); err != nil {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.gate.awaitsManifest = false
			c.gate.refusal = &GateError{Reason: ReasonRenderRefused, Message: "nothing was installed: the manifests Helm rendered went past a bound: " + err.Error()}
			return nil, c.gate.refusal
		}
	}
	infos, err := c.inner.Build(bytes.NewReader(data), validate)
	if err != nil {
		return nil, err
	}
	objs := make([]policies.RenderedObject, len(infos))
	for i, info := range infos {
		content, err := contentOf(info)
		if err != nil {
			return nil, err
		}
		objs[i] = policies.RenderedObject{Template: info.Source, Object: content}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate.awaitsManifest {
		c.gate.awaitsManifest = false
		c.keepLive(infos)
		if err := c.gate.judgeManifest(string(data), objs); err != nil {
			return nil, err
		}
	} else if err := c.gate.checkObjects(objs); err != nil {
		return nil, err
	}
	return infos, nil
}

// unframed is a release manifest without the "---" and "# Source:" lines Helm frames
// each document with: what the sandbox's bound on rendered bytes counts of it.
func unframed(data []byte) string {
	var b strings.Builder
	b.Grow(len(data))
	for line := range bytes.Lines(data) {
		if string(bytes.TrimRight(line, "\n")) == "---" || bytes.HasPrefix(line, []byte("# Source: ")) {
			continue
		}
		b.Write(line)
	}
	return b.String()
}

// keepLive keeps of the release's objects before this upgrade (the request's
// Previous, from the release record) those the cluster still holds. Helm's upgrade
// creates every object of the new manifest that is not there, whether the release had
// it or not, and the tenant may delete what its namespace holds: such an object is a
// creation, and the policies must judge it as one. As an update of what was judged
// before, a template that leaves updates alone (the pod-security library's is_update)
// would let it through. An object that cannot be read is taken as not there: judged
// as a creation, which judges more, never less.
func (c *gatedKubeClient) keepLive(infos kube.ResourceList) {
	req := c.gate.request
	if req == nil || req.Previous == nil {
		return
	}
	type identity struct {
		gk              schema.GroupKind
		namespace, name string
	}
	target := make(map[identity]*resource.Info, len(infos))
	for _, info := range infos {
		if info.Mapping == nil {
			continue
		}
		namespace := info.Namespace
		if info.Mapping.Scope.Name() == meta.RESTScopeNameRoot {
			namespace = ""
		}
		target[identity{info.Mapping.GroupVersionKind.GroupKind(), namespace, info.Name}] = info
	}
	live := make([]policies.RenderedObject, 0, len(req.Previous))
	for _, p := range req.Previous {
		u := unstructured.Unstructured{Object: p.Object}
		id := identity{u.GroupVersionKind().GroupKind(), cmp.Or(u.GetNamespace(), c.gate.namespace), u.GetName()}
		info := target[id]
		if info == nil {
			id.namespace = "" // cluster-scoped
			info = target[id]
		}
		if info != nil && !isLive(info) {
			continue
		}
		live = append(live, p)
	}
	req.Previous = live
}

// isLive reports whether the cluster holds info's object, as Helm's Update asks.
func isLive(info *resource.Info) bool {
	if info.Client == nil || info.Mapping == nil {
		return false
	}
	_, err := resource.NewHelper(info.Client, info.Mapping).Get(info.Namespace, info.Name)
	return err == nil
}

// judge judges objects the gate has not approved as they are now — hooks, or an
// object changed since it was judged — with the policies, beside the release's
// manifest, and approves them; it refuses those Build would not have let through.
func (c *gatedKubeClient) judge(infos []*resource.Info) error {
	if len(infos) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	objs := make([]policies.RenderedObject, 0, len(infos))
	for _, info := range infos {
		content, err := contentOf(info)
		if err != nil {
			return err
		}
		obj := policies.RenderedObject{Template: info.Source, Object: content}
		if refused := c.gate.checkObject(obj); refused != nil {
			c.gate.refusal = &GateError{Reason: refused.Reason, Message: "nothing more was applied: " + refused.Message}
			return c.gate.refusal
		}
		objs = append(objs, obj)
	}
	if err := c.gate.checkPolicies(append(slices.Clip(c.gate.judged), objs...)); err != nil {
		return err
	}
	if c.gate.approved == nil {
		c.gate.approved = map[string]bool{}
	}
	for _, obj := range objs {
		c.gate.approved[policies.ObjectKey(obj.Object, c.gate.namespace)] = true
	}
	return nil
}

// Create creates what the gate judged. Hooks — objects that are not the release
// manifest's as judged — are marked the release's (Helm's ownership annotations,
// which Helm sets on the manifest's objects itself), judged so marked, and created
// with a plain create, never merged into an object of the same name that is there:
// Helm 4 would apply them server-side. Its result is never nil, as Update's.
func (c *gatedKubeClient) Create(resources kube.ResourceList, options ...kube.ClientCreateOption) (*kube.Result, error) {
	hooks, err := c.mayCreate(resources)
	if err != nil {
		return &kube.Result{}, err
	}
	if hooks {
		options = append(options, kube.ClientCreateOptionServerSideApply(false, false))
	}
	res, err := c.inner.Create(resources, options...)
	if res == nil {
		res = &kube.Result{}
	}
	return res, err
}

// mayCreate marks the hooks of resources the release's and judges what was not: nil
// when every object may be created. hooks tells whether there were hooks.
func (c *gatedKubeClient) mayCreate(resources kube.ResourceList) (hooks bool, err error) {
	outsideManifest, err := c.outside(resources, c.gate.manifest)
	if err != nil {
		return false, err
	}
	for _, info := range outsideManifest {
		if err := markOwned(info, c.gate.release, c.gate.namespace); err != nil {
			return false, err
		}
	}
	unjudged, err := c.outside(resources, c.gate.approved)
	if err != nil {
		return false, err
	}
	return len(outsideManifest) > 0, c.judge(unjudged)
}

// Update applies what the gate judged, onto objects of the release only: an object of
// the target that is there and is not the release's (a name claimed through a revision
// that failed, or a release object whose annotations a tenant rewrote) is refused, and
// nothing more is applied.
//
// Its result is never nil, refused or not, as Helm's own client's: Helm's upgrade and
// rollback read what was created from the result of an Update that failed, in a
// goroutine of their own, where a nil result would take the whole process down.
func (c *gatedKubeClient) Update(original, target kube.ResourceList, options ...kube.ClientUpdateOption) (*kube.Result, error) {
	if err := c.mayUpdate(target); err != nil {
		return &kube.Result{}, err
	}
	c.noteLeftBehind(original.Difference(target))
	res, err := c.inner.Update(original, target, options...)
	if res == nil {
		res = &kube.Result{}
	}
	return res, err
}

// mayUpdate is nil when every object of target may be applied: judged, and absent or
// the release's.
func (c *gatedKubeClient) mayUpdate(target kube.ResourceList) error {
	changed, err := c.outside(target, c.gate.approved)
	if err != nil {
		return err
	}
	if err := c.judge(changed); err != nil {
		return err
	}
	for _, info := range target {
		owner, err := c.owner(info)
		if err != nil {
			return err
		}
		if owner.foreign() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.gate.refusal = &GateError{Reason: ReasonReleaseConflict, Message: fmt.Sprintf(
				"nothing more was applied: %s %s/%s is there and is not release %s's (%s): it is left alone",
				info.Mapping.GroupVersionKind.Kind, info.Namespace, info.Name, c.gate.release, owner)}
			return c.gate.refusal
		}
	}
	return nil
}

// noteLeftBehind records in the gate the objects an upgrade drops from the release
// that the controller cannot read: Helm deletes only what it can read, and skips the
// rest without an error.
func (c *gatedKubeClient) noteLeftBehind(dropped kube.ResourceList) {
	for _, info := range dropped {
		err := info.Get()
		if err == nil || apierrors.IsNotFound(err) {
			continue // Helm deletes it, or it is gone
		}
		what := info.Mapping.GroupVersionKind.Kind + " " + info.Name
		if info.Namespace != "" {
			what = info.Mapping.GroupVersionKind.Kind + " " + info.Namespace + "/" + info.Name
		}
		reason := err.Error()
		if apierrors.IsForbidden(err) {
			reason = "this version's controller may not read " + info.Mapping.Resource.Resource
		}
		c.mu.Lock()
		c.gate.leftBehind = append(c.gate.leftBehind, what+" ("+reason+")")
		c.mu.Unlock()
	}
}

// Delete deletes the objects of the release only: those Helm would delete that are
// there and are not the release's (a hook's namesake, an object a failed revision
// named) are left alone.
func (c *gatedKubeClient) Delete(resources kube.ResourceList, policy metav1.DeletionPropagation) (*kube.Result, []error) {
	var ours kube.ResourceList
	for _, info := range resources {
		owner, err := c.owner(info)
		if err != nil {
			return &kube.Result{}, []error{err}
		}
		if owner.foreign() {
			continue
		}
		ours = append(ours, info)
	}
	if len(ours) == 0 {
		return &kube.Result{}, nil
	}
	return c.inner.Delete(ours, policy)
}

// outside are the objects of resources whose content, as it is now, has no key in
// keys (the gate's approved, or the release manifest's).
func (c *gatedKubeClient) outside(resources kube.ResourceList, keys map[string]bool) ([]*resource.Info, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*resource.Info
	for _, info := range resources {
		content, err := contentOf(info)
		if err != nil {
			return nil, err
		}
		if !keys[policies.ObjectKey(content, c.gate.namespace)] {
			out = append(out, info)
		}
	}
	return out, nil
}

// Helm's ownership annotations, which it sets on every object of a release's manifest
// (and Compositor on its hooks).
const (
	annotationReleaseName      = policies.AnnotationReleaseName
	annotationReleaseNamespace = policies.AnnotationReleaseNamespace
)

// liveOwner is whose the live object of a name is: absent, the release's, or another's.
type liveOwner struct {
	absent, ours bool
	release      string // the release its annotations name, if any
}

func (o liveOwner) foreign() bool { return !o.absent && !o.ours }

func (o liveOwner) String() string {
	if o.release == "" {
		return "it names no release"
	}
	return "it is release " + o.release + "'s"
}

// owner reads the live object info names and tells whose it is. An object is the
// release's when Helm's annotations name it, or — a hook a Compositor on Helm 3
// created, which it did not mark — when it names no release and only Compositor has
// ever written it.
func (c *gatedKubeClient) owner(info *resource.Info) (liveOwner, error) {
	live, err := resource.NewHelper(info.Client, info.Mapping).Get(info.Namespace, info.Name)
	if apierrors.IsNotFound(err) {
		return liveOwner{absent: true}, nil
	}
	if err != nil {
		return liveOwner{}, fmt.Errorf("reading %s %s/%s, to know whose it is: %w", info.Mapping.GroupVersionKind.Kind, info.Namespace, info.Name, err)
	}
	obj, err := meta.Accessor(live)
	if err != nil {
		return liveOwner{}, err
	}
	annotations := obj.GetAnnotations()
	o := liveOwner{release: annotations[annotationReleaseName]}
	if o.release != "" {
		o.ours = o.release == c.gate.release && annotations[annotationReleaseNamespace] == c.gate.namespace
		return o, nil
	}
	managers := obj.GetManagedFields()
	o.ours = len(managers) > 0 && !slices.ContainsFunc(managers, func(e metav1.ManagedFieldsEntry) bool { return e.Manager != vocab.FieldManager })
	return o, nil
}

// markOwned sets Helm's ownership annotations of release in namespace on info's object.
func markOwned(info *resource.Info, release, namespace string) error {
	obj, err := meta.Accessor(info.Object)
	if err != nil {
		return err
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[annotationReleaseName], annotations[annotationReleaseNamespace] = release, namespace
	obj.SetAnnotations(annotations)
	return nil
}

// The rest reads the cluster, or waits: Helm's own client does it.

func (c *gatedKubeClient) Get(resources kube.ResourceList, related bool) (map[string][]runtime.Object, error) {
	return c.inner.Get(resources, related)
}

func (c *gatedKubeClient) BuildTable(reader io.Reader, validate bool) (kube.ResourceList, error) {
	return c.inner.BuildTable(reader, validate)
}

func (c *gatedKubeClient) GetWaiter(strategy kube.WaitStrategy) (kube.Waiter, error) {
	return c.inner.GetWaiter(strategy)
}

func (c *gatedKubeClient) GetWaiterWithOptions(strategy kube.WaitStrategy, opts ...kube.WaitOption) (kube.Waiter, error) {
	return c.inner.GetWaiterWithOptions(strategy, opts...)
}

func (c *gatedKubeClient) GetPodList(namespace string, listOptions metav1.ListOptions) (*corev1.PodList, error) {
	return c.inner.GetPodList(namespace, listOptions)
}

func (c *gatedKubeClient) OutputContainerLogsForPodList(podList *corev1.PodList, namespace string, writerFunc func(namespace, pod, container string) io.Writer) error {
	return c.inner.OutputContainerLogsForPodList(podList, namespace, writerFunc)
}

func (c *gatedKubeClient) IsReachable() error { return c.inner.IsReachable() }

// contentOf is the object of info as a map, as Helm's builder decoded it.
func contentOf(info *resource.Info) (map[string]any, error) {
	if u, ok := info.Object.(runtime.Unstructured); ok {
		return u.UnstructuredContent(), nil
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(info.Object)
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", info.Mapping.GroupVersionKind.Kind, info.Name, err)
	}
	return content, nil
}

// objectRef names an object in a refusal.
func objectRef(obj policies.RenderedObject) string {
	apiVersion, _ := obj.Object["apiVersion"].(string)
	where := obj.Ref()
	if apiVersion != "" {
		where = apiVersion + " " + where
	}
	return where
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
	for _, entry := range strings.Split(def.Annotations[vocab.AnnotationAllowClusterScoped], ",") {
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
