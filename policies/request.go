package policies

import (
	"cmp"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
)

// Request is what policies are evaluated on: an admission request (or, for the audit
// and `compositor validate`, one built for an existing object or a file), with what
// the webhook knows around it.
type Request struct {
	// Operation is CREATE, UPDATE, DELETE or CONNECT. Empty means "any": the audit
	// uses it, so every policy is evaluated whatever its match.operations.
	Operation string
	// Kind of the object.
	Kind metav1.GroupVersionKind
	// Resource of the object.
	Resource metav1.GroupVersionResource
	// Namespace of the object; empty for cluster-scoped objects.
	Namespace string
	// Name of the object.
	Name string
	// UserInfo is who makes the request.
	UserInfo authenticationv1.UserInfo
	// Object is the object being written; nil on DELETE.
	Object map[string]any
	// OldObject is the object before the write; nil on CREATE.
	OldObject map[string]any
	// NamespaceLabels are the labels of the object's namespace, for namespaceSelector.
	NamespaceLabels map[string]string
	// Definition is the chart of the definition the object belongs to (for a
	// composition: its definition's; for a definition: its own). It becomes
	// input.definition.
	Definition *ChartRef

	// Chart is the chart version a composition is written for; nil for other objects.
	// The schema check and rendered policies need it.
	Chart *chart.Chart
	// ChartDigest identifies Chart's content (the archive digest), so its schemas are
	// compiled once. Empty: computed from the schemas.
	ChartDigest string
	// ReleaseName is the composition's Helm release (its krateo.io/release-name).
	ReleaseName string
	// Installed says that the composition's release is installed already, so its chart
	// renders as `helm upgrade` would whatever the operation: the audit, whose
	// operation is empty, judges an installed composition as its next upgrade renders,
	// which is what Helm applied, not as a first install.
	Installed bool
	// Revision is the release revision the install or upgrade of this write records
	// (.Release.Revision): one after status.revision (NextRevision); 0 renders as 1.
	Revision int
	// Capabilities are the cluster's .Capabilities (ClusterCapabilities); nil renders
	// with Helm's defaults.
	Capabilities *chartcommon.Capabilities
	// Rendered, when not nil, are the objects the chart renders for this request,
	// already rendered: the controller passes the manifests it is about to apply, so
	// rendered policies judge exactly those. nil renders Chart with Spec.
	Rendered []RenderedObject
	// Previous are the objects of the composition's release before this write, when
	// known (the install gate reads them from the release): Gatekeeper constraints see
	// a rendered object that was there as an UPDATE with its old version, and a new
	// one as a CREATE. nil on an UPDATE at admission: rendered from OldObject's spec.
	Previous []RenderedObject
	// ClusterScoped are kinds the definition lets its compositions create cluster-wide
	// (its compositor.dev/allow-cluster-scoped): a rendered object of one is reviewed
	// without a namespace, as are the built-in cluster-scoped kinds.
	ClusterScoped map[schema.GroupKind]bool
	// Uninstall says that Rendered are the delete hooks of the composition's uninstall:
	// Gatekeeper constraints judge what they create, not the composition that goes.
	Uninstall bool
	// SchemaChecked says that these very values were checked against Chart already,
	// with SchemaViolations found: Check does not check them again. Admission sets it
	// when /validate follows /mutate for the same request with the same values.
	SchemaChecked    bool
	SchemaViolations []Violation

	// schemaFailed skips rendering: values the schema refuses are not worth the
	// render, which the schema's bounds may be all that keeps cheap.
	schemaFailed bool
}

// ChartRef is where a definition's chart comes from.
type ChartRef struct {
	URL     string
	Version string
}

// chartRefOf is where def's chart comes from, as input.definition shows it.
func chartRefOf(def *corev1alpha1.CompositionDefinition) *ChartRef {
	return &ChartRef{URL: def.Spec.Chart.URL, Version: def.Spec.Chart.Version}
}

// Write is what a Request is built from: a write of an object as one of its judges
// sees it (admission, the install gate, the plan, `compositor validate`), or for the
// audit an object as it exists, and what that judge knows around it.
type Write struct {
	// Operation is CREATE, UPDATE, DELETE or CONNECT; empty is the audit's review of
	// what exists: every policy applies, and a composition renders as its release
	// stands (Request.Installed, Request.Revision).
	Operation string
	// Object is the object written (nil on DELETE at admission); OldObject the one
	// before (nil on CREATE).
	Object, OldObject map[string]any
	// Kind is the request's kind; zero is the object's apiVersion and kind. Admission
	// gives it: it judges a composition converted to the version it is pinned to.
	Kind metav1.GroupVersionKind
	// Resource is the request's resource; zero is the object's group and version,
	// with the composition's definition's resource.
	Resource metav1.GroupVersionResource
	// Namespace is the object's namespace when the object names none
	// (`compositor validate --namespace`).
	Namespace string
	// UserInfo is who writes.
	UserInfo authenticationv1.UserInfo
	// NamespaceLabels are the labels of the object's namespace.
	NamespaceLabels map[string]string
	// Definition is a composition's definition; nil when it is not known (or the
	// object is no composition). A CompositionDefinition describes itself.
	Definition *corev1alpha1.CompositionDefinition
	// Chart is the composition's chart version, ChartDigest its archive's digest.
	Chart       *chart.Chart
	ChartDigest string
	// Capabilities are the target cluster's, as the install renders with them; nil
	// renders with Helm's defaults.
	Capabilities *chartcommon.Capabilities
}

// NewRequest builds the Request for w, the one way every judge builds it. What the
// object says is read the same way everywhere: the kind from apiVersion and kind (unless
// w gives it), the namespace from metadata.namespace (else w.Namespace), the release
// name from krateo.io/release-name (else the object's name, as the mutating webhook
// defaults it), the revision its install or upgrade records from the status of the
// object before the write (the object itself for the audit). A CompositionDefinition's
// input.definition is its own spec.chart; a composition's, its definition's.
func NewRequest(w Write) *Request {
	current := w.Object
	if current == nil {
		current = w.OldObject
	}
	apiVersion, _ := current["apiVersion"].(string)
	kind, _ := current["kind"].(string)
	gv, _ := schema.ParseGroupVersion(apiVersion)
	md, _ := current["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	r := &Request{
		Operation:       w.Operation,
		Kind:            w.Kind,
		Resource:        w.Resource,
		Namespace:       cmp.Or(ns, w.Namespace),
		Name:            name,
		UserInfo:        w.UserInfo,
		Object:          w.Object,
		OldObject:       w.OldObject,
		NamespaceLabels: w.NamespaceLabels,
		Chart:           w.Chart,
		ChartDigest:     w.ChartDigest,
		Capabilities:    w.Capabilities,
		ReleaseName:     name,
	}
	if r.Kind == (metav1.GroupVersionKind{}) {
		r.Kind = metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: kind}
	}
	if r.Resource.Group == "" && r.Resource.Version == "" {
		r.Resource.Group, r.Resource.Version = r.Kind.Group, r.Kind.Version
	}
	if ann, ok := md["annotations"].(map[string]any); ok {
		if rn, ok := ann[vocab.AnnotationReleaseName].(string); ok && rn != "" {
			r.ReleaseName = rn
		}
	}
	switch {
	case r.Kind.Group == corev1alpha1.GroupVersion.Group:
		url, _, _ := unstructured.NestedString(current, "spec", "chart", "url")
		version, _, _ := unstructured.NestedString(current, "spec", "chart", "version")
		r.Definition = &ChartRef{URL: url, Version: version}
		if r.Kind.Kind == "CompositionDefinition" {
			r.Resource.Resource = cmp.Or(r.Resource.Resource, "compositiondefinitions")
		}
	case w.Definition != nil:
		r.Resource.Resource = cmp.Or(r.Resource.Resource, w.Definition.Status.Resource)
		r.Definition = chartRefOf(w.Definition)
		r.ClusterScoped = clusterScopedOf(w.Definition)
	}
	if r.Kind.Group == vocab.CompositionGroup {
		// Rendered as the install of this write will render it: at the revision after
		// the one installed. The audit renders what exists as its next upgrade would,
		// when it is installed (the controller records the chart digest it installed,
		// in a status only Compositor writes).
		before := w.OldObject
		if w.Operation == "" {
			before = w.Object
			digest, _, _ := unstructured.NestedString(w.Object, "status", "digest")
			r.Installed = digest != ""
		}
		r.Revision = NextRevision(before)
	}
	return r
}

// clusterScopedOf are the kinds def lets its compositions create cluster-wide, as its
// compositor.dev/allow-cluster-scoped annotation lists them; nil when none. Those
// that can check a kind's scope with the API server (the install gate) keep only the
// kinds that really are cluster-scoped.
func clusterScopedOf(def *corev1alpha1.CompositionDefinition) map[schema.GroupKind]bool {
	var kinds map[schema.GroupKind]bool
	for _, entry := range strings.Split(def.Annotations[vocab.AnnotationAllowClusterScoped], ",") {
		if gk := schema.ParseGroupKind(strings.TrimSpace(entry)); gk.Kind != "" {
			if kinds == nil {
				kinds = map[schema.GroupKind]bool{}
			}
			kinds[gk] = true
		}
	}
	return kinds
}

// Spec returns the object's spec: a composition's values.
func (r *Request) Spec() map[string]any {
	if r.Object == nil {
		return nil
	}
	spec, _ := r.Object["spec"].(map[string]any)
	return spec
}

// inputDoc holds input.review and input.definition, converted to Rego values once
// per request (input.review as the policies read it) and shared by every policy
// evaluated on it.
type inputDoc struct {
	review     *ast.Term
	definition *ast.Term // nil: not known
}

func newInputDoc(r *Request) *inputDoc {
	review := map[string]any{
		"operation": r.Operation,
		"kind":      map[string]any{"group": r.Kind.Group, "version": r.Kind.Version, "kind": r.Kind.Kind},
		"resource":  map[string]any{"group": r.Resource.Group, "version": r.Resource.Version, "resource": r.Resource.Resource},
		"namespace": r.Namespace,
		"name":      r.Name,
		"userInfo":  userInfoDoc(r),
		"object":    nilIfEmpty(r.Object),
		"oldObject": nilIfEmpty(r.OldObject),
	}
	// Converted as the policies read it: the parts of the object no policy reads (most
	// of it, as a rule) are never converted. Policies are evaluated one after another,
	// never at once, as the lazy object requires.
	doc := &inputDoc{review: ast.NewTerm(ast.LazyObject(review))}
	if r.Definition != nil {
		doc.definition = ast.ObjectTerm(
			ast.Item(ast.StringTerm("url"), ast.StringTerm(r.Definition.URL)),
			ast.Item(ast.StringTerm("version"), ast.StringTerm(r.Definition.Version)),
		)
	}
	return doc
}

func nilIfEmpty(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m
}

// input is the document one policy sees: input.review, input.parameters,
// input.definition and, for target rendered, input.rendered. It is lazy too: an object
// built eagerly hashes its values, which would convert all of input.review.
func (d *inputDoc) input(params *ast.Term, rendered *ast.Term) ast.Value {
	doc := make(map[string]any, 4)
	doc["review"], doc["parameters"] = d.review.Value, params.Value
	if d.definition != nil {
		doc["definition"] = d.definition.Value
	}
	if rendered != nil {
		doc["rendered"] = rendered.Value
	}
	return ast.LazyObject(doc)
}

// matches tells whether the policy applies to r (docs/admission.md#which-policies-apply).
// Every field of the match that is set must match:
//   - kinds: any entry matches; "*" or an empty group matches any group (Compositor
//     admits only its own groups, none of them the core group), "*" any kind, empty
//     or "*" versions any version;
//   - namespaces and namespaceSelector: only namespaced objects can match them;
//   - labelSelector: the object's labels, or on UPDATE the old object's (as
//     Kubernetes' objectSelector does);
//   - operations: empty means CREATE and UPDATE; "*" any; an empty request operation
//     (the audit) matches every policy.
func (c *compiled) matches(r *Request) bool {
	if r.Operation != "" && !slices.Contains(c.operations, "*") && !slices.Contains(c.operations, r.Operation) {
		return false
	}
	if len(c.Match.Kinds) > 0 && !slices.ContainsFunc(c.Match.Kinds, func(k kindMatcher) bool { return kindMatches(k, r.Kind) }) {
		return false
	}
	if len(c.Match.Namespaces) > 0 && (r.Namespace == "" || !slices.Contains(c.Match.Namespaces, r.Namespace)) {
		return false
	}
	if c.nsSelector != nil && (r.Namespace == "" || !c.nsSelector.Matches(labels.Set(r.NamespaceLabels))) {
		return false
	}
	if c.selector != nil && !c.selector.Matches(objectLabels(r.Object)) && (r.OldObject == nil || !c.selector.Matches(objectLabels(r.OldObject))) {
		return false
	}
	return true
}

type kindMatcher = v1alpha1.KindMatcher

func kindMatches(k kindMatcher, gvk metav1.GroupVersionKind) bool {
	if k.Group != "" && k.Group != "*" && k.Group != gvk.Group {
		return false
	}
	if k.Kind != "*" && k.Kind != gvk.Kind {
		return false
	}
	return len(k.Versions) == 0 || slices.Contains(k.Versions, "*") || slices.Contains(k.Versions, gvk.Version)
}

// objectLabels reads metadata.labels of an unstructured object.
func objectLabels(obj map[string]any) labels.Set {
	md, _ := obj["metadata"].(map[string]any)
	raw, _ := md["labels"].(map[string]any)
	set := make(labels.Set, len(raw))
	for k, v := range raw {
		if s, ok := v.(string); ok {
			set[k] = s
		}
	}
	return set
}
