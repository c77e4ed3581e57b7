// Package policy keeps the policy engine of every replica in step with the
// CompositionPolicy objects.
package policy

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies"
)

// Reconciler keeps the policy engine in step with the CompositionPolicy objects:
// each change is compiled once and swapped in; a policy that does not compile leaves
// the last good version of it in force and reports its errors in status.
type Reconciler struct {
	Client client.Client
	Engine *policies.Engine
	// ReadOnly keeps the engine in step and writes no status: generated controllers
	// judge what they install with the policies, and only Compositor reports on them.
	ReadOnly bool
}

// SetupWithManager registers the reconciler with mgr. It runs on every replica: each
// one serves admission requests with its own engine.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	name := "compositionpolicy"
	if r.ReadOnly {
		name = "compositionpolicy-reader"
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&policyv1alpha1.CompositionPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controllerOptionsEveryReplica()).
		Complete(r)
}

// Reconcile compiles one CompositionPolicy into the engine and reports the result.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := &policyv1alpha1.CompositionPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.Engine.Remove(policies.OriginObject, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.DeletionTimestamp.IsZero() {
		r.Engine.Remove(policies.OriginObject, obj.Name)
		return ctrl.Result{}, nil
	}
	p, err := policies.FromCompositionPolicy(obj)
	if err == nil {
		err = r.Engine.Set(ctx, p)
	}
	if r.ReadOnly {
		return ctrl.Result{}, nil // a policy that does not compile keeps its last good version
	}
	before := obj.DeepCopy()
	obj.Status.ObservedGeneration = obj.Generation
	obj.Status.Compiled = err == nil
	obj.Status.Errors = policies.CompileErrorsOf(err)
	if err != nil && len(obj.Status.Errors) == 0 {
		obj.Status.Errors = []policyv1alpha1.CompileError{{Message: err.Error()}}
	}
	if equality.Semantic.DeepEqual(before.Status, obj.Status) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Status().Patch(ctx, obj, client.MergeFrom(before)))
}

// controllerOptionsEveryReplica runs a controller on every replica, leader or not.
func controllerOptionsEveryReplica() controller.Options {
	return controller.Options{NeedLeaderElection: ptr.To(false)}
}

// Load puts every CompositionPolicy that compiles into engine, before anything is
// judged with it: the reconciler then keeps it in step. reader lists them.
func Load(ctx context.Context, reader client.Reader, engine *policies.Engine) error {
	list := &policyv1alpha1.CompositionPolicyList{}
	if err := reader.List(ctx, list); err != nil {
		return err
	}
	for i := range list.Items {
		obj := &list.Items[i]
		if !obj.DeletionTimestamp.IsZero() {
			continue
		}
		p, err := policies.FromCompositionPolicy(obj)
		if err == nil {
			err = engine.Set(ctx, p)
		}
		_ = err // a policy that does not compile is reported by Compositor, in its status
	}
	return nil
}
