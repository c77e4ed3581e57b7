package certmanager_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The chart's namespace and release in this test; the chart names its Certificate
// <release>-compositor-webhook.
const (
	namespace = "compositor-system"
	release   = "c"
)

// TestCertManagerIssuesAndInjects runs the controller and cainjector this module builds
// against envtest's etcd and kube-apiserver (bin/k8s) with cert-manager's CRDs, applies
// the Issuer, Certificate and webhook configurations that the chart renders with
// certs.mode=cert-manager, and waits for the Secret and for both caBundles.
//
// Binaries: $CERT_MANAGER_BIN (make cert-manager's bin/certmanager) or built here.
// CRDs: $CERT_MANAGER_CRDS (bin/certmanager/crds) or the module cache's deploy/crds,
// applied with kubectl as the node tier would. Control plane, kubectl and helm:
// $KUBEBUILDER_ASSETS or bin/k8s. Chart: $COMPOSITOR_CHART or charts/compositor; when
// it renders no webhook configurations, the test creates ones of the same shape.
func TestCertManagerIssuesAndInjects(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	k8s := envOr("KUBEBUILDER_ASSETS", filepath.Join(root, "bin", "k8s"))
	for _, b := range []string{"etcd", "kube-apiserver", "kubectl", "helm"} {
		if _, err := os.Stat(filepath.Join(k8s, b)); err != nil {
			t.Skipf("%s: run `make control-plane` first", err)
		}
	}
	bin := os.Getenv("CERT_MANAGER_BIN")
	if bin == "" {
		bin = t.TempDir()
		run(t, 10*time.Minute, "go", "build", "-o", bin+"/", "./controller", "./cainjector")
	}
	crds := os.Getenv("CERT_MANAGER_CRDS")
	if crds == "" {
		dir := strings.TrimSpace(run(t, time.Minute, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager"))
		crds = filepath.Join(dir, "deploy", "crds")
	}

	// The chart's objects first, so that a chart without them fails before anything
	// starts.
	rendered := run(t, time.Minute, filepath.Join(k8s, "helm"), "template", release, envOr("COMPOSITOR_CHART", filepath.Join(root, "charts", "compositor")),
		"--namespace", namespace, "--set", "certs.mode=cert-manager")
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rendered), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding the chart: %v", err)
		}
		switch k := u.GetKind(); k {
		case "Issuer", "Certificate", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			objs[k] = u
		}
	}
	for _, k := range []string{"Issuer", "Certificate"} {
		if objs[k] == nil {
			t.Fatalf("the chart renders no %s with certs.mode=cert-manager", k)
		}
	}
	cert := objs["Certificate"]
	injectFrom := namespace + "/" + cert.GetName()
	// The chart's webhook configurations when it renders them; otherwise ones of the
	// same shape, as Compositor would create them.
	for _, k := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		if objs[k] == nil {
			t.Logf("the chart renders no %s: using one of the same shape", k)
			objs[k] = webhookConfiguration(k, injectFrom, cert.GetName())
		}
	}
	for _, k := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		if got := objs[k].GetAnnotations()["cert-manager.io/inject-ca-from"]; got != injectFrom {
			t.Fatalf("%s: cert-manager.io/inject-ca-from is %q, want %q", k, got, injectFrom)
		}
	}
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")

	env := &envtest.Environment{BinaryAssetsDirectory: k8s}
	if _, err := env.Start(); err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	user, err := env.AddUser(envtest.User{Name: "cert-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	// The CRDs as the node tier applies them: server-side, since the largest are over
	// the 256 KiB that client-side apply's last-applied annotation may hold.
	kubectl := filepath.Join(k8s, "kubectl")
	run(t, 2*time.Minute, kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "-f", crds)
	run(t, 2*time.Minute, kubectl, "--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=90s",
		"crd/certificates.cert-manager.io", "crd/certificaterequests.cert-manager.io", "crd/issuers.cert-manager.io",
		"crd/clusterissuers.cert-manager.io", "crd/orders.acme.cert-manager.io", "crd/challenges.acme.cert-manager.io")
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, ns := range []string{namespace, "cert-manager"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metaName(ns)}); err != nil {
			t.Fatal(err)
		}
	}

	start(t, filepath.Join(bin, "controller"), "--kubeconfig="+kubeconfig, "--leader-elect=false",
		"--cluster-resource-namespace=cert-manager", "-v=2")
	start(t, filepath.Join(bin, "cainjector"), "--kubeconfig="+kubeconfig, "--leader-elect=false", "-v=2")

	for _, k := range []string{"Issuer", "Certificate"} {
		if err := c.Create(ctx, objs[k]); err != nil {
			t.Fatalf("creating the chart's %s: %v", k, err)
		}
	}

	var secret corev1.Secret
	wait(t, ctx, 2*time.Minute, "Secret "+secretName, func() (bool, error) {
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: secretName}, &secret)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && len(secret.Data["tls.crt"]) > 0 && len(secret.Data["ca.crt"]) > 0, err
	})
	wait(t, ctx, time.Minute, "Certificate Ready", func() (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(cert.GroupVersionKind())
		if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: cert.GetName()}, u); err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, cd := range conds {
			m, _ := cd.(map[string]any)
			if m["type"] == "Ready" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})

	for _, k := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
		if err := c.Create(ctx, objs[k]); err != nil {
			t.Fatalf("creating the chart's %s: %v", k, err)
		}
	}
	for _, k := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
		wait(t, ctx, time.Minute, k+" caBundle", func() (bool, error) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(objs[k].GroupVersionKind())
			if err := c.Get(ctx, types.NamespacedName{Name: objs[k].GetName()}, u); err != nil {
				return false, err
			}
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			if len(hooks) == 0 {
				return false, fmt.Errorf("%s has no webhooks", k)
			}
			for _, h := range hooks {
				b, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "caBundle")
				if b == "" {
					return false, nil
				}
				// The API server returns caBundle base64-encoded, as in YAML.
				want := encode(secret.Data["ca.crt"])
				if b != want {
					return false, fmt.Errorf("%s: caBundle is not the Secret's ca.crt", k)
				}
			}
			return true, nil
		})
	}
}

// webhookConfiguration is a webhook configuration of kind k named compositor, annotated
// to take its CA from the Certificate injectFrom, calling the webhook Service svc.
func webhookConfiguration(k, injectFrom, svc string) *unstructured.Unstructured {
	hook := map[string]any{
		"name": "test.compositor.dev",
		"clientConfig": map[string]any{
			"service": map[string]any{"namespace": namespace, "name": svc, "path": "/validate", "port": int64(443)},
		},
		"rules": []any{map[string]any{
			"operations": []any{"CREATE"}, "apiGroups": []any{"policy.compositor.dev"},
			"apiVersions": []any{"*"}, "resources": []any{"*"},
		}},
		"failurePolicy":           "Fail",
		"sideEffects":             "None",
		"admissionReviewVersions": []any{"v1"},
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1",
		"kind":       k,
		"metadata": map[string]any{
			"name":        "compositor",
			"annotations": map[string]any{"cert-manager.io/inject-ca-from": injectFrom},
		},
		"webhooks": []any{hook},
	}}
}

func metaName(n string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: n} }

func encode(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// wait polls cond every 200ms until it holds, fails or d passes.
func wait(t *testing.T, ctx context.Context, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			t.Logf("%s: done", what)
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("waiting for %s: not within %s", what, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// start runs a binary until the test ends, its output in a file the test prints when
// it fails.
func start(t *testing.T, path string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), filepath.Base(path)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			if len(out) > 20000 {
				out = out[len(out)-20000:]
			}
			t.Logf("%s output (tail):\n%s", filepath.Base(path), out)
		}
		logf.Close()
	})
}

// run runs a command with a deadline and returns its standard output.
func run(t *testing.T, d time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
