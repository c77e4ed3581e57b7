package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// boundNamespaces follows the ConfigMap, in Compositor's namespace, whose keys are the
// namespaces where a controller's release role is bound (rbac.Objects.BoundNamespaces,
// kept by reconciler/binding): the only namespaces where it may list and watch its
// compositions. A missing ConfigMap lists none.
type boundNamespaces struct {
	clientset kubernetes.Interface
	at        types.NamespacedName

	mu      sync.Mutex
	current []string
	// changed is signalled, without blocking, when current may have changed; the
	// first signal comes once the ConfigMap has been read.
	changed chan struct{}
}

func newBoundNamespaces(clientset kubernetes.Interface, at types.NamespacedName) *boundNamespaces {
	return &boundNamespaces{clientset: clientset, at: at, changed: make(chan struct{}, 1)}
}

// follow keeps current until ctx ends.
func (b *boundNamespaces) follow(ctx context.Context) {
	lw := cache.NewListWatchFromClient(b.clientset.CoreV1().RESTClient(), "configmaps", b.at.Namespace,
		fields.OneTermEqualSelector("metadata.name", b.at.Name))
	set := func(obj any) {
		var namespaces []string
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			namespaces = slices.Sorted(maps.Keys(cm.Data))
		}
		b.set(namespaces)
	}
	store, inf := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    set,
			UpdateFunc: func(_, obj any) { set(obj) },
			DeleteFunc: func(any) { set(nil) },
		},
	})
	go inf.Run(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) && len(store.List()) == 0 {
		b.set(nil)
	}
}

func (b *boundNamespaces) set(namespaces []string) {
	b.mu.Lock()
	b.current = append([]string{}, namespaces...)
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

func (b *boundNamespaces) get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.current)
}

// runScoped runs, until ctx ends, the manager build makes for the namespaces where the
// controller is bound, and makes it again each time they change: a controller's cache
// holds the compositions of those namespaces only, as its RBAC allows. With none bound,
// the manager runs no composition controller.
func runScoped(ctx context.Context, bound *boundNamespaces, build func(namespaces []string) (manager.Manager, error)) error {
	log := logr.FromContextOrDiscard(ctx).WithName("bound-namespaces")
	go bound.follow(ctx)
	type run struct {
		cancel context.CancelFunc
		done   chan error
	}
	var (
		current []string
		running *run
	)
	stop := func() error {
		if running == nil {
			return nil
		}
		running.cancel()
		err := <-running.done
		running = nil
		return err
	}
	for {
		var done chan error
		if running != nil {
			done = running.done
		}
		select {
		case <-ctx.Done():
			return stop()
		case <-bound.changed:
			namespaces := bound.get()
			if running != nil && slices.Equal(namespaces, current) {
				continue
			}
			if err := stop(); err != nil {
				return err
			}
			current = namespaces
			mgr, err := build(namespaces)
			if err != nil {
				return err
			}
			mgrCtx, cancel := context.WithCancel(ctx)
			running = &run{cancel: cancel, done: make(chan error, 1)}
			go func(r *run) { r.done <- mgr.Start(mgrCtx) }(running)
			log.Info("watching the compositions of the namespaces where the controller is bound", "configMap", bound.at.String(), "namespaces", namespaces)
		case err := <-done:
			running.cancel()
			running = nil
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("with no error, while the controller ran")
			}
			return fmt.Errorf("the controller's manager stopped: %w", err)
		}
	}
}
