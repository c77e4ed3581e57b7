package reconciler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/generators/rbac"
)

// CompositionControllers run the composition controllers of served versions. The
// definition reconciler uses them instead of generated Deployments when set.
type CompositionControllers interface {
	// Ensure starts, once, the controller of version of def's kind.
	Ensure(ctx context.Context, def *corev1alpha1.CompositionDefinition, kind, plural, version string) error
	// Stop stops the controller of version of plural in the definition namespace.
	Stop(namespace, plural, version string)
}

// VersionKey names one definition namespace's controller of a served version.
type VersionKey struct{ Namespace, Plural, Version string }

// restartDelay is how long a controller that stopped on an error waits to start again.
const restartDelay = 2 * time.Second

// InProcess runs composition controllers inside Compositor, each in its own manager
// whose client impersonates the version's generated ServiceAccount, so that the API
// server enforces the generated RBAC. It is a leader-elected runnable of Compositor's
// manager: the controllers run while it does.
type InProcess struct {
	// Config is Compositor's own; each controller impersonates from it.
	Config *rest.Config
	// Client, as Compositor, binds the release role in composition namespaces.
	Client client.Client
	Scheme *runtime.Scheme
	Charts *Charts
	// MaxReconcileRate and Sync are those of each controller.
	MaxReconcileRate int
	Sync             time.Duration

	once    sync.Once
	started chan struct{}
	mu      sync.Mutex
	base    context.Context
	running map[VersionKey]*inProcessController
	wg      sync.WaitGroup
}

type inProcessController struct {
	cancel context.CancelFunc
	done   chan struct{}
}

var _ CompositionControllers = (*InProcess)(nil)

func (p *InProcess) init() {
	p.once.Do(func() {
		p.started = make(chan struct{})
		p.running = map[VersionKey]*inProcessController{}
	})
}

// Start runs until ctx is done, then stops every controller and waits for them.
func (p *InProcess) Start(ctx context.Context) error {
	p.init()
	p.mu.Lock()
	p.base = ctx
	p.mu.Unlock()
	close(p.started)
	<-ctx.Done()
	p.mu.Lock()
	for key, c := range p.running {
		c.cancel()
		delete(p.running, key)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// NeedLeaderElection is true: only the leader runs controllers.
func (p *InProcess) NeedLeaderElection() bool { return true }

// Running lists the controllers that run.
func (p *InProcess) Running() []VersionKey {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]VersionKey, 0, len(p.running))
	for k := range p.running {
		keys = append(keys, k)
	}
	return keys
}

// Ensure starts the controller of the version unless it runs.
func (p *InProcess) Ensure(ctx context.Context, def *corev1alpha1.CompositionDefinition, kind, plural, version string) error {
	p.init()
	select {
	case <-p.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	key := VersionKey{Namespace: def.Namespace, Plural: plural, Version: version}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.base.Err() != nil {
		return p.base.Err()
	}
	if _, ok := p.running[key]; ok {
		return nil
	}
	bind, err := p.binder(def, plural, version)
	if err != nil {
		return err
	}
	opts := CompositionManagerOptions{
		GVK:                 schema.GroupVersionKind{Group: crd.Group, Version: version, Kind: kind},
		Scheme:              p.Scheme,
		Charts:              p.Charts,
		DefinitionNamespace: def.Namespace,
		Bind:                bind,
		MaxReconcileRate:    p.MaxReconcileRate,
		Sync:                p.Sync,
	}
	ctrlCtx, cancel := context.WithCancel(p.base)
	c := &inProcessController{cancel: cancel, done: make(chan struct{})}
	p.running[key] = c
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(c.done)
		p.run(ctrlCtx, key, opts)
	}()
	return nil
}

// run runs the controller's manager until ctx is done, starting it again after an
// error (its kind may not be discoverable yet).
func (p *InProcess) run(ctx context.Context, key VersionKey, opts CompositionManagerOptions) {
	logger := log.FromContext(ctx).WithValues("namespace", key.Namespace, "resource", key.Plural, "version", key.Version)
	for ctx.Err() == nil {
		mgr, err := NewCompositionManager(p.impersonating(key), opts)
		if err == nil {
			logger.Info("Starting an in-process composition controller")
			err = mgr.Start(ctx)
		}
		if err != nil && ctx.Err() == nil {
			logger.Error(err, "In-process composition controller stopped; starting it again")
			select {
			case <-ctx.Done():
			case <-time.After(restartDelay):
			}
		}
	}
}

// Stop stops the controller of the version and waits until it has stopped.
func (p *InProcess) Stop(namespace, plural, version string) {
	p.init()
	key := VersionKey{Namespace: namespace, Plural: plural, Version: version}
	p.mu.Lock()
	c, ok := p.running[key]
	delete(p.running, key)
	p.mu.Unlock()
	if ok {
		c.cancel()
		<-c.done
	}
}

// impersonating is Compositor's config acting as the version's ServiceAccount.
func (p *InProcess) impersonating(key VersionKey) *rest.Config {
	cfg := rest.CopyConfig(p.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + key.Namespace + ":" + rbac.ServiceAccountName(key.Plural, key.Version),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + key.Namespace, "system:authenticated"},
	}
	return cfg
}

// binder returns the function that binds the version's release role, as Compositor,
// in a namespace the first time the controller acts there.
func (p *InProcess) binder(def *corev1alpha1.CompositionDefinition, plural, version string) (func(context.Context, string) error, error) {
	objs, err := rbac.Generate(rbac.Options{Namespace: def.Namespace, DefinitionName: def.Name, Plural: plural, Version: version, Group: crd.Group})
	if err != nil {
		return nil, fmt.Errorf("naming the RBAC of %s %s: %w", plural, version, err)
	}
	var bound sync.Map
	return func(ctx context.Context, namespace string) error {
		if _, ok := bound.Load(namespace); ok {
			return nil
		}
		if err := apply(ctx, p.Client, objs.ReleaseBinding(namespace)); err != nil {
			return err
		}
		bound.Store(namespace, true)
		return nil
	}, nil
}
