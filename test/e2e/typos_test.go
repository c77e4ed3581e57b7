package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// A write mode: how a client sends a composition, and so which field validation the
// API server applies to it.
type writeMode struct {
	name  string
	write func(ctx context.Context, cp *controlplane.ControlPlane, obj *unstructured.Unstructured) error
	// dropsNulls: kubectl apply sends a manifest without its null values (in an
	// apply, a null means "delete the field").
	dropsNulls bool
}

// writeModes are the clients of issue 16: kubectl's default (fieldValidation=Strict),
// kubectl --validate=warn (Warn), kubectl --validate=false (Ignore) and client-go with
// its defaults (no fieldValidation: the API server's default).
var writeModes = []writeMode{
	{"kubectl-strict", kubectlWrite("apply"), true},
	{"kubectl-warn", kubectlWrite("apply", "--validate=warn"), true},
	{"kubectl-ignore", kubectlWrite("create", "--validate=false"), false},
	{"client-go-default", func(ctx context.Context, cp *controlplane.ControlPlane, obj *unstructured.Unstructured) error {
		return cp.Client.Create(ctx, obj.DeepCopy())
	}, false},
}

func kubectlWrite(args ...string) func(context.Context, *controlplane.ControlPlane, *unstructured.Unstructured) error {
	return func(ctx context.Context, cp *controlplane.ControlPlane, obj *unstructured.Unstructured) error {
		manifest, err := yaml.Marshal(obj.Object)
		if err != nil {
			return err
		}
		res := cp.Kubectl(ctx, string(manifest), append(args, "-f", "-")...)
		if res.Err != nil {
			return fmt.Errorf("%w: %s", res.Err, res.Stderr)
		}
		return nil
	}
}

// testChart serves the chart directory test/e2e/testdata/name and applies a Ready
// definition of it in namespace name; it returns the chart directory.
func testChart(t *testing.T, cp *controlplane.ControlPlane, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", name))
	require.NoError(t, err)
	ch, err := loader.Load(dir)
	require.NoError(t, err)
	applyDefinition(t, cp, serveCharts(t, ch).URL, name, name, ch.Metadata.Version)
	return dir
}

// composition is an object of kind in namespace with spec given as YAML.
func composition(t *testing.T, kind, namespace, name, spec string) *unstructured.Unstructured {
	t.Helper()
	var values map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(spec), &values), spec)
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "composition.krateo.io/v0-1-0",
		"kind":       kind,
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec":       values,
	}}
}

// helmTemplateValues runs `helm template` on chartDir with spec as a values file and
// returns its error output, or "" when Helm renders the chart.
func helmTemplateValues(t *testing.T, cp *controlplane.ControlPlane, chartDir, spec string) string {
	t.Helper()
	// Not t.TempDir: its path comes from the test's name, and helm splits -f at commas.
	dir, err := os.MkdirTemp("", "values")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	file := filepath.Join(dir, "values.yaml")
	require.NoError(t, os.WriteFile(file, []byte(spec), 0o600))
	res := cp.Helm(context.Background(), "template", "check", chartDir, "-f", file)
	if res.Err == nil {
		return ""
	}
	require.NotEmpty(t, res.Stderr, "helm failed without saying why: %v", res.Err)
	return res.Stderr
}

// stored returns the spec of a composition as the API server keeps it, or nil.
func stored(t *testing.T, cp *controlplane.ControlPlane, obj *unstructured.Unstructured) map[string]any {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(obj.GroupVersionKind())
	err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), got)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(t, err)
	spec, _ := got.Object["spec"].(map[string]any)
	return spec
}

// typoCases mimic the 18 typos of issue 16 found on real charts: each writes one key
// the chart's schema forbids (additionalProperties: false, or unevaluatedProperties),
// in every shape those charts use.
var typoCases = []struct {
	name, spec, key string
}{
	{"top-level closed object (cert-manager)", "replicaCuont: 3", "replicaCuont"},
	{"nested closed object", "image: {repositry: nginx}", "repositry"},
	{"closed object two levels down", "securityContext: {capabilities: {dorp: [ALL]}}", "dorp"},
	{"closed object as a map value (traefik ports)", "ports: {web: {portt: 8000}}", "portt"},
	{"closed array items", "extraEnv: [{name: A, vaule: b}]", "vaule"},
	{"closed object under allOf/$ref", "webhook: {replicaCuont: 2}", "replicaCuont"},
	{"closed object under if/then", "mode: deployment\ndeployment: {replcas: 2}", "replcas"},
	{"closed patternProperties value (opentelemetry exporters)", `config: {exporters: {otlp: {endpiont: "collector:4317"}}}`, "endpiont"},
	{"closed object behind $ref to $defs", "service: {annotatoins: {a: b}}", "annotatoins"},
	{"closed oneOf branches", "persistence: {enabled: true, szie: 1Gi}", "szie"},
	{"closed anyOf branch", "logs: {levle: debug}", "levle"},
	{"closed map value inside a closed object (datadog checks)", "datadog: {checks: {redisdb: {intances: [{}]}}}", "intances"},
	{"closed items of a list inside list items (ingress paths)", "ingress: {hosts: [{host: a.example, paths: [{path: /, pathTyp: Prefix}]}]}", "pathTyp"},
	{"nullable closed object", "tls: {secertName: s}", "secertName"},
	{"closed root of a subchart", "redis: {replicCount: 2}", "replicCount"},
	{"closed object with a values.yaml default", `resources: {limts: {cpu: "1"}}`, "limts"},
	{"unevaluatedProperties: false", "strategy: {rollingUpdat: {}}", "rollingUpdat"},
	{"closed object under if/else", "autoscaling: {enabled: false, minReplcas: 2}", "minReplcas"},
}

// typoAppValid uses every shape of typo-app correctly: admitted, and stored as written.
const typoAppValid = `replicaCount: 2
image: {repository: nginx, tag: "1.27", pullPolicy: IfNotPresent}
securityContext: {runAsUser: 1000, capabilities: {drop: [ALL]}}
ports: {web: {port: 8000, expose: true, protocol: TCP}}
extraEnv: [{name: A, value: b}]
webhook: {enabled: true, replicaCount: 1}
mode: deployment
deployment: {replicas: 2}
config: {exporters: {otlp: {endpoint: "collector:4317", insecure: true}}}
service: {type: ClusterIP, annotations: {a: b}}
persistence: {enabled: true, size: 1Gi}
logs: {level: info, format: json}
datadog: {apiKey: k, checks: {redisdb: {init_config: {}, instances: [{}]}}}
ingress: {enabled: true, hosts: [{host: a.example, paths: [{path: /, pathType: Prefix}]}]}
tls: {secretName: s}
resources: {limits: {cpu: "1"}}
strategy: {type: RollingUpdate, rollingUpdate: {}}
autoscaling: {enabled: true, minReplicas: 1, maxReplicas: 3}
redis: {replicaCount: 2}
`

// Issue 16, item 3: a key the chart's schema forbids is refused with Helm's reason,
// naming the key, whatever field validation the client asks for: the API server never
// prunes it before the webhook judges the composition.
func TestTyposAreRefusedWhateverTheClientsFieldValidation(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	dir := testChart(t, cp, "typo-app")
	ctx := context.Background()

	require.Empty(t, helmTemplateValues(t, cp, dir, typoAppValid), "Helm accepts the valid values")
	for _, mode := range writeModes {
		obj := composition(t, "TypoApp", "typo-app", "valid-"+mode.name, typoAppValid)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NoError(c, mode.write(ctx, cp, obj))
		}, time.Minute, 250*time.Millisecond, "%s: valid values admitted", mode.name)
		assert.Equal(t, normalizedJSON(t, obj.Object["spec"]), normalizedJSON(t, stored(t, cp, obj)), "%s: stored as written", mode.name)
	}

	for i, tc := range typoCases {
		t.Run(tc.name, func(t *testing.T) {
			helmErr := helmTemplateValues(t, cp, dir, tc.spec)
			require.NotEmpty(t, helmErr, "Helm refuses %s", tc.spec)
			assert.Contains(t, helmErr, tc.key, "Helm names the key")
			for _, mode := range writeModes {
				obj := composition(t, "TypoApp", "typo-app", fmt.Sprintf("typo-%02d-%s", i+1, mode.name), tc.spec)
				err := mode.write(ctx, cp, obj)
				if !assert.Error(t, err, "%s: %s admitted", mode.name, tc.spec) {
					t.Logf("%s: stored as %v", mode.name, stored(t, cp, obj))
					continue
				}
				line := denialLine(err.Error(), tc.key)
				assert.NotEmpty(t, line, "%s: the denial names %q:\n%v", mode.name, tc.key, err)
				assert.Contains(t, line, "(values.schema.json", "%s: judged by the chart's schema:\n%v", mode.name, err)
				assert.Nil(t, stored(t, cp, obj), "%s: nothing stored", mode.name)
				t.Logf("%s: %s", mode.name, line)
			}
		})
	}
}

// denialLine is the line of a denial that names key.
func denialLine(denial, key string) string {
	for _, l := range strings.Split(denial, "\n") {
		if strings.Contains(l, key) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// subchartCases write values for subcharts Helm may disable and for a subchart's own
// global; each is admitted exactly when `helm template` accepts it, but for a key no
// chart reads (unread), which kubectl's default strict validation refuses (issue 49).
var subchartCases = []struct {
	name, spec string
	helmAdmits bool // what bin/k8s/helm template said when the case was written
	unread     string
}{
	{"disabled subchart with leftover bad values and a typo", "alertmanager: {enabled: false, replicaCount: 0, replicaCuont: 2}", true, "alertmanager.replicaCuont"},
	{"enabled subchart with a bad value", "alertmanager: {replicaCount: 0}", false, ""},
	{"subchart disabled by default, bad leftovers", "mariadb: {auth: {rootPassword: 5}}", true, ""},
	{"same subchart enabled", "mariadb: {enabled: true, auth: {rootPassword: 5}}", false, ""},
	{"a disabled subchart's key holding a string", `mariadb: "off"`, false, ""},
	{"subchart disabled by its tag", "tags: {monitoring: false}\nmetrics: {port: 70000}", true, ""},
	{"same subchart enabled (tag unset)", "metrics: {port: 70000}", false, ""},
	{"subchart's own global replaced by the parent's", `common: {global: {imageRegistry: "Not A Registry"}}`, true, ""},
	{"parent's global copied into the subchart", `global: {imageRegistry: "Not A Registry"}`, false, ""},
	{"subchart-only global key", "common: {global: {other: 1}}", true, "common.global.other"},
	{"parent's global default deleted by null", "global: {imageRegistry: null}", true, ""},
	{"subchart's global not a map", `common: {global: "x"}`, false, ""},
	// Helm 4: a null among the parent chart's defaults (alertmanager.replicaCount) no
	// longer deletes the subchart's default (its required replicaCount) when the values
	// leave the subchart out; Helm 3 refused these values. Values of the subchart's own
	// bring the parent's null back, as in Helm 3.
	{"a parent's null default keeps the subchart's default", "mariadb: {enabled: false}", true, ""},
	{"the same null deletes it under the values' own", "alertmanager: {enabled: true}", false, ""},
}

// Issue 16, item 4: subchart constraints follow Helm. A composition is admitted
// exactly when `helm template` accepts the same values with the same chart, for
// strict and non-strict clients; a strict client's is refused too when it holds a key
// no chart reads (issue 49).
func TestSubchartConstraintsFollowHelm(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	dir := testChart(t, cp, "sub-app")
	ctx := context.Background()

	for _, mode := range []writeMode{writeModes[0], writeModes[3]} {
		obj := composition(t, "SubApp", "sub-app", "valid-"+mode.name, "alertmanager: {replicaCount: 2}")
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NoError(c, mode.write(ctx, cp, obj))
		}, time.Minute, 250*time.Millisecond, "%s: valid values admitted", mode.name)
	}

	for i, tc := range subchartCases {
		t.Run(tc.name, func(t *testing.T) {
			helmErr := helmTemplateValues(t, cp, dir, tc.spec)
			helmAdmits := helmErr == ""
			require.Equal(t, tc.helmAdmits, helmAdmits, "helm template on %s: %s", tc.spec, helmErr)
			for _, mode := range []writeMode{writeModes[0], writeModes[3]} {
				obj := composition(t, "SubApp", "sub-app", fmt.Sprintf("sub-%02d-%s", i+1, mode.name), tc.spec)
				err := mode.write(ctx, cp, obj)
				if helmAdmits && tc.unread != "" && mode.name == "kubectl-strict" {
					if assert.Error(t, err, "%s: %s admitted", mode.name, tc.spec) {
						assert.Contains(t, err.Error(), "spec."+tc.unread+": Invalid value: SubApp v0-1-0 has no such value")
					}
					assert.Nil(t, stored(t, cp, obj), "%s: nothing stored", mode.name)
					continue
				}
				if helmAdmits {
					if assert.NoError(t, err, "%s: Helm accepts %s", mode.name, tc.spec) {
						want := obj.Object["spec"]
						if mode.dropsNulls {
							want = withoutNulls(want)
						}
						assert.Equal(t, normalizedJSON(t, want), normalizedJSON(t, stored(t, cp, obj)), "%s: stored as sent", mode.name)
					}
					continue
				}
				if assert.Error(t, err, "%s: Helm refuses %s:\n%s", mode.name, tc.spec, helmErr) {
					t.Logf("%s: %s", mode.name, strings.TrimSpace(err.Error()))
				}
				assert.Nil(t, stored(t, cp, obj), "%s: nothing stored", mode.name)
			}
		})
	}
}

// withoutNulls is v without the null values of its maps, as kubectl apply sends it.
func withoutNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if x != nil {
				out[k] = withoutNulls(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = withoutNulls(x)
		}
		return out
	}
	return v
}

// normalizedJSON gives a value the number types the API server returns.
func normalizedJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := yaml.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, yaml.Unmarshal(b, &out))
	return out
}
