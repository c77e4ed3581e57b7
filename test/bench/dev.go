package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api"
	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies"
)

// dev is a `compositor dev` the harness started: a local control plane with Compositor
// in the process whose CPU time is measured.
type dev struct {
	cmd    *exec.Cmd
	log    string
	cfg    *rest.Config
	client client.Client
	// chartsURL serves the sample charts.
	chartsURL string
	// pprof is the address of Compositor's /debug/pprof, metrics of its /metrics.
	pprof, metrics string
	// dataDir is dev's --data-dir, which holds the client certificate it minted for the
	// API server to present to the webhooks.
	dataDir string
	*endpoint
}

// startDev runs `compositor dev` from scratch in dir, with extra flags after the
// harness's own, and waits until its webhooks are installed and answer. Its log goes to
// dir/compositor.log.
func startDev(ctx context.Context, bin, controlPlaneDir, dir string, extra ...string) (*dev, error) {
	var ports [4]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	logPath := filepath.Join(dir, "compositor.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	d := &dev{
		log:       logPath,
		chartsURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		pprof:     fmt.Sprintf("127.0.0.1:%d", ports[2]),
		metrics:   fmt.Sprintf("127.0.0.1:%d", ports[3]),
	}
	d.dataDir = filepath.Join(dir, "etcd")
	d.cmd = exec.Command(bin, append([]string{"dev", "--reset",
		"--control-plane-dir", controlPlaneDir,
		"--data-dir", d.dataDir,
		"--kubeconfig", kubeconfig,
		"--chart-repository-addr", strings.TrimPrefix(d.chartsURL, "http://"),
		"--chart-cache-dir", filepath.Join(dir, "charts"),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--pprof-bind-address", d.pprof,
		"--metrics-bind-address", d.metrics,
		// The audit re-checks every composition each minute; it would add load of its
		// own to some runs and not others.
		"--audit-interval", "0",
	}, extra...)...)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	// Its own process group, so that stopping it stops etcd and kube-apiserver too.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s dev: %w", bin, err)
	}
	if err := d.connect(ctx, kubeconfig, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])); err != nil {
		d.stop()
		return nil, fmt.Errorf("compositor dev did not come up (its log: %s): %w", logPath, err)
	}
	return d, nil
}

// connect waits for dev's kubeconfig and readiness, then reads where its webhooks are
// from the ValidatingWebhookConfiguration it installed.
func (d *dev) connect(ctx context.Context, kubeconfig, readyz string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if d.cmd.ProcessState != nil {
			return false, errors.New("it exited")
		}
		resp, err := http.Get(readyz)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, nil
		}
		if d.client == nil {
			if d.cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
				return false, nil
			}
			// The harness writes in bursts; client-go's default 5/s would time it.
			d.cfg.QPS, d.cfg.Burst = -1, -1
			scheme, err := api.NewScheme()
			if err != nil {
				return false, err
			}
			if d.client, err = client.New(d.cfg, client.Options{Scheme: scheme}); err != nil {
				return false, err
			}
		}
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := d.client.Get(ctx, client.ObjectKey{Name: "compositor"}, vwc); err != nil || len(vwc.Webhooks) == 0 {
			return false, nil
		}
		cc := vwc.Webhooks[0].ClientConfig
		if cc.URL == nil {
			return false, errors.New("the webhook configuration has no URL")
		}
		base := strings.TrimSuffix(*cc.URL, "/validate")
		d.endpoint, err = newEndpoint("compositor", base, cc.CABundle, d.cmd.Process.Pid)
		if err != nil {
			return false, err
		}
		// The harness calls the webhooks as the API server does, with the client
		// certificate dev minted for it.
		return true, d.endpoint.presentCertificate(filepath.Join(d.dataDir, "webhook-client"))
	})
}

// stop interrupts dev, as Ctrl-C would, and waits for it to stop everything it started.
func (d *dev) stop() {
	if d.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// createNamespace creates namespace with labels.
func (d *dev) createNamespace(ctx context.Context, name string, labels map[string]string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := d.client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// applyDefinition creates a definition of chart version from repoURL.
func (d *dev) applyDefinition(ctx context.Context, namespace, name, repoURL, chartName, version string) error {
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{
			URL: repoURL, Repo: chartName, Version: version,
		}},
	}
	return d.client.Create(ctx, def)
}

// readyDefinitions counts the definitions in namespace that are Ready.
func (d *dev) readyDefinitions(ctx context.Context, namespace string) (ready, all int, err error) {
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := d.client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return 0, 0, err
	}
	for _, def := range list.Items {
		if meta.IsStatusConditionTrue(def.Status.Conditions, corev1alpha1.ConditionReady) {
			ready++
		}
	}
	return ready, len(list.Items), nil
}

// waitDefinitionsReady waits until want definitions of namespace are Ready.
func (d *dev) waitDefinitionsReady(ctx context.Context, namespace string, want int, timeout time.Duration) error {
	var ready int
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		ready, _, err = d.readyDefinitions(ctx, namespace)
		return ready >= want, err
	})
	if err != nil {
		return fmt.Errorf("%d of %d definitions in %s Ready: %w", ready, want, namespace, err)
	}
	return nil
}

// applyPolicies turns the policy files of dir into CompositionPolicies and waits until
// the engine enforces them (a create of an object they refuse is refused).
func (d *dev) applyPolicies(ctx context.Context, dir string) ([]map[string]any, error) {
	loaded, err := policies.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	if err := loaded.Err(); err != nil {
		return nil, err
	}
	var objects []map[string]any
	for _, p := range loaded.Policies {
		obj := &policyv1alpha1.CompositionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name},
			Spec: policyv1alpha1.CompositionPolicySpec{
				Match: p.Match, EnforcementAction: p.Action, Target: p.Target, Rego: p.Rego,
			},
		}
		if p.Parameters != nil {
			obj.Spec.Parameters = &apiextensionsv1.JSON{Raw: mustJSON(p.Parameters)}
		}
		if err := d.client.Create(ctx, obj); err != nil {
			return nil, fmt.Errorf("creating CompositionPolicy %s: %w", p.Name, err)
		}
		objects = append(objects, map[string]any{
			"apiVersion": policyv1alpha1.GroupVersion.String(),
			"kind":       "CompositionPolicy",
			"metadata":   map[string]any{"name": p.Name},
			"spec":       mustMap(obj.Spec),
		})
	}
	return objects, nil
}

// mustMap turns v into its JSON object.
func mustMap(v any) map[string]any {
	out := map[string]any{}
	if err := json.Unmarshal(mustJSON(v), &out); err != nil {
		panic(err)
	}
	return out
}

// renders is how many charts Compositor has rendered for purpose so far, as its
// /metrics counts them (compositor_chart_renders_total); 0 before the first.
func (d *dev) renders(ctx context.Context, purpose string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metrics+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading Compositor's metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("reading Compositor's metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("reading Compositor's metrics: %w", err)
	}
	family, ok := families["compositor_chart_renders_total"]
	if !ok {
		return 0, nil
	}
	for _, m := range family.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "purpose" && l.GetValue() == purpose {
				return m.GetCounter().GetValue(), nil
			}
		}
	}
	return 0, nil
}
