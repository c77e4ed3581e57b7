package composition

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
)

// testMapper knows a few namespaced and cluster-scoped kinds, as discovery would.
func testMapper() meta.RESTMapper {
	kinds := map[schema.GroupVersionKind]meta.RESTScope{
		{Version: "v1", Kind: "ConfigMap"}:                                               meta.RESTScopeNamespace,
		{Version: "v1", Kind: "Secret"}:                                                  meta.RESTScopeNamespace,
		{Group: "apps", Version: "v1", Kind: "Deployment"}:                               meta.RESTScopeNamespace,
		{Group: "scheduling.k8s.io", Version: "v1", Kind: "PriorityClass"}:               meta.RESTScopeRoot,
		{Group: "example.com", Version: "v1", Kind: "Widget"}:                            meta.RESTScopeRoot,
		{Group: "example.com", Version: "v1", Kind: "Gizmo"}:                             meta.RESTScopeRoot,
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}:                meta.RESTScopeNamespace,
		{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}: meta.RESTScopeRoot,
	}
	var versions []schema.GroupVersion
	for gvk := range kinds {
		versions = append(versions, gvk.GroupVersion())
	}
	m := meta.NewDefaultRESTMapper(versions)
	for gvk, scope := range kinds {
		m.Add(gvk, scope)
	}
	return m
}

func manifest(docs ...string) *bytes.Buffer {
	var b bytes.Buffer
	for i, d := range docs {
		b.WriteString("---\n# Source: app/templates/t" + string(rune('a'+i)) + ".yaml\n" + d + "\n")
	}
	return &b
}

// judgeRendered judges manifests as the release's, as Build does: Helm's parse is
// policies.ParseManifests here, which reads as Helm's builder does, without templates.
func judgeRendered(g *installGate, manifests *bytes.Buffer) error {
	built, err := policies.ParseManifests(manifests.String())
	if err != nil {
		return err
	}
	for i := range built {
		built[i].Template = ""
	}
	return g.judgeManifest(manifests.String(), built)
}

func TestInstallGateRefusesWhatLeavesTheNamespace(t *testing.T) {
	gate := &installGate{namespace: "team-a", mapper: testMapper()}
	for name, tc := range map[string]struct {
		doc     string
		reason  string
		message string
	}{
		"a ConfigMap in another namespace": {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: team-b}", ReasonObjectOutsideNamespace,
			"v1 ConfigMap/c (template app/templates/tb.yaml): rendered into namespace team-b, outside the composition's namespace team-a"},
		"a ServiceAccount token Secret": {"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/service-account-token", ReasonForbiddenObject,
			"v1 Secret/s (template app/templates/tb.yaml): a Secret of type kubernetes.io/service-account-token would mint a ServiceAccount token"},
		"a Role":                           {"apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}", ReasonForbiddenObject, "compositions never create a Role"},
		"a ClusterRoleBinding":             {"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: r}", ReasonForbiddenObject, "compositions never create a ClusterRoleBinding"},
		"a webhook configuration":          {"apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {name: w}", ReasonForbiddenObject, "compositions never create a MutatingWebhookConfiguration"},
		"a CRD":                            {"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: w}", ReasonForbiddenObject, "compositions never create a CustomResourceDefinition"},
		"a Namespace":                      {"apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}", ReasonForbiddenObject, "compositions never create a Namespace"},
		"a cluster-scoped kind":            {"apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}", ReasonForbiddenObject, "Widget is cluster-scoped, and compositions create only namespaced objects"},
		"a kind the server does not serve": {"apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}", ReasonForbiddenObject, "the API server does not serve this kind"},
		"a Role inside a List":             {"apiVersion: v1\nkind: List\nitems:\n- apiVersion: rbac.authorization.k8s.io/v1\n  kind: Role\n  metadata: {name: hidden}", ReasonForbiddenObject, "rbac.authorization.k8s.io/v1 Role/hidden"},
	} {
		t.Run(name, func(t *testing.T) {
			in := manifest("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine}", tc.doc)
			err := judgeRendered(gate, in)
			gateErr, ok := asGateError(err)
			require.True(t, ok, "refused with a GateError: %v", err)
			assert.Equal(t, tc.reason, gateErr.Reason)
			assert.Contains(t, gateErr.Message, tc.message)
			assert.True(t, strings.HasPrefix(gateErr.Message, "nothing was installed: "), gateErr.Message)
			assert.NotContains(t, gateErr.Message, "ConfigMap/fine", "only refused objects are named")
		})
	}
	t.Run("every refused object is named", func(t *testing.T) {
		err := judgeRendered(gate, manifest("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}", "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "ConfigMap/a")
		assert.Contains(t, err.Error(), "Role/r")
	})
	t.Run("namespaced objects in the namespace pass unchanged", func(t *testing.T) {
		in := manifest("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: team-a}", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: Opaque")
		require.NoError(t, judgeRendered(gate, in))
		assert.Len(t, gate.approved, 3, "each object may be applied")
		assert.Equal(t, "app/templates/tb.yaml", gate.judged[1].Template, "the policies see each object's template")
	})
}

func TestReleaseOwnership(t *testing.T) {
	foreign := &release.Release{Name: "db", Version: 1, Chart: &chart.Chart{Metadata: &chart.Metadata{Name: "opschart", Version: "1.0.0"}}}
	mine := &release.Release{Name: "db", Version: 3, Labels: map[string]string{vocab.LabelCompositionUID: "uid-1"}}
	assert.NoError(t, checkOwner(nil, "ops", "db", "uid-1"), "no release yet")
	assert.NoError(t, checkOwner(mine, "ops", "db", "uid-1"))

	err := checkOwner(foreign, "ops", "db", "uid-1")
	gateErr, ok := asGateError(err)
	require.True(t, ok)
	assert.Equal(t, ReasonReleaseConflict, gateErr.Reason)
	assert.Contains(t, gateErr.Message, "Helm release db in namespace ops (chart opschart-1.0.0, revision 1) was not installed by Compositor")

	err = checkOwner(mine, "ops", "db", "uid-2")
	gateErr, ok = asGateError(err)
	require.True(t, ok)
	assert.Equal(t, ReasonReleaseConflict, gateErr.Reason)
	assert.Contains(t, gateErr.Message, "belongs to another composition (UID uid-1)")
}

func TestOutsideNamespace(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/team-a/secrets/sh.helm.release.v1.x.v1": "",
		"/apis/apps/v1/namespaces/team-a/deployments":               "",
		"/api/v1/namespaces/team-a":                                 "",
		"/api":                                                      "",
		"/apis/apps/v1":                                             "",
		"/version":                                                  "",
		"/api/v1/namespaces/team-b/secrets/x":                       "reaches namespace team-b",
		"/apis/apps/v1/namespaces/team-b/deployments":               "reaches namespace team-b",
		"/api/v1/configmaps":                                        "reaches objects outside any namespace",
		"/apis/scheduling.k8s.io/v1/priorityclasses/p":              "reaches objects outside any namespace",
		"/api/v1/namespaces":                                        "lists namespaces",
		"/openapi/v3/apis/apps/v1":                                  "",
		"/readyz":                                                   "",
		"/k8s/clusters/c-1/api/v1/namespaces/kube-system/secrets":   "is not an API path Helm needs",
		"/metrics":                                                  "is not an API path Helm needs",
		"/":                                                         "is not an API path Helm needs",
	} {
		assert.Equal(t, want, outsideNamespace(path, "team-a"), path)
	}
}

// roundTripFunc records the requests that reach the API server's side.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A request outside the namespace is answered 403 by the client: it never leaves the
// process, and client-go reads it as Forbidden with the reason.
func TestConfinedClientRefusesOtherNamespaces(t *testing.T) {
	var reached []string
	cfg := &rest.Config{Host: "https://127.0.0.1:1", Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		reached = append(reached, r.URL.Path)
		return nil, assert.AnError
	})}
	clients, err := kubernetes.NewForConfig(confineToNamespace(cfg, "team-a"))
	require.NoError(t, err)

	_, err = clients.CoreV1().Secrets("team-b").Get(t.Context(), "x", metav1.GetOptions{})
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), "Compositor confines Helm and the chart's templates to namespace team-a: GET /api/v1/namespaces/team-b/secrets/x reaches namespace team-b")
	_, err = clients.CoreV1().ConfigMaps("").List(t.Context(), metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Empty(t, reached, "refused requests never reach the transport")

	_, err = clients.CoreV1().ConfigMaps("team-a").Get(t.Context(), "c", metav1.GetOptions{})
	require.Error(t, err)
	assert.Equal(t, []string{"/api/v1/namespaces/team-a/configmaps/c"}, reached, "requests in the namespace go through")
}

// A target cluster's API server may be served below a path (a proxy's): the
// confinement judges what follows it, and refuses what is outside it.
func TestConfinedClientBelowAPath(t *testing.T) {
	var reached []string
	cfg := &rest.Config{Host: "https://127.0.0.1:1/k8s/clusters/c-1/", Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		reached = append(reached, r.URL.Path)
		return nil, assert.AnError
	})}
	clients, err := kubernetes.NewForConfig(confineToNamespace(cfg, "team-a"))
	require.NoError(t, err)

	_, err = clients.CoreV1().Secrets("kube-system").List(t.Context(), metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), "GET /k8s/clusters/c-1/api/v1/namespaces/kube-system/secrets reaches namespace kube-system")
	assert.Empty(t, reached)

	_, err = clients.CoreV1().ConfigMaps("team-a").Get(t.Context(), "c", metav1.GetOptions{})
	require.Error(t, err)
	assert.Equal(t, []string{"/k8s/clusters/c-1/api/v1/namespaces/team-a/configmaps/c"}, reached, "requests in the namespace go through")

	// A path that leaves the prefix (a client given an absolute path) is refused.
	transport := &confinedTransport{next: roundTripFunc(func(*http.Request) (*http.Response, error) { panic("reached") }), prefix: "/k8s/clusters/c-1", namespace: "team-a"}
	for _, path := range []string{"/k8s/clusters/c-2/api/v1/namespaces/team-a/secrets", "/k8s/clusters/c-1x/api/v1/namespaces/team-a/secrets", "/api/v1/namespaces/team-a/secrets"} {
		req, err := http.NewRequest(http.MethodGet, "https://127.0.0.1:1"+path, nil)
		require.NoError(t, err)
		resp, err := transport.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, path)
		body, _ := io.ReadAll(resp.Body)
		assert.Contains(t, string(body), "is outside the API server's path /k8s/clusters/c-1", path)
	}
}

// A definition may let its compositions create listed cluster-scoped kinds, never the
// security-sensitive ones; Helm may then reach those resources, and only those.
func TestClusterScopedKindsByOptIn(t *testing.T) {
	mapper := testMapper()
	def := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		vocab.AnnotationAllowClusterScoped: "Widget.example.com, CustomResourceDefinition.apiextensions.k8s.io,Gadget.example.com,ConfigMap",
	}}}
	kinds, resources := allowedClusterScoped(def, mapper)
	assert.Equal(t, map[schema.GroupKind]bool{{Group: "example.com", Kind: "Widget"}: true}, kinds,
		"CRDs are never allowed; unknown and namespaced kinds are no cluster-scoped kinds")
	assert.Equal(t, []schema.GroupResource{{Group: "example.com", Resource: "widgets"}}, resources)

	gate := &installGate{namespace: "team-a", mapper: mapper, clusterScoped: kinds}
	err := judgeRendered(gate, manifest("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}"))
	assert.NoError(t, err)
	err = judgeRendered(gate, manifest("apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: g}"))
	assert.ErrorContains(t, err, "unless their definition lists the kind in annotation compositor.dev/allow-cluster-scoped (Gizmo.example.com)")
	err = judgeRendered(gate, manifest("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: c}"))
	assert.ErrorContains(t, err, "compositions never create a CustomResourceDefinition")

	assert.Empty(t, outsideNamespace("/apis/example.com/v1/widgets/w", "team-a", resources...))
	assert.NotEmpty(t, outsideNamespace("/apis/example.com/v1/gadgets/g", "team-a", resources...))
	assert.NotEmpty(t, outsideNamespace("/apis/example.com/v1/widgets/w", "team-a"))
}

// A refusal of the install gate lists every violation; past the 1024 bytes the API
// server takes in an Event's note, its event is recorded with the refusal's beginning,
// cut at a character, rather than refused and lost. The condition keeps it whole.
func TestRefusalEventWithinTheNoteLimit(t *testing.T) {
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("ConfigMap/data-%02d: ConfigMap data-%02d has a forbidden verdict «é» [policy no-forbidden-verdict]", i, i))
	}
	message := "nothing was installed: " + strings.Join(lines, "\n")
	require.Greater(t, len(message), 2048)

	recorder := events.NewFakeRecorder(1)
	r := &Reconciler{Recorder: recorder}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("composition.krateo.io/v1-1-5")
	obj.SetKind("FireworksApp")
	obj.SetNamespace("shop")
	obj.SetName("web")
	got := r.refused(obj, site{cluster: "east"}, &GateError{Reason: ReasonPolicyDenied, Message: message})
	assert.Equal(t, "cluster east: "+message, got.message, "the condition has all of it")

	require.Len(t, recorder.Events, 1, "the event is recorded")
	note, found := strings.CutPrefix(<-recorder.Events, corev1.EventTypeWarning+" "+ReasonPolicyDenied+" ")
	require.True(t, found)
	assert.LessOrEqual(t, len(note), 1024)
	assert.True(t, utf8.ValidString(note), "no character split")
	assert.True(t, strings.HasPrefix(note, "cluster east: nothing was installed: ConfigMap/data-00: "), note)
	assert.Regexp(t, `…\(\d+ more bytes\)$`, note)
}
