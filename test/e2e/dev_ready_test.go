package e2e

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// Written the moment dev prints its ready text, each of these is refused by the
// validating webhook alone (the CRDs' schemas admit them): the definition by the
// built-in chart-url-scheme policy, the policy because its Rego does not compile.
var (
	plainHTTPDefinition = map[string]any{
		"apiVersion": "core.krateo.io/v1alpha1", "kind": "CompositionDefinition",
		"metadata": map[string]any{"name": "plain-http", "namespace": "default"},
		"spec":     map[string]any{"chart": map[string]any{"repo": "fireworks-app", "url": "http://charts.example.com", "version": "1.1.5"}},
	}
	brokenRegoPolicy = map[string]any{
		"apiVersion": "policy.compositor.dev/v1alpha1", "kind": "CompositionPolicy",
		"metadata": map[string]any{"name": "broken-at-start"},
		"spec":     map[string]any{"rego": "package compositor.brokenatstart\n\ndeny contains msg if {\n"},
	}
)

var (
	definitionsResource = schema.GroupVersionResource{Group: "core.krateo.io", Version: "v1alpha1", Resource: "compositiondefinitions"}
	policiesResource    = schema.GroupVersionResource{Group: "policy.compositor.dev", Version: "v1alpha1", Resource: "compositionpolicies"}
)

// startDevLikeAScript starts `compositor dev` as startDev does and, like a script
// waiting for the API server, reads definitions and policies from the moment the
// kubeconfig can be loaded until the ready text appears: the API server has then served
// both kinds once (it builds the handlers of a CRD on its first request), so that a
// write made at the ready text reaches admission at once. It returns a client made
// from the kubeconfig the line names.
func startDevLikeAScript(t *testing.T, ctx context.Context, args ...string) (*devProcess, dynamic.Interface) {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "dev", "kubeconfig")
	args = append([]string{"dev", "--kubeconfig", kubeconfig, "--control-plane-dir", controlplane.BinDir(),
		"--chart-repository-addr", "127.0.0.1:0"}, args...)
	cmd := exec.CommandContext(ctx, buildCompositor(t), args...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	d := &devProcess{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = d.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	ready := make(chan struct{})
	warmed := make(chan struct{})
	go func() {
		defer close(warmed)
		for {
			select {
			case <-ready:
				return
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				continue
			}
			c, err := dynamic.NewForConfig(cfg)
			if err != nil {
				continue
			}
			_, _ = c.Resource(definitionsResource).List(ctx, metav1.ListOptions{})
			_, _ = c.Resource(policiesResource).List(ctx, metav1.ListOptions{})
		}
	}()
	exportLine := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if line := scanner.Text(); strings.HasPrefix(line, "export KUBECONFIG=") {
				exportLine <- line
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case d.exportLine = <-exportLine:
	case <-ctx.Done():
		_ = cmd.Wait() // stderr is complete only once dev has ended
		t.Fatalf("dev printed no KUBECONFIG line; stderr:\n%s", d.stderr.String())
	}
	close(ready)
	require.Equal(t, "export KUBECONFIG="+kubeconfig, d.exportLine)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	c, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { <-warmed })
	return d, c
}

// TestDevIsReadyOnlyOnceItsWebhooksJudge: `compositor dev` prints its
// `export KUBECONFIG=` line only once the API server sends writes to its webhooks, so
// a write made the moment the line appears is judged: refused, with the webhook's own
// reason, and not stored. Before, on a first start the line came about a second before
// the webhook configurations existed, and such a write was stored unjudged; on a
// restart the configurations of the last run were there but the webhook server was
// not, and the write was refused with "connection refused" instead of judged.
func TestDevIsReadyOnlyOnceItsWebhooksJudge(t *testing.T) {
	controlplane.Require(t, "etcd", "kube-apiserver", "kubectl")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	data := t.TempDir()

	for _, start := range []string{"first start", "restart on the same data"} {
		t.Run(start, func(t *testing.T) {
			dev, c := startDevLikeAScript(t, ctx, "--health-probe-bind-address=0", "--data-dir", data)
			// Nothing between the line and these writes.
			_, err := c.Resource(definitionsResource).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: plainHTTPDefinition}, metav1.CreateOptions{})
			require.Error(t, err, "a definition written at once is judged, not stored")
			assert.Contains(t, err.Error(), `admission webhook "validate.compositor.dev" denied the request`)
			assert.Contains(t, err.Error(), `chart URL "http://charts.example.com" must use oci://, https:// or imported://`)
			_, err = c.Resource(policiesResource).Create(ctx, &unstructured.Unstructured{Object: brokenRegoPolicy}, metav1.CreateOptions{})
			require.Error(t, err, "a policy written at once is judged, not stored")
			assert.Contains(t, err.Error(), `admission webhook "validate.compositor.dev" denied the request`)
			assert.Contains(t, err.Error(), "spec.rego: Invalid value")

			out, err := dev.kubectl(t, ctx, "get", "compositiondefinition", "plain-http", "-n", "default")
			require.Error(t, err, "stored: %s", out)
			assert.Contains(t, out, `"plain-http" not found`)
			out, err = dev.kubectl(t, ctx, "get", "compositionpolicy", "broken-at-start")
			require.Error(t, err, "stored: %s", out)
			assert.Contains(t, out, `"broken-at-start" not found`)
			dev.stop(t)
		})
	}
}
