package reconciler

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// VersionKey names one definition namespace's controller of a served version.
type VersionKey struct{ Namespace, Plural, Version string }

// restartDelay is how long a manager that stopped on an error waits to start again.
const restartDelay = 2 * time.Second

// versionManagers runs one manager per served version, each from when it is ensured
// until it is stopped or Compositor stops. Generated kinds come and go with their
// versions, and controller-runtime cannot remove a watch from a running manager: a
// manager of its own per version can be stopped with the version.
type versionManagers struct {
	once    sync.Once
	started chan struct{}
	mu      sync.Mutex
	base    context.Context
	running map[VersionKey]*runningManager
	wg      sync.WaitGroup
}

type runningManager struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (m *versionManagers) init() {
	m.once.Do(func() {
		m.started = make(chan struct{})
		m.running = map[VersionKey]*runningManager{}
	})
}

// Start runs until ctx is done, then stops every manager and waits for them.
func (m *versionManagers) Start(ctx context.Context) error {
	m.init()
	m.mu.Lock()
	m.base = ctx
	m.mu.Unlock()
	close(m.started)
	<-ctx.Done()
	m.mu.Lock()
	for key, r := range m.running {
		r.cancel()
		delete(m.running, key)
	}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// NeedLeaderElection is true: only the leader runs them.
func (m *versionManagers) NeedLeaderElection() bool { return true }

// ensure starts the manager of key unless it runs; newManager builds it, again after
// each error (its kind may not be discoverable yet). what names it in logs. It waits
// for Start first.
func (m *versionManagers) ensure(ctx context.Context, key VersionKey, what string, newManager func() (manager.Manager, error)) error {
	m.init()
	select {
	case <-m.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.base.Err() != nil {
		return m.base.Err()
	}
	if _, ok := m.running[key]; ok {
		return nil
	}
	runCtx, cancel := context.WithCancel(m.base)
	r := &runningManager{cancel: cancel, done: make(chan struct{})}
	m.running[key] = r
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(r.done)
		m.run(runCtx, key, what, newManager)
	}()
	return nil
}

// run runs a manager until ctx is done, building and starting it again after an error.
func (m *versionManagers) run(ctx context.Context, key VersionKey, what string, newManager func() (manager.Manager, error)) {
	logger := log.FromContext(ctx).WithValues("namespace", key.Namespace, "resource", key.Plural, "version", key.Version)
	for ctx.Err() == nil {
		mgr, err := newManager()
		if err == nil {
			logger.Info("Starting the " + what)
			err = mgr.Start(ctx)
		}
		if err != nil && ctx.Err() == nil {
			logger.Error(err, "The "+what+" stopped; starting it again")
			select {
			case <-ctx.Done():
			case <-time.After(restartDelay):
			}
		}
	}
}

// stop stops the manager of key and waits until it has stopped.
func (m *versionManagers) stop(key VersionKey) {
	m.init()
	m.mu.Lock()
	r, ok := m.running[key]
	delete(m.running, key)
	m.mu.Unlock()
	if ok {
		r.cancel()
		<-r.done
	}
}
