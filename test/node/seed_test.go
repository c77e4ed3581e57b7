//go:build node

package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compositor-dev/compositor/generators/rbac"
	compositionctl "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/samples"
)

const (
	release      = "compositor"
	releaseNS    = "compositor-system"
	definitionNS = "fireworksapp-system"
)

// countingHandler counts the requests per path it serves.
type countingHandler struct {
	next  http.Handler
	mu    sync.Mutex
	paths map[string]int
}

func (h *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.paths[r.URL.Path]++
	h.mu.Unlock()
	h.next.ServeHTTP(w, r)
}

func (h *countingHandler) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.paths[path]
}

// TestSeedFlow installs Compositor with its chart (2 replicas, built-in certificates,
// the image `make image` built and the runner imported) and follows the README's first
// definition: the definition Ready, its CRD, the generated controller Deployment
// Available, a composition installed by that controller as a Helm release, and the
// upgrade to 1.1.6.
func TestSeedFlow(t *testing.T) {
	repo, err := samples.NewRepository()
	if err != nil {
		t.Fatal(err)
	}
	charts := &countingHandler{next: repo, paths: map[string]int{}}
	chartURL := serveSampleCharts(t, charts)
	t.Logf("sample charts served to the pods at %s", chartURL)

	if env.reused {
		// Only a clean cluster: etcd outlives the runner, so `make cluster` brings back
		// an earlier run's installation, and taking it apart is not part of this test.
		if out, err := command(t, time.Minute, "", "kubectl", "get", "namespace", releaseNS, definitionNS, "--ignore-not-found", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
			t.Fatalf("the running cluster already has %s or %s (%v): `make cluster-down` and let `make test-node` "+
				"start a fresh cluster, or `make cluster CLUSTER_ARGS=-reset`:\n%s", releaseNS, definitionNS, err, out)
		}
	}
	diagnoseOnFailure(t)

	// Compositor from its chart.
	started := time.Now()
	helm(t, "install", release, "charts/compositor", "-n", releaseNS, "--create-namespace",
		"--set", "replicaCount=2",
		"--set", "certs.mode=builtin",
		"--set", "image.pullPolicy=Never", // the imported image, never a registry
		"--set", "reconciler.allowChartNetworks={"+podNetwork+"}",
		// The sample charts are served over HTTPS on the bridge (no uplink) with a
		// certificate the pods do not trust: the definitions skip verification.
		"--set", "policies.disabledBuiltins={no-insecure-tls}",
		"--wait", "--timeout", "3m")
	t.Logf("helm install compositor: %s", time.Since(started).Round(100*time.Millisecond))
	selector := "app.kubernetes.io/name=compositor,app.kubernetes.io/instance=" + release
	kubectl(t, "wait", "pods", "-n", releaseNS, "-l", selector, "--for", "condition=Ready=True", "--timeout", "2m")
	ready := kubectl(t, "get", "pods", "-n", releaseNS, "-l", selector,
		"-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
	if n := strings.Count(ready, "=True"); n != 2 {
		t.Fatalf("want 2 Ready Compositor pods, got %d:\n%s", n, ready)
	}
	eventually(t, "a Compositor replica holds the leader lease", time.Minute, func() error {
		holder := kubectl(t, "get", "lease", "-n", releaseNS, "compositor.compositor.dev", "-o", "jsonpath={.spec.holderIdentity}")
		if !strings.HasPrefix(holder, "compositor-") {
			return fmt.Errorf("holder %q", holder)
		}
		return nil
	})

	// The README's first definition, from the charts on the bridge.
	kubectl(t, "create", "namespace", definitionNS)
	kubectlApply(t, fmt.Sprintf(`apiVersion: core.krateo.io/v1alpha1
kind: CompositionDefinition
metadata:
  name: fireworksapp-1-1-5
  namespace: %s
spec:
  chart:
    repo: fireworks-app
    url: %s
    version: 1.1.5
    insecureSkipVerifyTLS: true
`, definitionNS, chartURL))
	started = time.Now()
	kubectl(t, "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", definitionNS, "--for", "condition=Ready=True", "--timeout", "3m")
	t.Logf("definition Ready: %s", time.Since(started).Round(100*time.Millisecond))
	if charts.count("/index.yaml") == 0 || charts.count("/fireworks-app-1.1.5.tgz") == 0 {
		t.Fatalf("Compositor did not fetch the chart from %s (index %d, 1.1.5 %d)", chartURL,
			charts.count("/index.yaml"), charts.count("/fireworks-app-1.1.5.tgz"))
	}
	t.Log(kubectl(t, "get", "compositiondefinitions", "-A", "-o", "wide"))
	kubectl(t, "get", "crd", "fireworksapps.composition.krateo.io")

	// The version's controller and its identity live in Compositor's namespace, where
	// no tenant of the definition's namespace writes.
	waitAvailable(t, controllerName("v1-1-5"))
	sa := kubectl(t, "get", "deployment", controllerName("v1-1-5"), "-n", releaseNS,
		"-o", "jsonpath={.spec.template.spec.serviceAccountName}")
	if sa != controllerName("v1-1-5") {
		t.Fatalf("the controller Deployment runs as %q, want its generated ServiceAccount %s", sa, controllerName("v1-1-5"))
	}
	t.Logf("%s runs as ServiceAccount %s", controllerName("v1-1-5"), sa)
	controllerKeys(t, sa)

	// A composition, installed by that controller.
	kubectlApply(t, fmt.Sprintf(`apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata:
  name: demo
  namespace: %s
spec:
  replicaCount: 2
`, definitionNS))
	started = time.Now()
	kubectl(t, "wait", "fireworksapp", "demo", "-n", definitionNS, "--for", "condition=Ready=True", "--timeout", "3m")
	t.Logf("composition Ready: %s", time.Since(started).Round(100*time.Millisecond))
	// Healthy reads the release's objects on the node as kstatus does: the chart's
	// image is not on the node (it has no registry), so its Deployment does not roll
	// out, and Healthy says so, naming it, while Ready says it is installed.
	eventually(t, "Healthy names the Deployment that does not roll out", 2*time.Minute, func() error {
		out := kubectl(t, "get", "fireworksapp", "demo", "-n", definitionNS, "-o",
			`jsonpath={.status.conditions[?(@.type=="Healthy")].status} {.status.conditions[?(@.type=="Healthy")].reason}: {.status.conditions[?(@.type=="Healthy")].message}`)
		if !strings.HasPrefix(out, "False ") || !strings.Contains(out, "Deployment.apps/") || !strings.Contains(out, "of release demo is not ready") {
			return fmt.Errorf("Healthy: %q", out)
		}
		t.Logf("Healthy: %s", out)
		return nil
	})
	eventually(t, "helm list shows demo at fireworks-app-1.1.5, deployed", time.Minute, func() error {
		return releaseAt("demo", "fireworks-app-1.1.5")(t)
	})
	// The controller reports the install on the composition; the event names who sent it.
	event := kubectl(t, "get", "events", "-n", definitionNS, "--field-selector", "reason=HelmInstalled,involvedObject.name=demo",
		"-o", `jsonpath={range .items[*]}{.source.component}/{.reportingComponent}/{.reportingInstance}: {.message}{"\n"}{end}`)
	if !strings.Contains(event, "fireworks-app 1.1.5") || !strings.Contains(event, controllerName("v1-1-5")+"-") {
		t.Fatalf("want a HelmInstalled event for demo at fireworks-app 1.1.5 from a pod of %s:\n%s", controllerName("v1-1-5"), event)
	}
	t.Logf("HelmInstalled: %s", event)

	// The upgrade to 1.1.6.
	started = time.Now()
	kubectl(t, "patch", "compositiondefinition", "fireworksapp-1-1-5", "-n", definitionNS,
		"--type", "merge", "-p", `{"spec":{"chart":{"version":"1.1.6"}}}`)
	waitAvailable(t, controllerName("v1-1-6"))
	eventually(t, "the 1.1.5 controller Deployment is gone", 3*time.Minute, func() error {
		out, err := command(t, time.Minute, "", "kubectl", "get", "deployment", controllerName("v1-1-5"), "-n", releaseNS)
		if err == nil {
			return fmt.Errorf("still there:\n%s", out)
		}
		if !strings.Contains(out, "NotFound") {
			return fmt.Errorf("kubectl get: %v: %s", err, out)
		}
		return nil
	})
	eventually(t, "helm list shows demo at fireworks-app-1.1.6, deployed", 3*time.Minute, func() error {
		return releaseAt("demo", "fireworks-app-1.1.6")(t)
	})
	if charts.count("/fireworks-app-1.1.6.tgz") == 0 {
		t.Fatalf("nothing fetched fireworks-app 1.1.6 from %s", chartURL)
	}
	t.Logf("upgrade to 1.1.6: %s", time.Since(started).Round(100*time.Millisecond))
	env.seeded = true
}

// The tests after the seed flow build on what it installed, and go test runs a
// package's tests in the order of its files, then of their declarations: so they are
// declared here, after TestSeedFlow, and written in teams_test.go, failover_test.go and
// lifecycle_test.go. TestLifecycle uninstalls Compositor: it comes after them, and
// TestCertManager, which installs Compositor again in cert-manager mode (the webhook
// configurations are cluster-scoped: one installation at a time), comes last.

// TestTwoTeams: see twoTeams (in teams_test.go).
func TestTwoTeams(t *testing.T) { afterSeed(t); twoTeams(t) }

// TestFailover: see failover.
func TestFailover(t *testing.T) { afterSeed(t); failover(t) }

// TestLifecycle: see lifecycle.
func TestLifecycle(t *testing.T) { afterSeed(t); lifecycle(t) }

// TestCertManager: see certManagerMode (in certmanager_test.go). It needs no seed.
func TestCertManager(t *testing.T) { certManagerMode(t) }

// afterSeed skips a test unless TestSeedFlow's installation is there: installed by
// this run, or left by an earlier one on a running cluster (COMPOSITOR_NODE_KEEP=1).
func afterSeed(t *testing.T) {
	t.Helper()
	if env.seeded {
		return
	}
	if _, err := command(t, time.Minute, "", "helm", "status", release, "-n", releaseNS); err == nil {
		if _, err := command(t, time.Minute, "", "kubectl", "get", "fireworksapp", "demo", "-n", definitionNS); err == nil {
			return
		}
	}
	t.Skip("needs TestSeedFlow's installation: run TestSeedFlow first (-run 'TestSeedFlow|" + t.Name() + "')")
}

// controllerKeys checks, through the API server's own authorizer, what the controller's
// ServiceAccount may read of Compositor's keys: its definition's key Secret, and not the
// master key, another Secret of Compositor's namespace, or a list of them.
func controllerKeys(t *testing.T, sa string) {
	t.Helper()
	var keys []string
	eventually(t, "the key Secret of the definition", 2*time.Minute, func() error {
		keys = strings.Fields(kubectl(t, "get", "secrets", "-n", releaseNS, "-l", compositionctl.LabelSealKeyOfDefinition, "-o", "jsonpath={.items[*].metadata.name}"))
		if len(keys) != 1 {
			return fmt.Errorf("want the key Secret of the one definition in %s, found %q", releaseNS, keys)
		}
		return nil
	})
	if got := canI(t, sa, "get", "secret/"+keys[0]); got != "yes" {
		t.Fatalf("the controller may not get its definition's key %s: %q", keys[0], got)
	}
	for _, check := range [][2]string{{"get", "secret/compositor-release-seal"}, {"get", "secret/compositor-webhook-ca"}, {"list", "secrets"}, {"watch", "secrets"}} {
		if got := canI(t, sa, check[0], check[1]); got != "no" {
			t.Fatalf("the controller's token may %s %s in %s: %q, want no", check[0], check[1], releaseNS, got)
		}
	}
	t.Logf("%s may get its definition's key %s only", sa, keys[0])
}

// controllerName is the name of the controller Deployment (and ServiceAccount) of a
// version of fireworksapps, in Compositor's namespace.
func controllerName(version string) string {
	return rbac.ServiceAccountName(definitionNS, "fireworksapps", version)
}

// waitAvailable waits for the controller Deployment name in Compositor's namespace.
func waitAvailable(t *testing.T, name string) {
	t.Helper()
	started := time.Now()
	eventually(t, "deployment "+name+" exists", 3*time.Minute, func() error {
		out, err := command(t, time.Minute, "", "kubectl", "get", "deployment", name, "-n", releaseNS, "-o", "name")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	kubectl(t, "wait", "deployment", name, "-n", releaseNS, "--for", "condition=Available=True", "--timeout", "3m")
	t.Logf("deployment %s Available: %s", name, time.Since(started).Round(100*time.Millisecond))
}

// releaseAt checks helm list in definitionNS for a deployed release of chart.
func releaseAt(name, chart string) func(t *testing.T) error {
	return releaseIn(definitionNS, name, chart)
}

// releaseIn checks helm list in namespace for a deployed release of chart.
func releaseIn(namespace, name, chart string) func(t *testing.T) error {
	return func(t *testing.T) error {
		out, err := command(t, time.Minute, "", "helm", "list", "-n", namespace, "-o", "json")
		if err != nil {
			return fmt.Errorf("helm list: %v: %s", err, out)
		}
		var releases []struct{ Name, Chart, Status string }
		if err := json.Unmarshal([]byte(out), &releases); err != nil {
			return fmt.Errorf("helm list: %v: %s", err, out)
		}
		for _, r := range releases {
			if r.Name == name {
				if r.Chart == chart && r.Status == "deployed" {
					return nil
				}
				return fmt.Errorf("release %s: chart %s, status %s", name, r.Chart, r.Status)
			}
		}
		return fmt.Errorf("no release %s: %s", name, out)
	}
}

// diagnoseOnFailure logs diagnose's output when t fails.
func diagnoseOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			diagnose(t)
		}
	})
}

// diagnose logs what a failed run needs to be understood: the definitions, pods and
// events, and the logs of Compositor and of the generated controllers.
func diagnose(t *testing.T) {
	for _, args := range [][]string{
		{"get", "compositiondefinitions", "-A", "-o", "yaml"},
		{"get", "pods,deployments", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by", ".lastTimestamp"},
		{"logs", "-n", releaseNS, "-l", "app.kubernetes.io/instance=" + release, "--tail", "60", "--prefix"},
		// The generated controllers run in Compositor's namespace.
		{"logs", "-n", releaseNS, "-l", "app.kubernetes.io/managed-by=compositor", "--tail", "60", "--prefix"},
	} {
		out, err := command(t, time.Minute, "", "kubectl", args...)
		t.Logf("kubectl %s (%v):\n%s", strings.Join(args, " "), err, out)
	}
}
