package policies

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/engine"
	"helm.sh/helm/v4/pkg/kube"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kjson "sigs.k8s.io/json"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

// helmNamespace is the release namespace Helm's kube client is given in these tests.
const helmNamespace = "fuzz-ns"

// helmDials counts the connections Helm's kube client tried to open: none, ever.
var helmDials atomic.Int64

// offlineGetter is the cluster access given to Helm's real kube client: a REST
// configuration naming only 127.0.0.1:1 whose every dial fails and is counted, no
// discovery, and a RESTMapper that maps every kind as namespaced. Client.Build with
// validation off never needs more.
type offlineGetter struct{}

var _ genericclioptions.RESTClientGetter = offlineGetter{}

func (offlineGetter) ToRESTConfig() (*rest.Config, error) {
	return &rest.Config{
		Host: "https://127.0.0.1:1",
		Dial: func(context.Context, string, string) (net.Conn, error) {
			helmDials.Add(1)
			return nil, errors.New("no network in this test")
		},
	}, nil
}

func (offlineGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return nil, errors.New("no discovery in this test")
}

func (offlineGetter) ToRESTMapper() (meta.RESTMapper, error) { return anyKindMapper{}, nil }

func (offlineGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(clientcmdapi.Config{}, &clientcmd.ConfigOverrides{})
}

// anyKindMapper maps every kind to a namespaced resource of the same group and version.
type anyKindMapper struct{}

var errNoReverseMapping = errors.New("anyKindMapper maps kinds only")

func (anyKindMapper) KindFor(schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return schema.GroupVersionKind{}, errNoReverseMapping
}

func (anyKindMapper) KindsFor(schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return nil, errNoReverseMapping
}

func (anyKindMapper) ResourceFor(schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return schema.GroupVersionResource{}, errNoReverseMapping
}

func (anyKindMapper) ResourcesFor(schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return nil, errNoReverseMapping
}

func (m anyKindMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	version := ""
	if len(versions) > 0 {
		version = versions[0]
	}
	return &meta.RESTMapping{
		Resource:         schema.GroupVersionResource{Group: gk.Group, Version: version, Resource: strings.ToLower(gk.Kind) + "s"},
		GroupVersionKind: gk.WithVersion(version),
		Scope:            meta.RESTScopeNamespace,
	}, nil
}

func (m anyKindMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	mapping, err := m.RESTMapping(gk, versions...)
	return []*meta.RESTMapping{mapping}, err
}

func (anyKindMapper) ResourceSingularizer(resource string) (string, error) { return resource, nil }

func newHelmKubeClient() *kube.Client {
	c := kube.New(offlineGetter{})
	c.Namespace = helmNamespace
	return c
}

// helmBuild is what Helm's kube client builds from manifest, as Helm installs a release's
// manifest (validation aside, which needs the server's OpenAPI and drops nothing).
func helmBuild(t testing.TB, manifest string) ([]map[string]any, error) {
	before := helmDials.Load()
	list, err := newHelmKubeClient().Build(strings.NewReader(manifest), false)
	if helmDials.Load() != before {
		t.Fatalf("Helm's kube client tried to reach a server")
	}
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, 0, len(list))
	for _, info := range list {
		out = append(out, info.Object.(*unstructured.Unstructured).Object)
	}
	return out, nil
}

// helmInstallBuild is what Helm's install builds from rendered template files: the
// manifests SortManifests keeps, joined into the release manifest as renderResources
// joins them, built at once; and each hook's manifest built on its own.
func helmInstallBuild(t testing.TB, files map[string]string) ([]map[string]any, error) {
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, m := range manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	out, err := helmBuild(t, b.String())
	if err != nil {
		return nil, err
	}
	for _, h := range hooks {
		objs, err := helmBuild(t, h.Manifest)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func keysOf(objs []map[string]any) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = ObjectKey(o, helmNamespace)
	}
	return out
}

func renderedKeys(objs []RenderedObject) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = ObjectKey(o.Object, helmNamespace)
	}
	return out
}

// checkMatchesHelm fails unless Compositor's parse of manifest (as a post-renderer
// buffer) gives the objects Helm's kube client builds, in order, or refuses it; and
// unless the same for files (rendered template files) read as Render reads them.
func checkMatchesHelm(t *testing.T, manifest string, files map[string]string) {
	t.Helper()
	ours, err := ParseManifests(manifest)
	theirs, helmErr := helmBuild(t, manifest)
	switch {
	case err != nil:
		if !errors.Is(err, ErrRender) {
			t.Fatalf("ParseManifests: error not wrapping ErrRender: %v", err)
		}
	case helmErr != nil:
		t.Fatalf("ParseManifests accepted what Helm's kube client fails on (%v):\n%q", helmErr, manifest)
	default:
		if !slices.Equal(renderedKeys(ours), keysOf(theirs)) {
			t.Fatalf("ParseManifests: objects differ from Helm's for %q\nours:  %v\nHelm's: %v", manifest, objectsJSON(ours), theirs)
		}
	}

	ours, err = objectsOf(maps.Clone(files), nil)
	theirs, helmErr = helmInstallBuild(t, maps.Clone(files))
	switch {
	case err != nil:
		if !errors.Is(err, ErrRender) {
			t.Fatalf("Render: error not wrapping ErrRender: %v", err)
		}
	case helmErr != nil:
		t.Fatalf("Render accepted what Helm's install fails on (%v):\n%q", helmErr, files)
	default:
		a, b := renderedKeys(ours), keysOf(theirs)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			t.Fatalf("Render: objects differ from Helm's for %q\nours:  %v\nHelm's: %v", files, objectsJSON(ours), theirs)
		}
	}
}

func objectsJSON(objs []RenderedObject) []map[string]any {
	out := make([]map[string]any, len(objs))
	for i, o := range objs {
		out[i] = o.Object
	}
	return out
}

// templateFiles reads fuzz input as rendered template files separated by NUL bytes.
func templateFiles(data string) map[string]string {
	files := map[string]string{}
	for i, content := range strings.Split(data, "\x00") {
		files[fmt.Sprintf("app/templates/t%d.yaml", i)] = content
	}
	return files
}

const (
	deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  template:\n    spec:\n      containers:\n      - name: web\n        image: \"registry.example.com/nginx:1.0\"\n"
	// injected is fireworks-app's Deployment with an items list injected through
	// .Values.image.repository (issue 25, item 1).
	injected = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  template:\n    spec:\n      containers:\n      - name: web\n" +
		"        image: \"registry.example.com/nginx\"\nitems:\n" +
		"- {apiVersion: v1, kind: Service, metadata: {name: np}, spec: {type: NodePort, ports: [{port: 80, nodePort: 30080}]}}\n" +
		"- {apiVersion: apps/v1, kind: Deployment, metadata: {name: evil}, spec: {template: {spec: {hostPID: true, containers: [{name: x, image: docker.io/library/busybox, securityContext: {privileged: true}}]}}}}\n" +
		"zz: | #:1.0\"\n"
)

// parseSeeds are template outputs for the differential fuzz target and the unit tests.
var parseSeeds = []string{
	"---\n# Source: app/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n---\n# Source: app/templates/deploy.yaml\n" + deployment,
	injected,
	"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n- {apiVersion: v1, kind: Secret, metadata: {name: b}, type: kubernetes.io/service-account-token}\n",
	"apiVersion: v1\nkind: ConfigMapList\nitems:\n- {metadata: {name: a}, data: {k: v}}\n- {apiVersion: v1, kind: Secret, metadata: {name: b}}\n",
	"apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: ConfigMap, metadata: {name: nested}}]}\n",
	"apiVersion: v1\nkind: List\nitems: []\n",
	"apiVersion: v1\nkind: List\nitems:\n",
	"apiVersion: v1\nkind: List\nitems: {a: 1}\n",
	"apiVersion: v1\nkind: Pod\nmetadata:\n  name: hook\n  annotations:\n    helm.sh/hook: pre-install,post-delete\n    helm.sh/hook-delete-policy: before-hook-creation\nspec: {containers: [{name: x, image: busybox}]}\n",
	"apiVersion: v1\nkind: Pod\nmetadata:\n  name: hook\n  annotations:\n    helm.sh/hook: never-heard-of-it\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\ndata: {k: w}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, name: b}\n",
	"base: &base {k: v, l: w}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  <<: *base\n  l: x\n",
	"base: &base {k: v, l: w}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {l: x, <<: *base}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {1: one, \"1\": uno}\n",
	"{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\"}}\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"b\"}}\n",
	"{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\", \"name\": \"b\"}}",
	"{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\"}}\nkind: Secret\n",
	"---\n{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\"}}\n--- #x\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---x\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n------\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
	"  ---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n   ---   \n",
	"apiVersion: v1\r\nkind: ConfigMap\r\nmetadata: {name: a}\r\n---\r\napiVersion: v1\r\nkind: Secret\r\nmetadata: {name: s}\r\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\r---\rapiVersion: v1\rkind: Secret\rmetadata: {name: s}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n...\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
	"null\n---\n\n---\n# only a comment\n---\n~\n",
	"apiVersion: v1\nKind: Secret\nkind: ConfigMap\nmetadata: {name: a}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\nMetadata: {annotations: {helm.sh/hook: pre-install}}\n",
	"kind: Secret\nmetadata: {name: a}\n",
	"apiVersion: v1\nkind: Secret\nmetadata: {name: a, namespace: other}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {n: 12345678901234567890, f: 1.5e3, b: yes, o: 0777}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n\x00apiVersion: v1\nkind: Secret\nmetadata: {name: b}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: c}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
	strings.Repeat(" ", 4100) + "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\"}}",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: \"" + strings.Repeat("x", 5000) + "\"}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
	"\ufeffapiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
	"%YAML 1.1\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\u2028---\u2028apiVersion: v1\u2028kind: Secret\u2028metadata: {name: s}\n",
	"apiVersion: v1\nkind: List\nmetadata: {name: l, annotations: {helm.sh/hook: pre-upgrade}}\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: s, namespace: null}}\n- {apiVersion: v1, kind: Secret, metadata: {name: t, namespace: 7}}\n",
	"apiVersion: v1\nkind: ServiceList\nitems:\n- metadata: {name: s, namespace: \"\"}\n- kind: Service\n  metadata: {name: t}\n",
	"a: &a {x: 1}\nb: &b {y: 2}\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\ndata: {<<: [*a, *b], \"<<\": z}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n\tk: v\n",
	"{\"apiVersion\": \"batch/v1\", \"kind\": \"Job\", \"metadata\": {\"name\": \"j\", \"annotations\": {\"helm.sh/hook\": \"pre-install\"}}} # c\n\x00apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n--- |\n  x\n",
	"\v\u00a0{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\"}, \"data\": {\"k\": \"v\", \"k\": \"w\"}}\n",
}

// FuzzParseMatchesHelmBuild: arbitrary template output gives, through ParseManifests
// (as a post-renderer buffer) and through Render's reading of template files, exactly
// the objects Helm's real kube client Build creates from it, or a refusal. Helm's client
// is given a loopback address whose every dial fails, and a RESTMapper that takes any
// kind as namespaced.
func FuzzParseMatchesHelmBuild(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		checkMatchesHelm(t, data, templateFiles(data))
	})
}

func TestParseMatchesHelmBuildSeeds(t *testing.T) {
	for i, s := range parseSeeds {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			checkMatchesHelm(t, s, templateFiles(s))
		})
	}
}

// fireworksInjection is issue 25's item 1: a value that closes fireworks-app's image
// string and adds an items list to its Deployment document.
const fireworksInjection = "registry.example.com/nginx\"\nitems:\n" +
	"- {apiVersion: v1, kind: Service, metadata: {name: np}, spec: {type: NodePort, ports: [{port: 80, nodePort: 30080}]}}\n" +
	"- {apiVersion: apps/v1, kind: Deployment, metadata: {name: evil}, spec: {selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, spec: {hostPID: true, containers: [{name: x, image: docker.io/library/busybox, securityContext: {privileged: true}}]}}}}\n" +
	"zz: | #"

// Issue 25, item 1, through Render of fireworks-app: Helm's kube client would create
// the Service and the privileged Deployment in the injected items and not the chart's
// Deployment; Render refuses the document instead of returning the outer Deployment.
func TestRenderRefusesItemsInjectedThroughAValue(t *testing.T) {
	ch := loadChart(t, "1.1.5")
	spec := map[string]any{"image": map[string]any{"repository": fireworksInjection}}
	opts := RenderOptions{ReleaseName: "x", Namespace: "team-a"}

	_, err := Render(ch, spec, opts)
	require.ErrorIs(t, err, ErrRender)
	assert.EqualError(t, err, "chart does not render: template fireworks-app/templates/deployment.yaml: document 1 is a Deployment with an items list: Helm would create the 2 objects in it, not the Deployment; refused")

	// What Helm would have done with the same rendered files.
	processed, _, err := helmValues(ch, spec)
	require.NoError(t, err)
	vals, err := chartvalues.ToRenderValues(processed, spec, chartcommon.ReleaseOptions{Name: "x", Namespace: "team-a", Revision: 1, IsInstall: true}, nil)
	require.NoError(t, err)
	files, err := engine.Render(processed, vals)
	require.NoError(t, err)
	delete(files, "fireworks-app/templates/NOTES.txt")
	created, err := helmBuildRefs(t, files)
	require.NoError(t, err)
	assert.Equal(t, []string{"ConfigMap/x-config", "Deployment/evil", "Service/np", "Service/x-fireworks-app"}, created)

	// A rendered policy evaluated on this composition denies it, naming the refusal.
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	require.NoError(t, e.Set(ctx, Policy{Name: "ha", Rego: haPolicy, Target: v1alpha1.TargetRendered}))
	r := compositionRequest(spec)
	r.Chart = ch
	vs := e.Evaluate(ctx, r)
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Message, "Helm would create the 2 objects in it, not the Deployment")
	assert.Equal(t, v1alpha1.EnforcementDeny, vs[0].Action)
}

func helmBuildRefs(t *testing.T, files map[string]string) ([]string, error) {
	objs, err := helmInstallBuild(t, files)
	var refs []string
	for _, o := range objs {
		refs = append(refs, RenderedObject{Object: o}.Ref())
	}
	slices.Sort(refs)
	return refs, err
}

func src(name, doc string) string { return "---\n# Source: app/templates/" + name + "\n" + doc + "\n" }

// ParseManifests gives the objects Helm's kube client creates, each attributed to the
// template of its document, and refuses the documents it cannot read unambiguously.
func TestParseManifestsAsHelmBuilds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		manifest string
		want     []string // Template: Ref of each object
		refusal  string   // the error's text after "chart does not render: "
	}{{
		name:     "documents and empty documents",
		manifest: src("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}") + src("empty.yaml", "") + src("null.yaml", "null") + src("deploy.yaml", deployment),
		want:     []string{"cm.yaml: ConfigMap/a", "deploy.yaml: Deployment/web"},
	}, {
		name:     "a List's items, apiVersion and kind defaulted from a typed list",
		manifest: src("list.yaml", "apiVersion: v1\nkind: ConfigMapList\nitems:\n- {metadata: {name: a}}\n- {apiVersion: v1, kind: Secret, metadata: {name: b}}"),
		want:     []string{"list.yaml: ConfigMap/a", "list.yaml: Secret/b"},
	}, {
		name:     "an empty List",
		manifest: src("list.yaml", "apiVersion: v1\nkind: List\nitems:"),
	}, {
		name:     "JSON documents",
		manifest: src("a.json", `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}`) + src("b.json", `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}`),
		want:     []string{"a.json: ConfigMap/a", "b.json: ConfigMap/b"},
	}, {
		name:     "a JSON stream",
		manifest: `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}} {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}`,
		want:     []string{": ConfigMap/a", ": ConfigMap/b"},
	}, {
		name:     "separators with comments, CRLF",
		manifest: "--- #x\r\n# Source: app/templates/a.yaml\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata: {name: a}\r\n---  \r\n# Source: app/templates/b.yaml\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata: {name: b}\r\n",
		want:     []string{"a.yaml: ConfigMap/a", "b.yaml: ConfigMap/b"},
	}, {
		name:     "anchors and a merge key placed first",
		manifest: src("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: &l {x: w}}\ndata:\n  <<: *l\n  x: z"),
		want:     []string{"cm.yaml: ConfigMap/a"},
	}, {
		name:     "a hook",
		manifest: "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations: {helm.sh/hook: pre-install}\n",
		want:     []string{": Job/migrate"},
	}, {
		name:     "items injected into a Deployment",
		manifest: src("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}") + src("deployment.yaml", injected),
		refusal:  "template app/templates/deployment.yaml: document 1 is a Deployment with an items list: Helm would create the 2 objects in it, not the Deployment; refused",
	}, {
		name:     "an items key that is not a list",
		manifest: src("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\nitems: {a: b}"),
		refusal:  "template app/templates/cm.yaml: document 1 is a ConfigMap with an items key: Helm would read it as a list, not as the ConfigMap; refused",
	}, {
		name:     "a List of scalars",
		manifest: src("list.yaml", "apiVersion: v1\nkind: List\nitems: [a]"),
		refusal:  "template app/templates/list.yaml: document 1 is a List whose item 1 is not an object; refused",
	}, {
		name:     "a list inside a list",
		manifest: src("list.yaml", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: Secret, metadata: {name: s}}]}"),
		refusal:  "template app/templates/list.yaml: document 1 is a List whose item 1 has an items key: a list inside a list; refused",
	}, {
		name:     "a duplicate key",
		manifest: src("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}") + src("secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: Opaque\ntype: kubernetes.io/service-account-token"),
		refusal:  `template app/templates/secret.yaml: document 1 has the key "type" twice in a mapping: parsers disagree on which value counts; refused`,
	}, {
		name:     "keys that become the same JSON key",
		manifest: src("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {1: one, \"1\": uno}"),
		refusal:  `template app/templates/cm.yaml: document 1 has the key "1" twice in a mapping: parsers disagree on which value counts; refused`,
	}, {
		name:     "a duplicate key in JSON",
		manifest: `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "name": "b"}}`,
		refusal:  `the manifests: document 1 has a duplicate key (duplicate field "metadata.name"): parsers disagree on which value counts; refused`,
	}, {
		name:     "a merge key after the key it overrides",
		manifest: src("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: &l {x: w}}\ndata: {x: z, <<: *l}"),
		refusal:  `template app/templates/cm.yaml: document 1 has a merge key (<<) after the key "x" it also brings: Helm keeps the merged value, the YAML spec the explicit one; put "<<" first; refused`,
	}, {
		name:     "a document after a lone carriage return",
		manifest: src("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\r---\rapiVersion: v1\rkind: Secret\rmetadata: {name: s}"),
		refusal:  `template app/templates/cm.yaml: document 1 has text after the end of its YAML document (after "..." or a "---" not at the start of a line): Helm ignores it, other parsers read more documents; refused`,
	}, {
		name:     "a hook annotation in a head key of another case",
		manifest: src("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\nMetadata: {annotations: {helm.sh/hook: pre-install}}"),
		refusal:  `template app/templates/cm.yaml: document 1 has the key "Metadata": Helm reads a document's head without regard to case, the API server with it; refused`,
	}, {
		name:     "no apiVersion",
		manifest: src("secret.yaml", "kind: Secret\nmetadata: {name: s}"),
		refusal:  "template app/templates/secret.yaml: document 1 is a Secret without an apiVersion: Helm would use whichever version the cluster prefers; refused",
	}, {
		name:     "JSON then YAML in one document",
		manifest: "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\"}}\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
		refusal:  `the manifests: JSON and YAML documents are mixed without a "---" between them; refused`,
	}, {
		name:     "a separator followed by text",
		manifest: src("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---x"),
		refusal:  "template app/templates/cm.yaml: Helm cannot read it: invalid Yaml document separator: x; refused",
	}, {
		name:     "not a mapping",
		manifest: src("cm.yaml", "- a"),
		refusal:  "template app/templates/cm.yaml: document 1 is not a mapping; refused",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := ParseManifests(tc.manifest)
			if tc.refusal != "" {
				require.ErrorIs(t, err, ErrRender)
				assert.Equal(t, "chart does not render: "+tc.refusal, err.Error())
			} else {
				require.NoError(t, err)
				var got []string
				for _, o := range objs {
					got = append(got, strings.TrimPrefix(o.Template, "app/templates/")+": "+o.Ref())
				}
				assert.Equal(t, tc.want, got)
			}
			// Whatever Compositor accepts, Helm's kube client builds the same objects from.
			checkMatchesHelm(t, tc.manifest, templateFiles(tc.manifest))
		})
	}
}

// Render reads template files as Helm's install does: a hook is built on its own, a
// hook of an unknown event is never created, and objects keep their template.
func TestObjectsOfTemplateFiles(t *testing.T) {
	files := map[string]string{
		"app/templates/a.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n" + "apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Service, metadata: {name: s}}]\n",
		"app/templates/hook.yaml":    `{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "annotations": {"helm.sh/hook": "post-install"}}}`,
		"app/templates/odd.yaml":     "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {helm.sh/hook: someday}}\n",
		"app/templates/_helpers.tpl": "",
	}
	objs, err := objectsOf(maps.Clone(files), nil)
	require.NoError(t, err)
	var got []string
	for _, o := range objs {
		got = append(got, o.Template+": "+o.Ref())
	}
	assert.Equal(t, []string{"app/templates/a.yaml: ConfigMap/a", "app/templates/a.yaml: Service/s", "app/templates/hook.yaml: Job/j"}, got)
	checkMatchesHelm(t, "", files)
}

func TestObjectKey(t *testing.T) {
	cm := func(md map[string]any) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": map[string]any{"k": "v"}}
	}
	key := ObjectKey(cm(map[string]any{"name": "a"}), "team-a")
	assert.Len(t, key, 64)
	assert.Equal(t, key, ObjectKey(cm(map[string]any{"name": "a", "namespace": "team-a"}), "team-a"))
	assert.Equal(t, key, ObjectKey(cm(map[string]any{"name": "a", "namespace": ""}), "team-a"))
	assert.NotEqual(t, key, ObjectKey(cm(map[string]any{"name": "a", "namespace": "team-b"}), "team-a"))
	assert.NotEqual(t, key, ObjectKey(cm(map[string]any{"name": "b"}), "team-a"))
	assert.Equal(t, ObjectKey(map[string]any{"kind": "X"}, "ns"), ObjectKey(map[string]any{"kind": "X", "metadata": map[string]any{"namespace": "ns"}}, "ns"))

	md := map[string]any{"name": "a", "namespace": "team-a"}
	ObjectKey(cm(md), "team-a")
	assert.Equal(t, "team-a", md["namespace"], "the object is not modified")
	assert.NotEmpty(t, ObjectKey(map[string]any{"bad": func() {}}, "ns"))
}

// decodeDocumentsWithStreamDecoder is decodeDocuments as Helm's StreamVisitor reads a
// stream, always through apimachinery's YAMLOrJSONDecoder.
func decodeDocumentsWithStreamDecoder(stream string) ([][]byte, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(stream), streamBufferSize)
	var out [][]byte
	for {
		ext := runtime.RawExtension{}
		if err := dec.Decode(&ext); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		raw := bytes.TrimSpace(ext.Raw)
		if bytes.Equal(raw, []byte("null")) {
			raw = nil
		}
		out = append(out, raw)
	}
}

// checkDecodeAndBuild fails unless decodeDocuments reads stream as the stream decoder
// does (documents and error text), and unless buildPlain, wherever it answers, gives
// what the resource builder gives from those documents.
func checkDecodeAndBuild(t *testing.T, stream string) {
	t.Helper()
	raws, err := decodeDocuments(stream)
	want, wantErr := decodeDocumentsWithStreamDecoder(stream)
	differ := (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() || !sameDocuments(raws, want)
	if differ && newManifestDecoder().add(stream, func(string) string { return "t.yaml" }) != nil {
		// The stream decoder is not even the same as itself on some streams the
		// decoder refuses: YAML keys that are one JSON key (1 and "1") come out in
		// Go's map order. What a refused stream decodes to is never used.
		return
	}
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("decodeDocuments(%q): error %v, the stream decoder's %v", stream, err, wantErr)
	}
	if !sameDocuments(raws, want) {
		t.Fatalf("decodeDocuments(%q) = %q, the stream decoder's %q", stream, raws, want)
	}
	var objects []map[string]any
	for _, raw := range raws {
		if len(raw) == 0 {
			continue
		}
		var m map[string]any
		if kjson.UnmarshalCaseSensitivePreserveInts(raw, &m) != nil || m == nil {
			return // refuseAmbiguous refuses it: buildPlain is never asked
		}
		objects = append(objects, m)
	}
	got, ok := buildPlain(raws, objects)
	if !ok {
		return
	}
	built, err := build(raws)
	if err != nil {
		t.Fatalf("buildPlain accepted what the resource builder fails on (%v): %q", err, raws)
	}
	if len(built) == 0 {
		built = nil
	}
	if len(got) == 0 {
		got = nil
	}
	if !reflect.DeepEqual(got, built) {
		t.Fatalf("buildPlain(%q) = %v, the resource builder's %v", raws, got, built)
	}
}

// buildSeeds are documents whose build the resource builder does something to, or fails.
var buildSeeds = []string{
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: \"\"}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: null}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: 7}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: team-a}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: [a]\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: null\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {labels: {a: 1}}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {creationTimestamp: yesterday}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {Namespace: x, namespace: \"\"}\n",
	"apiVersion: a/b/c\nkind: ConfigMap\n",
	"apiVersion: 1\nkind: ConfigMap\n",
	"apiVersion: v1\nkind: 1\n",
	"apiVersion: v1\n",
	"kind: ConfigMap\n",
	"apiVersion: v1\nkind: ConfigMap\nItems: [1]\n",
	"apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: \"\"}}]\n",
	"apiVersion: v1\nkind: List\nitems: null\n",
	"{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"a\", \"namespace\": \"\"}} {\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"namespace\": 5}}",
	"{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"kind\": 5}",
	"{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": 5, \"name\": \"a\"}}",
	"{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"\\u0069tems\": [{\"kind\": \"Secret\"}]}",
	"a: 1\n---\nb: 2\n--- #c\napiVersion: v1\nkind: ConfigMap\n---\n",
	"apiVersion: v1\nkind: ConfigMap\ndata: {n: 12345678901234567890, f: 1.5e3, i: 7, b: yes}\n",
}

func TestDecodeAndBuildPlainMatchStreamDecoderAndBuilder(t *testing.T) {
	for i, s := range append(append([]string{}, buildSeeds...), parseSeeds...) {
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkDecodeAndBuild(t, s) })
	}
}

// FuzzDecodeAndBuildPlain: decodeDocuments reads any stream as apimachinery's stream
// decoder does, and buildPlain, wherever it answers, gives what cli-runtime's resource
// builder gives.
func FuzzDecodeAndBuildPlain(f *testing.F) {
	for _, s := range buildSeeds {
		f.Add(s)
	}
	for _, s := range parseSeeds {
		f.Add(s)
	}
	f.Fuzz(checkDecodeAndBuild)
}

// buildPlain answers for plain objects, clearing an empty namespace as the resource
// builder does, and leaves lists and what the builder fails on to it.
func TestBuildPlain(t *testing.T) {
	plain := func(stream string) ([]map[string]any, bool) {
		t.Helper()
		raws, err := decodeDocuments(stream)
		require.NoError(t, err)
		var objects []map[string]any
		for _, raw := range raws {
			if len(raw) > 0 {
				var m map[string]any
				require.NoError(t, kjson.UnmarshalCaseSensitivePreserveInts(raw, &m))
				objects = append(objects, m)
			}
		}
		checkDecodeAndBuild(t, stream)
		return buildPlain(raws, objects)
	}
	objs, ok := plain("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: \"\"}\ndata: {k: 7}\n")
	require.True(t, ok)
	assert.Equal(t, []map[string]any{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}, "data": map[string]any{"k": int64(7)}}}, objs)
	objs, ok = plain("{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"namespace\": \"b\"}} {\"apiVersion\": \"v1\", \"kind\": \"Secret\"}")
	require.True(t, ok)
	assert.Equal(t, []map[string]any{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": "b"}}, {"apiVersion": "v1", "kind": "Secret"}}, objs)
	for _, s := range []string{
		"apiVersion: v1\nkind: List\nitems: []\n",
		"apiVersion: v1\nkind: ConfigMap\nitems: null\n",
		"apiVersion: a/b/c\nkind: ConfigMap\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 1}\n",
		"apiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\nkind: List\nitems: []\n",
	} {
		_, ok := plain(s)
		assert.False(t, ok, s)
	}
}
