package e2e

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// apiRestartNamespace holds the definition and compositions of the API server restart
// test.
const apiRestartNamespace = "apiserver-restart"

// apiRestartCompositions is how many compositions the client creates while etcd and the
// API server are restarted.
const apiRestartCompositions = 300

// apiRestarts are the signals etcd and the API server are stopped with, one
// restart each, spread over the load.
var apiRestarts = []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, syscall.SIGTERM}

// apiRestartDown is how long etcd and the API server stay stopped at each restart,
// besides the time they take to stop and to start.
const apiRestartDown = 2 * time.Second

var loadTests = schema.GroupVersionResource{Group: "composition.krateo.io", Version: "v0-1-0", Resource: "loadtests"}

// Issue 16: etcd and the API server stopped (SIGTERM, and once SIGKILL) and started
// again with the same data while a client that retries creates apiRestartCompositions
// compositions and Compositor installs them: every composition the API server
// accepted ends Ready with one release, deployed once; none is lost; Compositor runs
// on through the outages without a restart.
func TestAPIServerAndEtcdRestartUnderLoad(t *testing.T) {
	plane := startRestartableControlPlane(t)
	cp := plane.cp
	ctx := context.Background()
	serve := newCompositorProcess(t, cp, "--max-reconcile-rate", "1000")
	serve.start()
	applyDefinition(t, cp, serveCharts(t, loadChart).URL, apiRestartNamespace, "load-test", "0.1.0")

	cfg := *cp.Config
	cfg.Timeout = 10 * time.Second // a request the dying API server holds ends, and is tried again
	dyn, err := dynamic.NewForConfig(&cfg)
	require.NoError(t, err)
	loadCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()

	start := time.Now()
	var mu sync.Mutex
	accepted := map[string]bool{}
	attempts, alreadyExists := 0, 0
	failures := map[string]int{} // the errors retried, by kind
	names := make(chan string)
	var clients sync.WaitGroup
	for range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for name := range names {
				for loadCtx.Err() == nil {
					obj := &unstructured.Unstructured{}
					obj.SetAPIVersion("composition.krateo.io/v0-1-0")
					obj.SetKind("LoadTest")
					obj.SetName(name)
					obj.Object["spec"] = map[string]any{"value": name}
					_, err := dyn.Resource(loadTests).Namespace(apiRestartNamespace).Create(loadCtx, obj, metav1.CreateOptions{})
					mu.Lock()
					attempts++
					if err == nil || apierrors.IsAlreadyExists(err) {
						// AlreadyExists: an earlier attempt was accepted, its answer lost.
						if err != nil {
							alreadyExists++
						}
						accepted[name] = true
						mu.Unlock()
						break
					}
					failures[failureKind(err)]++
					mu.Unlock()
					time.Sleep(50 * time.Millisecond) // etcd, the API server or the webhook is down: try again
				}
			}
		}()
	}

	// Each restart starts once a further share of the compositions is accepted, so
	// that all of them fall in the middle of the load.
	type restart struct {
		sig                syscall.Signal
		acceptedBefore     int
		stopped, available time.Duration // since the signal
		killed             []string      // what outlived SIGTERM
	}
	var restarts []restart
	var restartErr error
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		defer func() {
			if restartErr != nil {
				cancel() // no use loading a control plane that is not coming back
			}
		}()
		for i, sig := range apiRestarts {
			threshold := (i + 1) * apiRestartCompositions / (len(apiRestarts) + 1)
			for {
				mu.Lock()
				n := len(accepted)
				mu.Unlock()
				if n >= threshold || loadCtx.Err() != nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if loadCtx.Err() != nil {
				return
			}
			mu.Lock()
			r := restart{sig: sig, acceptedBefore: len(accepted)}
			mu.Unlock()
			signalled := time.Now()
			r.killed = plane.stop(sig)
			r.stopped = time.Since(signalled)
			time.Sleep(apiRestartDown)
			if restartErr = plane.start(); restartErr != nil {
				return
			}
			r.available = time.Since(signalled)
			restarts = append(restarts, r)
		}
	}()
	for i := range apiRestartCompositions {
		select {
		case names <- fmt.Sprintf("c-%04d", i):
		case <-loadCtx.Done():
		}
	}
	close(names)
	clients.Wait()
	<-restarted
	loadTime := time.Since(start)
	require.NoError(t, restartErr, "restarting etcd and the API server")
	require.NoError(t, loadCtx.Err(), "the load did not end within its deadline: %d of %d accepted in %d attempts; retried errors: %v",
		len(accepted), apiRestartCompositions, attempts, failures)
	require.Len(t, restarts, len(apiRestarts), "every restart happened in the middle of the load")
	for i, r := range restarts {
		t.Logf("restart %d: %s after %d accepted; etcd and the API server ended %s after the signal, answered again %s after it (%s stopped on purpose); killed after %s: %v",
			i+1, r.sig, r.acceptedBefore, r.stopped.Round(time.Millisecond), r.available.Round(time.Millisecond), apiRestartDown, stopGrace, r.killed)
	}
	t.Logf("%d compositions accepted in %d attempts (%d retries, %d accepted by an AlreadyExists retry) over %s; retried errors: %v",
		len(accepted), attempts, attempts-len(accepted), alreadyExists, loadTime.Round(time.Millisecond), failures)
	require.Len(t, accepted, apiRestartCompositions)

	var list *unstructured.UnstructuredList
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		list, err = dyn.Resource(loadTests).Namespace(apiRestartNamespace).List(ctx, metav1.ListOptions{})
		require.NoError(c, err)
		notReady := 0
		for _, item := range list.Items {
			if !isReady(item) {
				notReady++
			}
		}
		assert.Zero(c, notReady, "compositions not Ready")
		select {
		case <-serve.exited:
			require.Fail(c, "compositor serve ended")
		default:
		}
	}, 3*time.Minute, time.Second)
	t.Logf("all %d Ready %s after the first create, %s after the load ended",
		len(list.Items), time.Since(start).Round(time.Millisecond), (time.Since(start) - loadTime).Round(time.Millisecond))

	select {
	case <-serve.exited:
		t.Errorf("compositor serve ended during the test: it should ride out the outages")
	default:
	}
	assert.Equal(t, 1, serve.runs, "Compositor was not restarted")

	assertInstalledOnceEach(t, cp, apiRestartNamespace, list.Items, accepted)
}

// failureKind names the kind of a failed create, to count the retries by cause.
func failureKind(err error) string {
	if reason := apierrors.ReasonForError(err); reason != metav1.StatusReasonUnknown {
		return string(reason)
	}
	return "transport"
}
