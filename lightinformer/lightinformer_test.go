package lightinformer

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

var configMaps = corev1.SchemeGroupVersion.WithResource("configmaps")

// events records what a handler was told, as "add name", "update name", "delete name".
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) handler() toolscache.ResourceEventHandler {
	record := func(verb string, obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		name := "?"
		if o, ok := obj.(metav1.Object); ok {
			name = o.GetName()
		}
		e.mu.Lock()
		e.got = append(e.got, verb+" "+name)
		e.mu.Unlock()
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record("add", obj) },
		UpdateFunc: func(_, obj any) { record("update", obj) },
		DeleteFunc: func(obj any) { record("delete", obj) },
	}
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.got...)
}

// TestInformersTellAndKeepWhatTheySelect: a dynamic informer keeps whole objects and a
// metadata informer their metadata without managed fields, both only of the labels
// selected, and tell their handler of each change after their store has it.
func TestInformersTellAndKeepWhatTheySelect(t *testing.T) {
	cp := controlplane.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	httpClient, err := rest.HTTPClientFor(cp.Config)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfigAndClient(cp.Config, httpClient)
	require.NoError(t, err)
	md, err := metadata.NewForConfigAndClient(cp.Config, httpClient)
	require.NoError(t, err)

	selected := labels.Set{"team": "a"}
	var whole, meta events
	wholeInformer := NewDynamic(dyn, Options{Resource: configMaps, LabelSelector: selected.String(), Handler: whole.handler()})
	metaInformer := NewMetadata(md, Options{Resource: configMaps, LabelSelector: selected.String(), Handler: meta.handler()})
	go wholeInformer.Run(ctx)
	go metaInformer.Run(ctx)
	require.Eventually(t, func() bool { return wholeInformer.HasSynced() && metaInformer.HasSynced() }, 30*time.Second, 10*time.Millisecond)

	cm := func(name string, l labels.Set) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: l}, Data: map[string]string{"k": "v"}}
	}
	chosen, other := cm("chosen", selected), cm("other", labels.Set{"team": "b"})
	require.NoError(t, cp.Client.Create(ctx, chosen))
	require.NoError(t, cp.Client.Create(ctx, other))
	chosen.Data["k"] = "w"
	require.NoError(t, cp.Client.Update(ctx, chosen))
	require.NoError(t, cp.Client.Delete(ctx, chosen))

	want := []string{"add chosen", "update chosen", "delete chosen"}
	for name, e := range map[string]*events{"dynamic": &whole, "metadata": &meta} {
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, want, e.list()) }, 30*time.Second, 10*time.Millisecond, name)
	}

	// The stores keep the selected objects only, typed by informer, without managed fields.
	kept := cm("kept", selected)
	require.NoError(t, cp.Client.Create(ctx, kept))
	require.NoError(t, cp.Client.Create(ctx, cm("ignored", labels.Set{"team": "b"})))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := wholeInformer.Lister().ByNamespace("default").Get("kept")
		if assert.NoError(c, err) {
			u, ok := got.(*unstructured.Unstructured)
			if assert.True(c, ok, "%T", got) {
				assert.Equal(c, map[string]any{"k": "v"}, u.Object["data"])
				assert.Empty(c, u.GetManagedFields())
			}
		}
		got, err = metaInformer.Lister().ByNamespace("default").Get("kept")
		if assert.NoError(c, err) {
			m, ok := got.(*metav1.PartialObjectMetadata)
			if assert.True(c, ok, "%T", got) {
				assert.Equal(c, "a", m.Labels["team"])
				assert.Empty(c, m.GetManagedFields())
			}
		}
	}, 30*time.Second, 10*time.Millisecond)
	for _, informer := range []*Informer{wholeInformer, metaInformer} {
		names := []string{}
		for _, obj := range informer.Store().List() {
			names = append(names, obj.(metav1.Object).GetName())
		}
		assert.Equal(t, []string{"kept"}, names)
	}

	// Reader reads the same store as a client.Reader, with copies of the informer's type.
	got := &metav1.PartialObjectMetadata{}
	require.NoError(t, metaInformer.Reader().Get(ctx, client.ObjectKey{Namespace: "default", Name: "kept"}, got))
	assert.Equal(t, "kept", got.Name)
	got.Labels["team"] = "changed"
	again := &metav1.PartialObjectMetadata{}
	require.NoError(t, metaInformer.Reader().Get(ctx, client.ObjectKey{Namespace: "default", Name: "kept"}, again))
	assert.Equal(t, "a", again.Labels["team"], "a copy, not the store's object")
	assert.Error(t, metaInformer.Reader().Get(ctx, client.ObjectKey{Namespace: "default", Name: "kept"}, &unstructured.Unstructured{}), "the informer holds metadata only")
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	require.NoError(t, wholeInformer.Reader().List(ctx, list, client.InNamespace("default"), client.MatchingLabels{"team": "a"}))
	require.Len(t, list.Items, 1)
	assert.Equal(t, "kept", list.Items[0].GetName())
	require.NoError(t, wholeInformer.Reader().List(ctx, list, client.InNamespace("elsewhere")))
	assert.Empty(t, list.Items)
}

// connectedMetadata is a metadata client of cp, and its HTTP client, whose connection
// to the API server, and the goroutines that connection keeps, exist already:
// goroutines counted after it are the informers'.
func connectedMetadata(t *testing.T, cp *controlplane.ControlPlane) (metadata.Interface, *http.Client) {
	t.Helper()
	httpClient, err := rest.HTTPClientFor(cp.Config)
	require.NoError(t, err)
	md, err := metadata.NewForConfigAndClient(cp.Config, httpClient)
	require.NoError(t, err)
	_, err = md.Resource(configMaps).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	return md, httpClient
}

// TestAnInformerCostsFourGoroutinesAndLeavesNone counts what a running informer keeps —
// the figure a thousand generated kinds multiply: the reflector's three and the HTTP/2
// stream of its watch — and that stopping it leaves nothing.
func TestAnInformerCostsFourGoroutinesAndLeavesNone(t *testing.T) {
	cp := controlplane.Start(t)
	md, httpClient := connectedMetadata(t, cp)
	before := settledGoroutines()

	const n = 20
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	informers := make([]*Informer, n)
	for i := range informers {
		informers[i] = NewMetadata(md, Options{Resource: configMaps, LabelSelector: fmt.Sprintf("n=%d", i), Resync: time.Hour})
		wg.Go(func() { informers[i].Run(ctx) })
	}
	require.Eventually(t, func() bool {
		for _, informer := range informers {
			if !informer.HasSynced() {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond)
	running := settledGoroutines()
	perInformer := float64(running-before) / n
	t.Logf("%d goroutines before, %d with %d informers: %.1f each", before, running, n, perInformer)
	assert.LessOrEqual(t, perInformer, 4.0, "goroutines per running informer")

	cancel()
	wg.Wait()
	// Connections to the API server come and go with their streams; close the idle ones.
	require.Eventually(t, func() bool {
		utilnet.CloseIdleConnectionsFor(httpClient.Transport)
		return runtime.NumGoroutine() <= before
	}, 30*time.Second, 50*time.Millisecond,
		"goroutines after stopping every informer: more than %d", before)
}

// settledGoroutines counts goroutines once the count stops moving for a moment.
func settledGoroutines() int {
	last := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		now := runtime.NumGoroutine()
		if now == last {
			return now
		}
		last = now
	}
	return last
}
