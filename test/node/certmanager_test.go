//go:build node

package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compositor-dev/compositor/api/vocab"
)

const (
	// The chart's names with release compositor: the Certificate, its Secret, the
	// Deployment.
	certName   = release + "-webhook"
	certSecret = release + "-webhook-tls"
)

// brokenPolicy is refused by Compositor's /validate with the Rego parser's position.
const brokenPolicy = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: node-broken-rego
spec:
  rego: |
    package compositor.broken

    deny contains msg if {
      msg := input.review.object.spec.
    }
`

const brokenPolicyRefusal = `The CompositionPolicy "node-broken-rego" is invalid: spec.rego: Invalid value: 4:35: rego_parse_error: unexpected whitespace token: expected identifier`

// validPolicy is admitted (a warning policy that matches nothing the tier writes).
const validPolicy = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: node-cert-manager
spec:
  enforcementAction: warn
  match:
    kinds: [{group: composition.krateo.io, kind: NoSuchKind}]
  rego: |
    package compositor.nodecertmanager

    warn contains "never" if {
      input.review.object.spec.never
    }
`

// certManagerMode installs Compositor with certs.mode=cert-manager against a real
// cert-manager: its CRDs applied, its controller and cainjector (`make cert-manager`,
// bin/certmanager) running as host processes with the cluster's kubeconfig. It waits
// for the chart's Certificate Ready, its Secret, both webhook configurations' caBundle
// equal to the Secret's ca.crt (injected by cainjector from the chart's
// cert-manager.io/inject-ca-from) and Compositor's Deployment Available; then proves
// the API server trusts that bundle: an invalid CompositionPolicy is refused by
// /validate with Compositor's own message (a TLS failure would be another message,
// with failurePolicy Fail), a valid one is admitted. Then `helm uninstall`: nothing of
// the release is left, the Secret included (the controller runs with
// --enable-certificate-owner-ref, so the Certificate owns it; cert-manager's default
// would leave it).
//
// It needs Compositor uninstalled (the webhook configurations are cluster-scoped and
// named compositor): it runs after TestLifecycle, in the same namespace, and reuses
// the seed flow's values (the definition left by the seed flow is reconciled again
// from the charts on the bridge). 2 replicas as the seed flow: every replica mounts the
// Secret and applies the webhook configurations with the annotation, and neither may
// strip the bundle cainjector wrote (checked again after admission).
//
// What it adds to the cluster goes at the end: the release, cert-manager's processes,
// its CRDs (deleted even when the cluster is torn down after, so that a
// kept or reused cluster is left as TestLifecycle left it), and Compositor's namespace
// when this test made it (run alone: -run TestCertManager).
func certManagerMode(t *testing.T) {
	bin := os.Getenv("CERT_MANAGER_BIN")
	if bin == "" {
		bin = filepath.Join(env.root, "bin", "certmanager")
	}
	crds := filepath.Join(bin, "crds")
	for _, p := range []string{filepath.Join(bin, "controller"), filepath.Join(bin, "cainjector"), crds} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run `make cert-manager` first", err)
		}
	}
	if out, err := command(t, time.Minute, "", "helm", "status", release, "-n", releaseNS); err == nil {
		t.Skipf("needs Compositor uninstalled (TestLifecycle), but release %s is installed:\n%s", release, out)
	}
	if out := kubectl(t, "get", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "compositor", "-o", "name", "--ignore-not-found"); out != "" {
		t.Skipf("needs Compositor uninstalled (TestLifecycle), but its webhook configurations are there:\n%s", out)
	}

	// cert-manager: the CRDs (server-side: the largest are over client-side apply's
	// 256 KiB annotation), then the controller and cainjector. The cleanups run in
	// reverse: the processes stop before their CRDs go.
	//
	// cert-manager gets no namespace of its own: deleting one at the end would not
	// finish. Once Compositor is uninstalled, the seed flow's FireworksApps stay with
	// a conversion webhook nobody serves, so the API server cannot list them, and the
	// namespace controller, which lists every namespaced kind in a namespace it
	// deletes, retries forever (the README says so under "On a cluster"). Its
	// --cluster-resource-namespace is Compositor's, which this test leaves as it was.
	t.Cleanup(func() {
		args := []string{"delete", "--ignore-not-found", "--wait", "--timeout", "2m", "-f", crds}
		if out, err := command(t, 3*time.Minute, "", "kubectl", args...); err != nil {
			t.Errorf("cleanup: kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	started := time.Now()
	kubectl(t, "apply", "--server-side", "-f", crds)
	kubectl(t, "wait", "--for=condition=Established", "--timeout=90s",
		"crd/certificates.cert-manager.io", "crd/certificaterequests.cert-manager.io",
		"crd/issuers.cert-manager.io", "crd/clusterissuers.cert-manager.io")
	hostProcess(t, filepath.Join(bin, "controller"), "--kubeconfig="+env.kubeconfig, "--leader-elect=false",
		"--cluster-resource-namespace="+releaseNS, "--enable-certificate-owner-ref", "-v=2")
	hostProcess(t, filepath.Join(bin, "cainjector"), "--kubeconfig="+env.kubeconfig, "--leader-elect=false", "-v=2")
	t.Logf("cert-manager's CRDs applied, controller and cainjector started: %s", time.Since(started).Round(100*time.Millisecond))

	// The namespace stays when TestLifecycle left it; one made here goes at the end.
	if out := kubectl(t, "get", "namespace", releaseNS, "-o", "name", "--ignore-not-found"); out == "" {
		t.Cleanup(func() { deleteNamespace(t, releaseNS) })
	}

	// A failed test still uninstalls; diagnose runs before, while there is something
	// to see.
	t.Cleanup(func() {
		if _, err := command(t, time.Minute, "", "helm", "status", release, "-n", releaseNS); err != nil {
			return
		}
		if out, err := command(t, 5*time.Minute, "", "helm", "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "3m"); err != nil {
			t.Errorf("cleanup: helm uninstall: %v\n%s", err, out)
		}
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		diagnose(t)
		for _, args := range [][]string{
			{"get", "issuers,certificates,certificaterequests,secrets", "-n", releaseNS, "-o", "yaml"},
			{"get", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "compositor", "-o", "yaml"},
		} {
			out, err := command(t, time.Minute, "", "kubectl", args...)
			t.Logf("kubectl %s (%v):\n%s", strings.Join(args, " "), err, out)
		}
	})

	// Compositor from its chart, in cert-manager mode; no --wait, to time each step.
	started = time.Now()
	helm(t, "install", release, "charts/compositor", "-n", releaseNS, "--create-namespace",
		"--set", "replicaCount=2",
		"--set", "certs.mode=cert-manager",
		"--set", "image.pullPolicy=Never",
		"--set", "reconciler.allowChartNetworks={"+podNetwork+"}",
		"--set", "policies.disabledBuiltins={no-insecure-tls}")
	t.Logf("helm install compositor (certs.mode=cert-manager): %s", time.Since(started).Round(100*time.Millisecond))
	for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
		want := releaseNS + "/" + certName
		if got := kubectl(t, "get", kind, "compositor", "-o", `jsonpath={.metadata.annotations.cert-manager\.io/inject-ca-from}`); got != want {
			t.Fatalf("%s compositor: cert-manager.io/inject-ca-from %q, want %q", kind, got, want)
		}
	}

	eventually(t, "Certificate "+certName+" Ready", 2*time.Minute, func() error {
		out := kubectl(t, "get", "certificate", certName, "-n", releaseNS,
			"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}: {.status.conditions[?(@.type=="Ready")].message}`)
		if !strings.HasPrefix(out, "True:") {
			return fmt.Errorf("Ready %q", out)
		}
		return nil
	})
	t.Logf("Certificate Ready %s after helm install started", time.Since(started).Round(100*time.Millisecond))
	caCrt := kubectl(t, "get", "secret", certSecret, "-n", releaseNS, "-o", `jsonpath={.data.ca\.crt}`)
	if caCrt == "" || kubectl(t, "get", "secret", certSecret, "-n", releaseNS, "-o", `jsonpath={.data.tls\.crt}`) == "" {
		t.Fatalf("Secret %s has no ca.crt or tls.crt", certSecret)
	}
	owner := kubectl(t, "get", "secret", certSecret, "-n", releaseNS, "-o", `jsonpath={.metadata.ownerReferences[*].kind}/{.metadata.ownerReferences[*].name}`)
	if owner != "Certificate/"+certName {
		t.Fatalf("Secret %s is owned by %q, want Certificate/%s", certSecret, owner, certName)
	}

	// caBundle is returned base64-encoded, as the Secret's data.
	bundlesInjected := func() error {
		for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
			out := kubectl(t, "get", kind, "compositor", "-o", `jsonpath={range .webhooks[*]}{.clientConfig.caBundle}{"\n"}{end}`)
			lines := strings.Fields(out)
			if len(lines) == 0 {
				return fmt.Errorf("%s compositor: no caBundle yet", kind)
			}
			for _, b := range lines {
				if b != caCrt {
					return fmt.Errorf("%s compositor: caBundle is not the Secret's ca.crt", kind)
				}
			}
			if n := strings.Count(out, "\n"); n != len(lines) {
				return fmt.Errorf("%s compositor: %d webhooks, %d with a caBundle", kind, n, len(lines))
			}
		}
		return nil
	}
	eventually(t, "both webhook configurations' caBundle equals the Secret's ca.crt", 2*time.Minute, bundlesInjected)
	t.Logf("bundle injected %s after helm install started", time.Since(started).Round(100*time.Millisecond))

	kubectl(t, "wait", "deployment", release, "-n", releaseNS, "--for", "condition=Available=True", "--timeout", "3m")
	kubectl(t, "rollout", "status", "deployment", release, "-n", releaseNS, "--timeout", "3m")
	selector := "app.kubernetes.io/name=compositor,app.kubernetes.io/instance=" + release
	ready := kubectl(t, "get", "pods", "-n", releaseNS, "-l", selector,
		"-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
	if n := strings.Count(ready, "=True"); n != 2 {
		t.Fatalf("want 2 Ready Compositor pods, got %d:\n%s", n, ready)
	}
	t.Logf("Compositor Available %s after helm install started", time.Since(started).Round(100*time.Millisecond))
	// Compositor fills in the rules once it serves (until then nothing is sent to it).
	eventually(t, "Compositor wrote the validating webhook's rules", time.Minute, func() error {
		groups := kubectl(t, "get", "validatingwebhookconfiguration", "compositor", "-o", "jsonpath={.webhooks[*].rules[*].apiGroups}")
		if !strings.Contains(groups, "policy.compositor.dev") {
			return fmt.Errorf("rules' groups %q", groups)
		}
		return nil
	})

	// Admission through the injected bundle. A request the API server could not send
	// (no trusted certificate) fails with "failed calling webhook" and x509: that is
	// final. Anything else but Compositor's refusal is retried briefly (the Service's
	// endpoints).
	eventually(t, "an invalid CompositionPolicy refused by /validate", time.Minute, func() error {
		out, err := command(t, time.Minute, brokenPolicy, "kubectl", "apply", "--dry-run=server", "-f", "-")
		if err == nil {
			return fmt.Errorf("admitted: %s", out)
		}
		if strings.Contains(out, "x509") || strings.Contains(out, "certificate") {
			t.Fatalf("the API server does not trust Compositor's certificate: %s", out)
		}
		if strings.TrimSpace(out) != brokenPolicyRefusal {
			return fmt.Errorf("got %q, want %q", out, brokenPolicyRefusal)
		}
		return nil
	})
	kubectlApply(t, validPolicy)
	eventually(t, "the valid CompositionPolicy compiled", time.Minute, func() error {
		if got := kubectl(t, "get", "compositionpolicy", "node-cert-manager", "-o", "jsonpath={.status.compiled}"); got != "true" {
			return fmt.Errorf("status.compiled %q", got)
		}
		return nil
	})
	kubectl(t, "delete", "compositionpolicy", "node-cert-manager", "--wait", "--timeout", "1m")
	// Neither replica's configurations undid cainjector's bundle meanwhile.
	if err := bundlesInjected(); err != nil {
		t.Fatalf("after admission: %v", err)
	}

	// The uninstall: nothing of the release's is left, the Secret included.
	started = time.Now()
	helm(t, "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "3m")
	t.Logf("helm uninstall compositor: %s", time.Since(started).Round(100*time.Millisecond))
	eventually(t, "nothing of the cert-manager-mode release is left", 2*time.Minute, func() error {
		var left []string
		for _, args := range [][]string{
			{"mutatingwebhookconfiguration,validatingwebhookconfiguration", "compositor"},
			// What Compositor generated for the definition's versions stays, with the
			// definition (lifecycle_test.go); it is labelled with the version's identity.
			{"issuers,certificates,certificaterequests,pods,deployments,leases", "-n", releaseNS, "-l", "!" + vocab.LabelDefinitionNamespace},
			{"secrets", "-n", releaseNS, "-l", "compositor.dev/chart-archive!=true,!" + vocab.LabelDefinitionNamespace},
			{"compositionpolicies", "-A"},
		} {
			out, err := command(t, time.Minute, "", "kubectl", append([]string{"get", "-o", "name", "--ignore-not-found"}, args...)...)
			if err != nil {
				return fmt.Errorf("kubectl get %s: %v: %s", strings.Join(args, " "), err, out)
			}
			for _, name := range strings.Fields(out) {
				if name != "secret/compositor-release-seal" { // kept on purpose (lifecycle_test.go)
					left = append(left, name)
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("left:\n%s", strings.Join(left, "\n"))
		}
		return nil
	})
}

// hostProcess runs a binary on the host until the test ends, its output in a file
// of t.TempDir that is printed (its tail) when the test fails.
// deleteNamespace deletes a namespace and waits for it to be gone. When it is not
// gone in time, the error carries the namespace's conditions, which say what the
// namespace controller is waiting for (content left, finalizers, a discovery failure).
func deleteNamespace(t *testing.T, name string) {
	t.Helper()
	args := []string{"delete", "namespace", name, "--ignore-not-found", "--wait", "--timeout", "4m"}
	out, err := command(t, 5*time.Minute, "", "kubectl", args...)
	if err == nil {
		return
	}
	conditions, _ := command(t, time.Minute, "", "kubectl", "get", "namespace", name, "--ignore-not-found",
		"-o", `jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}`)
	left, _ := command(t, time.Minute, "", "kubectl", "api-resources", "--namespaced", "--verbs=list", "-o", "name")
	t.Errorf("cleanup: kubectl %s: %v\n%s\nthe namespace's conditions:\n%s\nnamespaced kinds served now:\n%s",
		strings.Join(args, " "), err, out, conditions, left)
}

func hostProcess(t *testing.T, path string, args ...string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(path)+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Logf("%s started (pid %d, log %s)", filepath.Base(path), cmd.Process.Pid, logPath)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("%s did not stop within 15s of SIGINT: killed", filepath.Base(path))
		}
		logf.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			if len(out) > 20000 {
				out = out[len(out)-20000:]
			}
			t.Logf("%s output (tail):\n%s", filepath.Base(path), out)
		}
	})
}
