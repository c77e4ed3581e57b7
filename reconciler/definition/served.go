// Served versions: the definition reconciler alone decides which versions the kinds
// runtime (package kinds) serves, in one of two modes on each replica.
//
//   - Leading: Reconcile, on the leader, serves a definition's version as it applies
//     its controller (applyWorkloads), before the status names it, and stops a version
//     as it deletes its controller and RBAC (deleteWorkloads).
//   - Following: where the runtime runs on every replica (targets shared among
//     replicas: kinds.Runtime.NeedLeaderElection is false), a replica that does not
//     lead serves exactly the versions the definitions' status serves, and stops the
//     others, writing nothing, until it is elected.
//
// The leading mode serves or stops nothing before the following mode has ended on its
// replica (handOver), so that one of the two at a time decides.

package definition

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/reconciler/kinds"
)

// setupFollower adds the following mode to mgr when the kinds runtime runs on replicas
// that do not lead.
func (r *Reconciler) setupFollower(mgr ctrl.Manager) error {
	if r.Kinds == nil || r.Kinds.NeedLeaderElection() {
		return nil
	}
	r.follower = &follower{definitions: mgr.GetCache(), kinds: r.Kinds, elected: mgr.Elected(), done: make(chan struct{})}
	return mgr.Add(r.follower)
}

// serveVersion serves api's version of def in the leading mode.
func (r *Reconciler) serveVersion(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI) error {
	if err := r.handOver(ctx); err != nil {
		return err
	}
	return r.Kinds.Ensure(ctx, def, api.Kind, api.Plural, api.Version)
}

// stopVersion stops serving a version of a definition of namespace in the leading
// mode.
func (r *Reconciler) stopVersion(ctx context.Context, namespace, plural, version string) error {
	if err := r.handOver(ctx); err != nil {
		return err
	}
	r.Kinds.Stop(namespace, plural, version)
	return nil
}

// handOver waits until the following mode has ended on this replica, if it runs here:
// this replica leads, and the following mode serves and stops nothing any more.
func (r *Reconciler) handOver(ctx context.Context) error {
	if r.follower == nil {
		return nil
	}
	select {
	case <-r.follower.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// follower is the following mode, a runnable on every replica. It reads the
// definitions from the cache and tells the runtime what to serve; it writes nothing.
type follower struct {
	definitions cache.Cache
	kinds       *kinds.Runtime
	elected     <-chan struct{} // closed once this replica leads
	done        chan struct{}   // closed once Start has returned
}

// NeedLeaderElection is false: the follower runs on every replica, until it leads.
func (*follower) NeedLeaderElection() bool { return false }

// Start serves, until this replica leads or ctx ends, the versions the definitions in
// the cache serve, and stops the others (serveStatus), each time a definition changes.
func (f *follower) Start(ctx context.Context) error {
	defer close(f.done)
	logger := ctrl.LoggerFrom(ctx).WithName("definition-follower")
	informer, err := f.definitions.GetInformer(ctx, &corev1alpha1.CompositionDefinition{})
	if err != nil {
		logger.Error(err, "Watching the definitions, to serve their versions on this replica")
		return nil
	}
	kick := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	registration, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, obj any) { poke(obj) }, DeleteFunc: poke,
	})
	if err != nil {
		logger.Error(err, "Watching the definitions, to serve their versions on this replica")
		return nil
	}
	defer func() { _ = informer.RemoveEventHandler(registration) }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.elected:
			return nil
		case <-kick:
		}
		if f.leading() {
			return nil
		}
		if err := f.serveStatus(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Serving the versions of the definitions on this replica")
			time.AfterFunc(time.Second, func() { poke(nil) })
		}
	}
}

// leading reports whether this replica leads.
func (f *follower) leading() bool {
	select {
	case <-f.elected:
		return true
	default:
		return false
	}
}

// serveStatus serves every version a definition in the cache serves by its status, and
// stops serving the others.
func (f *follower) serveStatus(ctx context.Context) error {
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := f.definitions.List(ctx, list); err != nil {
		return err
	}
	served := map[kinds.VersionKey]bool{}
	var errs []error
	for i := range list.Items {
		def := &list.Items[i]
		for _, key := range servedByStatus(def) {
			served[key] = true
			if err := f.kinds.Ensure(ctx, def, def.Status.Kind, key.Plural, key.Version); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, key := range f.kinds.Served() {
		if !served[key] {
			f.kinds.Stop(key.Namespace, key.Plural, key.Version)
		}
	}
	return errors.Join(errs...)
}

// servedByStatus are the versions def's status serves: status.apiVersion and the
// versions it retains (status.retained) for the compositions still pinned to them, of
// status.resource, which a definition being deleted keeps until its compositions are
// gone. A deprecated version (only kept for its clients) has no controller.
func servedByStatus(def *corev1alpha1.CompositionDefinition) []kinds.VersionKey {
	gvk, ok := ownership.Served(def)
	if !ok || def.Status.Resource == "" {
		return nil
	}
	keys := []kinds.VersionKey{{Namespace: def.Namespace, Plural: def.Status.Resource, Version: gvk.Version}}
	for _, r := range def.Status.Retained {
		if gv, err := schema.ParseGroupVersion(r.APIVersion); err == nil && gv.Version != gvk.Version && !r.Deprecated() {
			keys = append(keys, kinds.VersionKey{Namespace: def.Namespace, Plural: def.Status.Resource, Version: gv.Version})
		}
	}
	return keys
}
