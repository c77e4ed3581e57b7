//go:build node

package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const leaseName = "compositor.compositor.dev"

var fireworksApps = schema.GroupVersionResource{Group: "composition.krateo.io", Version: "v1-1-6", Resource: "fireworksapps"}

// restConfig is the cluster's loopback kubeconfig, for the tests that need more
// requests than kubectl can send.
func restConfig(t *testing.T) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cfg.Timeout = 30 * time.Second
	return cfg
}

// admissionWriter writes compositions through Compositor's webhooks every interval
// until stopped: an update of the composition demo (mutating and validating webhooks,
// UPDATE) and a dry-run create of a new one (both webhooks, CREATE; dry run, so that
// no release is installed for each), in turn. Every failed write is kept.
type admissionWriter struct {
	client   dynamic.ResourceInterface
	interval time.Duration

	mu     sync.Mutex
	writes int
	errs   []string
}

func (w *admissionWriter) run(ctx context.Context, epoch time.Time) {
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var err error
		what := "update demo"
		if i%2 == 0 {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"node.compositor.dev/write":"%d"}}}`, i)
			_, err = w.client.Patch(context.Background(), "demo", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		} else {
			what = "create (dry run)"
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": fireworksApps.GroupVersion().String(),
				"kind":       "FireworksApp",
				"metadata":   map[string]any{"name": fmt.Sprintf("write-%d", i), "namespace": definitionNS},
				"spec":       map[string]any{"replicaCount": int64(1)},
			}}
			_, err = w.client.Create(context.Background(), obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		}
		w.mu.Lock()
		w.writes++
		if err != nil {
			w.errs = append(w.errs, fmt.Sprintf("%s at %+.2fs: %v", what, time.Since(epoch).Seconds(), err))
		}
		w.mu.Unlock()
	}
}

func (w *admissionWriter) result() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes, append([]string(nil), w.errs...)
}

// failover deletes the leader of the two Compositor replicas, found through the
// leader election Lease, while a client writes compositions through the webhooks
// every 50 ms. The client must see no failure (every replica serves the webhooks,
// leader or not, and a terminating one drains), the other replica must take the Lease,
// and a composition created after must still be installed. It logs the failover gap
// (from the delete to the Lease held by the other replica, whose reconcilers start
// then: about the pod's 5 s preStop drain, after which the leader releases the Lease),
// the writes and their errors, and the time until the Deployment has two Available
// replicas again. The writes go on until the deleted pod is gone.
func failover(t *testing.T) {
	diagnoseOnFailure(t)
	cfg := restConfig(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	holderPod := func() (string, error) {
		lease, err := kube.CoordinationV1().Leases(releaseNS).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return "", nil
		}
		// controller-runtime's identity: <hostname, the pod's name>_<uuid>.
		return strings.SplitN(*lease.Spec.HolderIdentity, "_", 2)[0], nil
	}
	var leader string
	eventually(t, "a replica holds the lease", time.Minute, func() error {
		var err error
		leader, err = holderPod()
		if err == nil && leader == "" {
			err = fmt.Errorf("no holder")
		}
		return err
	})
	pods, err := kube.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	if len(pods.Items) != 2 || !strings.Contains(strings.Join(names, " "), leader) {
		t.Fatalf("want 2 Compositor pods, the leader %s among them: %v", leader, names)
	}
	t.Logf("leader: %s (pods %v)", leader, names)

	writer := &admissionWriter{client: dynamic.NewForConfigOrDie(cfg).Resource(fireworksApps).Namespace(definitionNS), interval: 50 * time.Millisecond}
	writeCtx, stopWriting := context.WithCancel(ctx)
	deleted := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); writer.run(writeCtx, deleted) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopWriting()
			wg.Wait()
		}
	}
	defer stop()

	time.Sleep(time.Until(deleted)) // writes before, as a baseline
	if err := kube.CoreV1().Pods(releaseNS).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted = time.Now()
	t.Logf("deleted the leader pod %s", leader)

	var successor string
	for {
		pod, err := holderPod()
		if err == nil && pod != "" && pod != leader {
			successor = pod
			break
		}
		if time.Since(deleted) > 2*time.Minute {
			t.Fatalf("no other replica took the lease within 2m (holder %q, %v)", pod, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	gap := time.Since(deleted)
	t.Logf("failover gap: %s, from deleting %s to the lease held by %s", gap.Round(10*time.Millisecond), leader, successor)

	// The Deployment replaces the deleted pod: two Available replicas again.
	var available time.Duration
	for {
		dep, err := kube.AppsV1().Deployments(releaseNS).Get(ctx, release, metav1.GetOptions{})
		if err == nil && dep.Status.AvailableReplicas == 2 && dep.Status.UpdatedReplicas == 2 && dep.Status.Replicas == 2 {
			available = time.Since(deleted)
			break
		}
		if time.Since(deleted) > 3*time.Minute {
			t.Fatalf("Compositor's Deployment has not 2 Available replicas again within 3m: %v %+v", err, dep.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("two Available replicas again: %s after the delete", available.Round(100*time.Millisecond))
	// Writes go on until the deleted pod is gone, and a little after.
	for {
		_, err := kube.CoreV1().Pods(releaseNS).Get(ctx, leader, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Logf("the deleted pod is gone: %s after the delete", time.Since(deleted).Round(100*time.Millisecond))
			break
		}
		if time.Since(deleted) > 2*time.Minute {
			t.Fatalf("the deleted pod %s is still there after 2m: %v", leader, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	stop()
	writes, errs := writer.result()
	t.Logf("admission during failover: %d writes every %s, %d errors", writes, writer.interval, len(errs))
	if len(errs) > 0 {
		t.Errorf("a client writing through the webhooks saw %d failures during the failover:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	if writes < 100 {
		t.Errorf("only %d writes: the writer did not cover the failover", writes)
	}
	if pod, err := holderPod(); err != nil || pod != successor {
		t.Errorf("the lease moved again after the failover: holder %q (%v), want %s", pod, err, successor)
	}

	// The new leader and the controller act: a composition created now is installed.
	started := time.Now()
	kubectlApply(t, fmt.Sprintf(`apiVersion: composition.krateo.io/v1-1-6
kind: FireworksApp
metadata:
  name: after-failover
  namespace: %s
spec:
  replicaCount: 1
`, definitionNS))
	kubectl(t, "wait", "fireworksapp", "after-failover", "-n", definitionNS, "--for", "condition=Ready=True", "--timeout", "3m")
	eventually(t, "helm list shows after-failover at fireworks-app-1.1.6, deployed", 2*time.Minute, func() error {
		return releaseAt("after-failover", "fireworks-app-1.1.6")(t)
	})
	t.Logf("a composition created after the failover is installed: %s", time.Since(started).Round(100*time.Millisecond))
}
