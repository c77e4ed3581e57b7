package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compositor-dev/compositor/api/vocab"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// measureThroughAPIServer creates compositions through the API server, as a user's
// client would, with Compositor's webhook configurations in place and with them
// removed, alternating twice so that both see the same cluster. The compositions are
// paused: this measures what admission adds to a write, not installs.
func measureThroughAPIServer(ctx context.Context, o options, rep *report, d *dev, w *world) error {
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := d.client.Get(ctx, client.ObjectKey{Name: "compositor"}, mutating); err != nil {
		return err
	}
	if err := d.client.Get(ctx, client.ObjectKey{Name: "compositor"}, validating); err != nil {
		return err
	}
	for round := range 2 {
		for _, withWebhooks := range []bool{true, false} {
			namespace := fmt.Sprintf("e2e-%d-%t", round, withWebhooks)
			if err := d.createNamespace(ctx, namespace, map[string]string{"team": "a"}); err != nil {
				return err
			}
			if !withWebhooks {
				if err := removeWebhooks(ctx, d, mutating, validating); err != nil {
					return err
				}
			}
			logf("%d creates through the API server at concurrency %d, webhooks %t", o.e2eCreates, o.e2eConcurrency, withWebhooks)
			var profile chan error
			if o.profileDir != "" && round == 0 {
				profile = make(chan error, 1)
				path := filepath.Join(o.profileDir, apiServerProfileName(withWebhooks))
				go func() { profile <- saveAPIServerProfile(ctx, d, apiServerProfileSeconds, path) }()
			}
			r, err := createThroughAPIServer(ctx, d, namespace, w.spec, o.e2eCreates, o.e2eConcurrency)
			if profile != nil {
				if profileErr := <-profile; profileErr != nil && err == nil {
					err = profileErr
				}
			}
			if !withWebhooks {
				if restoreErr := restoreWebhooks(ctx, d, mutating, validating); restoreErr != nil {
					return restoreErr
				}
			}
			if err != nil {
				return err
			}
			r.Workload = fmt.Sprintf("create through the API server (round %d)", round+1)
			if withWebhooks {
				r.Server = "with webhooks"
				rep.APIServer = append(rep.APIServer, comparison{Compositor: r})
			} else {
				r.Server = "without webhooks"
				rep.APIServer[len(rep.APIServer)-1].Floor = r
			}
		}
	}
	return nil
}

// apiServerProfileSeconds is how long the API server is profiled from the first create
// of the first round: less than the creates take.
const apiServerProfileSeconds = 2

// apiServerProfileName names the API server's CPU profile of the first round's creates.
func apiServerProfileName(withWebhooks bool) string {
	if withWebhooks {
		return "apiserver-creates-with-webhooks.pprof"
	}
	return "apiserver-creates-without-webhooks.pprof"
}

// saveAPIServerProfile fetches a CPU profile of the API server (its /debug/pprof, as
// the harness's administrator) of seconds into path.
func saveAPIServerProfile(ctx context.Context, d *dev, seconds int, path string) error {
	clientset, err := kubernetes.NewForConfig(d.cfg)
	if err != nil {
		return err
	}
	data, err := clientset.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(seconds)).Timeout(time.Duration(seconds+30) * time.Second).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("fetching a CPU profile of the API server: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// webhookSettle is how long the API server takes to notice a webhook configuration
// change (it watches them).
const webhookSettle = 2 * time.Second

func removeWebhooks(ctx context.Context, d *dev, objs ...client.Object) error {
	for _, obj := range objs {
		if err := d.client.Delete(ctx, obj.DeepCopyObject().(client.Object)); err != nil {
			return fmt.Errorf("removing the webhook configuration: %w", err)
		}
	}
	time.Sleep(webhookSettle)
	return nil
}

func restoreWebhooks(ctx context.Context, d *dev, objs ...client.Object) error {
	for _, obj := range objs {
		fresh := obj.DeepCopyObject().(client.Object)
		fresh.SetResourceVersion("")
		fresh.SetUID("")
		fresh.SetManagedFields(nil)
		fresh.SetCreationTimestamp(metav1.Time{})
		if err := d.client.Create(ctx, fresh); err != nil {
			return fmt.Errorf("restoring the webhook configuration: %w", err)
		}
	}
	time.Sleep(webhookSettle)
	return nil
}

// createThroughAPIServer creates n paused compositions in namespace from concurrency
// goroutines and times each create.
func createThroughAPIServer(ctx context.Context, d *dev, namespace string, spec map[string]any, n, concurrency int) (result, error) {
	before, err := cpuSeconds(d.pid)
	if err != nil {
		return result{}, err
	}
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies []time.Duration
		errs      int
		first     string
		wg        sync.WaitGroup
	)
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				obj := &unstructured.Unstructured{Object: composition(namespace, i, spec)}
				md := obj.Object["metadata"].(map[string]any)
				delete(md, "uid")
				md["annotations"].(map[string]any)[vocab.AnnotationPaused] = "true"
				began := time.Now()
				err := d.client.Create(ctx, obj)
				took := time.Since(began)
				mu.Lock()
				latencies = append(latencies, took)
				if err != nil {
					errs++
					if first == "" {
						first = err.Error()
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := cpuSeconds(d.pid)
	if err != nil {
		return result{}, err
	}
	slices.Sort(latencies)
	return result{
		Concurrency: concurrency,
		Requests:    len(latencies),
		Errors:      errs,
		FirstError:  first,
		Seconds:     elapsed.Seconds(),
		P50:         millis(percentile(latencies, 0.50)),
		P95:         millis(percentile(latencies, 0.95)),
		P99:         millis(percentile(latencies, 0.99)),
		Max:         millis(latencies[len(latencies)-1]),
		Throughput:  float64(len(latencies)) / elapsed.Seconds(),
		CPUSeconds:  after - before,
	}, nil
}
