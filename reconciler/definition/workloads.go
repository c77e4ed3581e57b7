package definition

import (
	"context"
	"errors"
	"fmt"

	"helm.sh/helm/v3/pkg/chart"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/generators/controller"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/reconciler/internal/condition"
	"github.com/compositor-dev/compositor/reconciler/internal/ssa"
)

// Reasons of failures to generate the controller's identity.
const (
	ReasonUnknownKinds   = "UnknownKinds"
	ReasonForbiddenKinds = "ForbiddenKinds"
)

// applyWorkloads gives the definition's version its controller: the narrowest RBAC the
// chart needs, bound in every namespace that holds compositions of that version (by
// Kinds, as they come and go), and the controller running under it.
func (r *Reconciler) applyWorkloads(ctx context.Context, def *corev1alpha1.CompositionDefinition, ch *chart.Chart, api *generatedAPI) error {
	types, err := rbac.ResourceTypes(ch, r.Mapper)
	switch {
	case errors.Is(err, rbac.ErrForbiddenKind):
		return &condition.Error{Reason: ReasonForbiddenKinds, Terminal: true, Err: err}
	case errors.Is(err, rbac.ErrUnknownKind):
		// The kinds may come with a CRD installed later: try again.
		return &condition.Error{Reason: ReasonUnknownKinds, Err: err}
	case err != nil:
		return err
	}
	opts := rbac.Options{
		Namespace:      def.Namespace,
		DefinitionName: def.Name,
		Plural:         api.Plural,
		Version:        api.Version,
		Group:          crd.Group,
		Types:          types,
	}
	if c := def.Spec.Chart.Credentials; c != nil {
		// The controller fetches the chart too; charts.Source.Fetch has refused a Secret of
		// another namespace already.
		opts.CredentialsSecret = c.PasswordRef.Name
	}
	objs, err := rbac.Generate(opts)
	if err != nil {
		return &condition.Error{Reason: ReasonApplyFailed, Terminal: true, Err: err}
	}
	for _, obj := range objs.List() {
		if err := ssa.Apply(ctx, r.Client, obj); err != nil {
			return err
		}
	}
	if objs.CredentialsRole == nil {
		if err := r.deleteCredentialsRole(ctx, def.Namespace, api.Plural, api.Version); err != nil {
			return err
		}
	}
	if r.Kinds != nil {
		if err := r.Kinds.Ensure(ctx, def, api.Kind, api.Plural, api.Version); err != nil {
			return err
		}
		if r.Kinds.InProcess {
			return nil
		}
	}
	return ssa.Apply(ctx, r.Client, controller.Deployment(controller.Options{
		Definition:         def,
		Plural:             api.Plural,
		Version:            api.Version,
		Group:              crd.Group,
		Image:              r.ControllerImage,
		AllowChartNetworks: r.AllowChartNetworks,
	}))
}

// deleteWorkloads removes the controller and RBAC of one version of the definition.
func (r *Reconciler) deleteWorkloads(ctx context.Context, def *corev1alpha1.CompositionDefinition, plural, version string) error {
	if r.Kinds != nil {
		r.Kinds.Stop(def.Namespace, plural, version)
	}
	labels := client.MatchingLabels(rbac.IdentityLabels(def.Namespace, plural, version))
	deployment := &appsv1.Deployment{}
	deployment.Namespace, deployment.Name = def.Namespace, controller.Name(plural, version)
	var errs []error
	for _, del := range []func() error{
		func() error { return r.Client.Delete(ctx, deployment) },
		func() error {
			return r.Client.DeleteAllOf(ctx, &corev1.ServiceAccount{}, client.InNamespace(def.Namespace), labels)
		},
		func() error { return r.Client.DeleteAllOf(ctx, &rbacv1.ClusterRoleBinding{}, labels) },
		func() error { return r.Client.DeleteAllOf(ctx, &rbacv1.ClusterRole{}, labels) },
		func() error {
			return r.Client.DeleteAllOf(ctx, &rbacv1.Role{}, client.InNamespace(def.Namespace), labels)
		},
		func() error { return r.deleteRoleBindings(ctx, labels) },
	} {
		if err := client.IgnoreNotFound(del()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the controller of %s %s: %w", plural, version, err)
	}
	return nil
}

// deleteCredentialsRole removes the credentials Role and RoleBinding of a version
// whose chart no longer needs credentials.
func (r *Reconciler) deleteCredentialsRole(ctx context.Context, namespace, plural, version string) error {
	name := rbac.NamesFor(namespace, plural, version).Credentials
	var errs []error
	for _, obj := range []client.Object{&rbacv1.RoleBinding{}, &rbacv1.Role{}} {
		obj.SetNamespace(namespace)
		obj.SetName(name)
		errs = append(errs, client.IgnoreNotFound(r.Client.Delete(ctx, obj)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the credentials Role of %s %s: %w", plural, version, err)
	}
	return nil
}

// deleteRoleBindings deletes the release bindings in every namespace: DeleteAllOf works
// one namespace at a time.
func (r *Reconciler) deleteRoleBindings(ctx context.Context, labels client.MatchingLabels) error {
	list := &rbacv1.RoleBindingList{}
	if err := r.Client.List(ctx, list, labels); err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		errs = append(errs, client.IgnoreNotFound(r.Client.Delete(ctx, &list.Items[i])))
	}
	return errors.Join(errs...)
}
