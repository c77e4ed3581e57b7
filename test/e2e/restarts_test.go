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
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// loadNamespace holds the definition and compositions of the load-test chart.
const loadNamespace = "load"

// loadCompositions is how many compositions the client creates while Compositor is
// restarted.
const loadCompositions = 1000

// loadRestarts is how many times Compositor is killed and started again meanwhile.
const loadRestarts = 10

var loadChart = &chart.Chart{
	Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "load-test", Version: "0.1.0"},
	Values:   map[string]any{"value": "one"},
	Schema:   []byte(`{"type":"object","properties":{"value":{"type":"string"}},"additionalProperties":false}`),
	Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\ndata: {value: '{{ .Values.value }}'}\n")}},
}

// Issue 16: Compositor killed (SIGKILL) and started again loadRestarts times while a
// client that retries creates loadCompositions compositions: every composition the
// API server accepted ends Ready with one release, deployed once; none is lost.
func TestRestartsUnderLoadLoseNoComposition(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	serve := newCompositorProcess(t, cp, "--max-reconcile-rate", "1000")
	serve.start()
	applyDefinition(t, cp, serveCharts(t, loadChart).URL, loadNamespace, "load-test", "0.1.0")

	start := time.Now()
	var mu sync.Mutex
	accepted := map[string]bool{}
	attempts := 0
	names := make(chan string)
	var clients sync.WaitGroup
	for range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for name := range names {
				for {
					obj := &unstructured.Unstructured{}
					obj.SetAPIVersion("composition.krateo.io/v0-1-0")
					obj.SetKind("LoadTest")
					obj.SetNamespace(loadNamespace)
					obj.SetName(name)
					obj.Object["spec"] = map[string]any{"value": name}
					err := cp.Client.Create(ctx, obj)
					mu.Lock()
					attempts++
					mu.Unlock()
					if err == nil || apierrors.IsAlreadyExists(err) {
						// Already there: an earlier attempt was accepted, its answer lost.
						mu.Lock()
						accepted[name] = true
						mu.Unlock()
						break
					}
					time.Sleep(50 * time.Millisecond) // the webhook is down: try again
				}
			}
		}()
	}
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		for range loadRestarts {
			time.Sleep(1500 * time.Millisecond)
			serve.stop(syscall.SIGKILL)
			serve.start()
		}
	}()
	for i := range loadCompositions {
		names <- fmt.Sprintf("c-%04d", i)
	}
	close(names)
	clients.Wait()
	<-restarted
	t.Logf("%d compositions accepted in %d attempts over %s, with %d restarts of Compositor",
		len(accepted), attempts, time.Since(start).Round(time.Millisecond), loadRestarts)
	require.Len(t, accepted, loadCompositions)

	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("composition.krateo.io/v0-1-0")
	list.SetKind("LoadTestList")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, cp.Client.List(ctx, list, client.InNamespace(loadNamespace)))
		notReady := 0
		for _, item := range list.Items {
			if !isReady(item) {
				notReady++
			}
		}
		assert.Zero(c, notReady, "compositions not Ready")
	}, 5*time.Minute, time.Second)
	t.Logf("all %d Ready %s after the first create", len(list.Items), time.Since(start).Round(time.Millisecond))

	assertInstalledOnceEach(t, cp, loadNamespace, list.Items, accepted)
}

// assertInstalledOnceEach asserts that the compositions listed are exactly those the
// API server accepted, and that each has one Helm release with one deployed revision
// holding its value: none lost, none extra, none installed twice. A second revision is
// an upgrade of the first, kept in the history (an uninstall would have removed it):
// the operation run again after an interrupted install (revision 1 failed), or an
// upgrade after an install whose status an outage or a kill kept from the composition,
// which the controller cannot tell from a changed spec (revision 1 superseded).
func assertInstalledOnceEach(t *testing.T, cp *controlplane.ControlPlane, namespace string, items []unstructured.Unstructured, accepted map[string]bool) {
	t.Helper()
	ctx := context.Background()
	listed := map[string]bool{}
	for _, item := range items {
		listed[item.GetName()] = true
	}
	assert.Equal(t, accepted, listed, "none lost, none extra")

	secrets := &corev1.SecretList{}
	require.NoError(t, cp.Client.List(ctx, secrets, client.InNamespace(namespace), client.MatchingLabels{"owner": "helm"}))
	revisions := map[string]map[string]string{}
	for _, s := range secrets.Items {
		name := s.Labels["name"]
		if revisions[name] == nil {
			revisions[name] = map[string]string{}
		}
		revisions[name][s.Labels["version"]] = s.Labels["status"]
	}
	assert.Len(t, revisions, len(accepted), "one release per composition")
	recovered, withEvent := 0, 0
	shapes := map[string]int{} // release histories by revision statuses, to quote
	for name := range accepted {
		history := revisions[name]
		shapes[fmt.Sprint(history)]++
		deployed := 0
		for _, status := range history {
			if status == "deployed" {
				deployed++
			}
		}
		assert.Equal(t, 1, deployed, "%s: one deployed revision: %v", name, history)
		if len(history) > 1 {
			recovered++
			if len(eventNotes(t, cp, namespace, name, "ReleaseRecovered")) > 0 {
				withEvent++
			}
			assert.Contains(t, []string{"superseded", "failed"}, history["1"], "%s: %v", name, history)
		}
		cm := &corev1.ConfigMap{}
		if assert.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cm)) {
			assert.Equal(t, name, cm.Data["value"])
		}
	}
	t.Logf("%d releases at revision 1 only, %d with a second revision, %d of them after a ReleaseRecovered event; histories: %v",
		len(accepted)-recovered, recovered, withEvent, shapes)
}

// isReady reports whether the composition is Ready for its latest generation.
func isReady(obj unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			generation, _ := m["observedGeneration"].(int64)
			return m["status"] == "True" && generation == obj.GetGeneration()
		}
	}
	return false
}
