package definition

import (
	"context"
	"errors"
	"fmt"
	"slices"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/controller"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/reconciler/internal/ssa"
)

// Reasons of failures to generate the controller's identity.
const (
	ReasonUnknownKinds   = "UnknownKinds"
	ReasonForbiddenKinds = "ForbiddenKinds"
)

// applyWorkloads gives the definition's version its controller: the narrowest RBAC the
// chart needs, bound in every namespace that holds compositions of that version (by
// Kinds, as they come and go), and the controller running under it. digest is the
// chart's: a controller Deployment may get the Secret keeping that archive in
// Compositor's namespace, and no other. Failing to grant that (archiveErr) costs
// nothing while the chart source is up: the controller fetches from it. A controller
// Deployment may also get Secret rbac.ReleaseSealSecret there, the key that seals
// Helm's release records: without it the controller acts on no release, so failing to
// grant it fails the version.
//
// The controller's ServiceAccount and Deployment live in Compositor's namespace, which
// no tenant writes, whatever namespace the definition is in. An installation from
// before, whose identities are in the definition's namespace, moves without a gap
// (moveIdentity): the new ones are made first, the old ones removed once the new
// ones serve.
func (r *Reconciler) applyWorkloads(ctx context.Context, def *corev1alpha1.CompositionDefinition, ch *chart.Chart, digest string, api *generatedAPI) (archiveErr, err error) {
	opts, objs, err := r.versionRBAC(ctx, def, ch, digest, api)
	if err != nil {
		return nil, err
	}
	if archiveErr, err = r.applyVersionRBAC(ctx, def, api, objs); err != nil {
		return nil, err
	}
	if r.Kinds != nil {
		r.Kinds.SetFormerIdentity(def.Namespace, api.Plural, api.Version, opts.FormerServiceAccount)
		if err := r.serveVersion(ctx, def, api); err != nil {
			return archiveErr, err
		}
		if r.Kinds.InProcess {
			// The version's client impersonates the new ServiceAccount from its start:
			// the old one serves nothing any more.
			return archiveErr, r.removeLegacyIdentity(ctx, def, api.Plural, api.Version)
		}
	}
	return archiveErr, r.applyController(ctx, def, api, opts, objs)
}

// applyController applies the controller Deployment of api's version, in Compositor's
// namespace, under the RBAC of opts and objs; then, once it serves, removes the one
// that ran in the definition's namespace before (moveIdentity).
func (r *Reconciler) applyController(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, opts rbac.Options, objs *rbac.Objects) error {
	if objs.ReleaseSealRole == nil {
		return &condition.Error{Reason: ReasonApplyFailed, Terminal: true, Err: errors.New(
			"Compositor's namespace, which keeps the release seal, is unknown here, so no controller Deployment could prove Helm's release records")}
	}
	err := ssa.Apply(ctx, r.Client, controller.Deployment(controller.Options{
		Definition:         def,
		Namespace:          opts.IdentityNamespace,
		Plural:             api.Plural,
		Version:            api.Version,
		Group:              vocab.CompositionGroup,
		Image:              r.ControllerImage,
		AllowChartNetworks: r.AllowChartNetworks,
		// With the RBAC above, the controller installs from the kept archive while the
		// chart source is down.
		ChartArchiveNamespace: opts.ChartArchiveNamespace,
		// With the RBAC above, the controller reads the key that seals the releases.
		ReleaseSealNamespace: opts.ReleaseSealNamespace,
	}))
	if err != nil {
		return err
	}
	if opts.FormerServiceAccount {
		// The old controller keeps its rights until the new one serves; the new
		// Deployment's status brings the definition back here (definitionsOfController).
		return nil
	}
	return r.removeLegacyIdentity(ctx, def, api.Plural, api.Version)
}

// formerIdentity tells whether the controller of a version still runs, as a Deployment,
// under the ServiceAccount it had in the definition's namespace before identities
// moved to Compositor's (rbac.LegacyServiceAccountName), while the new Deployment does
// not serve yet: then the release bindings name both ServiceAccounts
// (rbac.Options.FormerServiceAccount), so that writes and installs go on throughout
// the move. Only Compositor's own record says a version hands over (moveHandover),
// never a Deployment in the definition's namespace, which its tenants may write. In
// process there is nothing to wait for: the version's client impersonates the new
// ServiceAccount from its start.
func (r *Reconciler) formerIdentity(ctx context.Context, def *corev1alpha1.CompositionDefinition, plural, version string) (bool, error) {
	if (r.Kinds != nil && r.Kinds.InProcess) || r.compositorNamespace() == "" {
		return false, nil
	}
	if state, err := r.moveState(ctx, def.Namespace, plural, version); err != nil || state != moveHandover {
		return false, err
	}
	current := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: r.compositorNamespace(), Name: controller.Name(def.Namespace, plural, version)}
	switch err := r.Client.Get(ctx, key, current); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return !serves(current), nil
}

// legacyController is the controller Deployment a version had in the definition's
// namespace before identities moved to Compositor's, or nil.
func (r *Reconciler) legacyController(ctx context.Context, namespace, plural, version string) (*appsv1.Deployment, error) {
	legacy := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: namespace, Name: rbac.LegacyServiceAccountName(plural, version)}
	switch err := r.Client.Get(ctx, key, legacy); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	for k, v := range rbac.IdentityLabels(namespace, plural, version) {
		if legacy.Labels[k] != v {
			return nil, nil // not Compositor's
		}
	}
	return legacy, nil
}

// serves tells whether a controller Deployment runs: its current generation is
// observed and Available, with a replica available.
func serves(d *appsv1.Deployment) bool {
	if d.Status.ObservedGeneration < d.Generation || d.Status.AvailableReplicas < 1 {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// removeLegacyIdentity removes what a version's controller had in the definition's
// namespace before identities moved to Compositor's (removeLegacyObjects) and records
// the move done, once the version's bindings are applied for the new ServiceAccount.
// A version the record does not name has nothing to remove: nothing makes such
// objects again.
func (r *Reconciler) removeLegacyIdentity(ctx context.Context, def *corev1alpha1.CompositionDefinition, plural, version string) error {
	if state, err := r.moveState(ctx, def.Namespace, plural, version); err != nil || state == "" {
		return err
	}
	if err := r.removeLegacyObjects(ctx, def.Namespace, plural, version); err != nil {
		return err
	}
	return r.endMove(ctx, def.Namespace, plural, version)
}

// definitionsOfController maps a controller Deployment in Compositor's namespace,
// which no owner reference can tie to its definition in another, to that definition,
// by its identity labels: its status tells when a move of identities may end.
func (r *Reconciler) definitionsOfController(ctx context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	ns, name := l[vocab.LabelDefinitionNamespace], l[vocab.LabelDefinitionName]
	if l[vocab.LabelManagedBy] != vocab.ManagedBy || ns == "" || name == "" || obj.GetNamespace() != r.compositorNamespace() {
		return nil
	}
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, d := range list.Items {
		if rbac.LabelValue(d.Name) == name {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&d)})
		}
	}
	return out
}

// versionRBAC generates the RBAC of the controller of api's version: what the chart's
// kinds need, reading and deleting what the other chart versions of the kind create
// (removedTypes), its credentials, and, for a controller Deployment, the kept archive of
// digest and the release seal in Compositor's namespace.
//
// def is the definition as a whole, never a view of ownership.At: its status names
// every chart it serves, which removedTypes reads. ch and digest are the chart of api's
// version, the current one or one it retains.
func (r *Reconciler) versionRBAC(ctx context.Context, def *corev1alpha1.CompositionDefinition, ch *chart.Chart, digest string, api *generatedAPI) (rbac.Options, *rbac.Objects, error) {
	types, err := r.chartTypes(ch, digest)
	switch {
	case errors.Is(err, rbac.ErrForbiddenKind):
		return rbac.Options{}, nil, &condition.Error{Reason: ReasonForbiddenKinds, Terminal: true, Err: err}
	case errors.Is(err, rbac.ErrUnknownKind):
		// The kinds may come with a CRD installed later: try again.
		return rbac.Options{}, nil, &condition.Error{Reason: ReasonUnknownKinds, Err: err}
	case err != nil:
		return rbac.Options{}, nil, err
	}
	opts := rbac.Options{
		Namespace:      def.Namespace,
		DefinitionName: def.Name,
		Plural:         api.Plural,
		Version:        api.Version,
		Group:          vocab.CompositionGroup,
		Types:          types,
		RemovedTypes:   r.removedTypes(ctx, def, api, digest),
	}
	if c := def.Spec.Chart.Credentials; c != nil {
		// The controller fetches the chart too; charts.Source.Fetch has refused a Secret of
		// another namespace already.
		opts.CredentialsSecret = c.PasswordRef.Name
	}
	opts.IdentityNamespace = r.compositorNamespace()
	inProcess := r.Kinds != nil && r.Kinds.InProcess
	// A Deployment's informer lists its compositions in the namespaces where it is
	// bound, which it reads from the list the binder keeps; in process, Compositor's
	// informers do.
	opts.WatchCompositions = !inProcess
	if opts.FormerServiceAccount, err = r.formerIdentity(ctx, def, api.Plural, api.Version); err != nil {
		return rbac.Options{}, nil, err
	}
	if ns := r.compositorNamespace(); ns != "" && !inProcess {
		// In-process controllers read the archives with Compositor's own client, and
		// have the seal from Compositor.
		opts.ChartArchiveNamespace, opts.ChartDigest = ns, digest
		opts.ReleaseSealNamespace = ns
		if opts.SealKeySecrets, err = r.sealKeySecrets(ctx, def, api); err != nil {
			return rbac.Options{}, nil, err
		}
	}
	objs, err := rbac.Generate(opts)
	if err != nil {
		return rbac.Options{}, nil, &condition.Error{Reason: ReasonApplyFailed, Terminal: true, Err: err}
	}
	return opts, objs, nil
}

// applyVersionRBAC applies objs and deletes the Roles of api's version they no longer
// have. Failing to grant the kept archive is archiveErr, not err.
func (r *Reconciler) applyVersionRBAC(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, objs *rbac.Objects) (archiveErr, err error) {
	// The Roles in Compositor's namespace and their bindings are applied below, with
	// their owner.
	inCompositorNamespace := []client.Object{objs.ChartArchiveRole, objs.ChartArchiveBinding, objs.ReleaseSealRole, objs.ReleaseSealBinding}
	for _, obj := range objs.List() {
		if slices.Contains(inCompositorNamespace, obj) {
			continue
		}
		if err := ssa.Apply(ctx, r.Client, obj); err != nil {
			return nil, err
		}
	}
	if objs.CredentialsRole == nil {
		if err := r.deleteCredentialsRole(ctx, def.Namespace, api.Plural, api.Version); err != nil {
			return nil, err
		}
	}
	// Like the archives and the seal, the Roles and bindings in Compositor's namespace
	// are owned by its ServiceAccount and go with the installation.
	var owner *metav1.OwnerReference
	if objs.ChartArchiveRole != nil || objs.ReleaseSealRole != nil {
		owner = r.Charts.Store.OwnerReference(ctx)
	}
	if objs.ReleaseSealRole == nil {
		if err := r.deleteReleaseSealRole(ctx, def.Namespace, api.Plural, api.Version); err != nil {
			return nil, err
		}
	} else {
		for _, obj := range []client.Object{objs.ReleaseSealRole, objs.ReleaseSealBinding} {
			if err := applyOwned(ctx, r.Client, obj, owner); err != nil {
				return nil, fmt.Errorf("granting the controller of %s %s the release seal (Secret %s/%s): %w",
					api.Kind, api.Version, obj.GetNamespace(), rbac.ReleaseSealSecret, err)
			}
		}
	}
	if objs.ChartArchiveRole == nil {
		return nil, r.deleteChartArchiveRole(ctx, def.Namespace, api.Plural, api.Version)
	}
	// A new chart digest moves the Role's resourceNames to the new archive.
	for _, obj := range []client.Object{objs.ChartArchiveRole, objs.ChartArchiveBinding} {
		if archiveErr = applyOwned(ctx, r.Client, obj, owner); archiveErr != nil {
			ctrl.LoggerFrom(ctx).Error(archiveErr, "Granting the controller its kept chart archive", "namespace", obj.GetNamespace(), "name", obj.GetName())
			return archiveErr, nil
		}
	}
	return nil, nil
}

// applyOwned applies obj, owned by owner when there is one.
func applyOwned(ctx context.Context, c client.Client, obj client.Object, owner *metav1.OwnerReference) error {
	if owner != nil {
		obj.SetOwnerReferences([]metav1.OwnerReference{*owner})
	}
	return ssa.Apply(ctx, c, obj)
}

// noteArchiveNotReadable adds to the Synced condition that the version's controller
// may not read its kept chart archive: it needs the chart source after a restart.
func noteArchiveNotReadable(def *corev1alpha1.CompositionDefinition, api *generatedAPI, err error) {
	if err == nil {
		return
	}
	c := meta.FindStatusCondition(def.Status.Conditions, corev1alpha1.ConditionSynced)
	if c == nil || c.Status != "True" {
		return
	}
	c.Message += fmt.Sprintf("; the controller of %s %s is not granted its chart archive kept in the cluster (%v), so while its chart source is down a restarted controller cannot install", api.Kind, api.Version, err)
}

// compositorNamespace is Compositor's namespace, where chart archives are kept in the
// cluster, and Secret rbac.ReleaseSealSecret with the key that seals Helm's release
// records; empty when archives are not kept. What Compositor keeps there is owned by
// its ServiceAccount, which the chart Store knows.
func (r *Reconciler) compositorNamespace() string {
	if r.Charts == nil || r.Charts.Store == nil {
		return ""
	}
	return r.Charts.Store.Namespace
}

// deleteWorkloads removes the controller and RBAC of one version of the definition.
func (r *Reconciler) deleteWorkloads(ctx context.Context, def *corev1alpha1.CompositionDefinition, plural, version string) error {
	if r.Kinds != nil {
		if err := r.stopVersion(ctx, def.Namespace, plural, version); err != nil {
			return fmt.Errorf("removing the controller of %s %s: %w", plural, version, err)
		}
	}
	labels := client.MatchingLabels(rbac.IdentityLabels(def.Namespace, plural, version))
	// The controller and its ServiceAccount are in Compositor's namespace, where no
	// owner reference to the definition can take them; those of an installation from
	// before the move are in the definition's.
	identityNamespaces := []string{def.Namespace}
	deployments := []client.ObjectKey{{Namespace: def.Namespace, Name: rbac.LegacyServiceAccountName(plural, version)}}
	if ns := r.compositorNamespace(); ns != "" {
		if ns != def.Namespace {
			identityNamespaces = append(identityNamespaces, ns)
		}
		deployments = append(deployments, client.ObjectKey{Namespace: ns, Name: controller.Name(def.Namespace, plural, version)})
	}
	var errs []error
	var dels []func() error
	for _, key := range deployments {
		dels = append(dels, func() error { return r.deleteController(ctx, key, def.Namespace, plural, version) })
	}
	// The controller's list of where it is bound goes before the bindings it lists, as
	// the binder unlists a namespace before it unbinds it.
	dels = append(dels, func() error { return r.deleteBoundNamespaces(ctx, def.Namespace, plural, version) })
	for _, ns := range identityNamespaces {
		dels = append(dels, func() error {
			return r.Client.DeleteAllOf(ctx, &corev1.ServiceAccount{}, client.InNamespace(ns), labels)
		})
	}
	for _, del := range append(dels, []func() error{
		func() error { return r.Client.DeleteAllOf(ctx, &rbacv1.ClusterRoleBinding{}, labels) },
		func() error { return r.Client.DeleteAllOf(ctx, &rbacv1.ClusterRole{}, labels) },
		func() error {
			return r.Client.DeleteAllOf(ctx, &rbacv1.Role{}, client.InNamespace(def.Namespace), labels)
		},
		// The chart archive and release seal Roles are in Compositor's namespace (no
		// owner reference across namespaces); their RoleBindings go with
		// deleteRoleBindings too.
		func() error { return r.deleteChartArchiveRole(ctx, def.Namespace, plural, version) },
		func() error { return r.deleteReleaseSealRole(ctx, def.Namespace, plural, version) },
		func() error { return r.deleteRoleBindings(ctx, labels) },
	}...) {
		if err := client.IgnoreNotFound(del()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the controller of %s %s: %w", plural, version, err)
	}
	// What the version had before identities moved went too.
	return r.endMove(ctx, def.Namespace, plural, version)
}

// deleteController deletes the controller Deployment of key if it carries the identity
// labels of the version: Compositor's namespace holds others' Deployments.
func (r *Reconciler) deleteController(ctx context.Context, key client.ObjectKey, namespace, plural, version string) error {
	d := &appsv1.Deployment{}
	if err := r.Client.Get(ctx, key, d); err != nil {
		return err
	}
	for k, v := range rbac.IdentityLabels(namespace, plural, version) {
		if d.Labels[k] != v {
			return nil
		}
	}
	return r.Client.Delete(ctx, d, client.Preconditions{UID: &d.UID})
}

// deleteBoundNamespaces deletes the ConfigMap, in Compositor's namespace, that lists
// where the version's release role is bound (rbac.Objects.BoundNamespaces), which the
// binder (package binding) keeps for the controller Deployment, if it carries the
// identity labels of the version: Compositor's namespace holds others' ConfigMaps.
// Nothing else would remove it: the binder stops with the version, before the
// bindings go, and leaves it behind, listing them or empty.
func (r *Reconciler) deleteBoundNamespaces(ctx context.Context, namespace, plural, version string) error {
	ns := r.compositorNamespace()
	if ns == "" {
		return nil
	}
	cm := &corev1.ConfigMap{}
	// From the API server: through the manager's cache, the Get would start an informer
	// of every ConfigMap in the cluster.
	key := client.ObjectKey{Namespace: ns, Name: rbac.NamesFor(namespace, plural, version).BoundNamespaces}
	if err := r.liveReader().Get(ctx, key, cm); err != nil {
		return err
	}
	for k, v := range rbac.IdentityLabels(namespace, plural, version) {
		if cm.Labels[k] != v {
			return nil
		}
	}
	return r.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID})
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

// deleteChartArchiveRole removes the Role and RoleBinding, in Compositor's namespace,
// that let a version's controller read its kept chart archive.
func (r *Reconciler) deleteChartArchiveRole(ctx context.Context, namespace, plural, version string) error {
	return r.deleteInCompositorNamespace(ctx, rbac.NamesFor(namespace, plural, version).ChartArchive,
		"the chart archive Role of "+plural+" "+version)
}

// deleteReleaseSealRole removes the Role and RoleBinding, in Compositor's namespace,
// that let a version's controller read the release seal.
func (r *Reconciler) deleteReleaseSealRole(ctx context.Context, namespace, plural, version string) error {
	return r.deleteInCompositorNamespace(ctx, rbac.NamesFor(namespace, plural, version).ReleaseSeal,
		"the release seal Role of "+plural+" "+version)
}

// deleteInCompositorNamespace removes the RoleBinding and the Role named name in
// Compositor's namespace; what names them for the error.
func (r *Reconciler) deleteInCompositorNamespace(ctx context.Context, name, what string) error {
	ns := r.compositorNamespace()
	if ns == "" {
		return nil
	}
	var errs []error
	for _, obj := range []client.Object{&rbacv1.RoleBinding{}, &rbacv1.Role{}} {
		obj.SetNamespace(ns)
		obj.SetName(name)
		errs = append(errs, client.IgnoreNotFound(r.Client.Delete(ctx, obj)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing %s: %w", what, err)
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

// applyRetainedRBAC applies the RBAC of a version def retains (status.retained), from
// that version's own chart, as applyWorkloads does for the version def serves: its
// controller (the Deployment, or the in-process one) is left alone, only the RBAC
// objects are applied. A retained version's RBAC is generated when it is the current
// version, and the chart versions the kind gets after it create types it may not
// delete; a composition moved back to it (a rollout rolled back) is upgraded back to
// its chart, and Helm deletes what the newer revision had only if this version's
// controller can read it. So removedTypes includes the current version's types.
// Nothing changed costs little: the charts' types are kept by digest, and applying
// the same objects again changes nothing. api is the version def serves now, whose
// kind and plural the retained version shares.
func (r *Reconciler) applyRetainedRBAC(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, retained corev1alpha1.ServedChart) error {
	gv, err := schema.ParseGroupVersion(retained.APIVersion)
	if err != nil || gv.Group != vocab.CompositionGroup || gv.Version == "" {
		return fmt.Errorf("retained version %q: not a version of group %s", retained.APIVersion, vocab.CompositionGroup)
	}
	if gv.Version == api.Version {
		return nil // the version def serves: applyWorkloads applies its RBAC
	}
	view := ownership.At(def, gv.WithKind(api.Kind))
	if view == nil || view.Status.Digest != retained.Digest {
		return fmt.Errorf("the definition does not retain %s of chart digest %s", retained.APIVersion, retained.Digest)
	}
	ch, _, err := r.Charts.Chart(ctx, view)
	if err != nil {
		return fmt.Errorf("reading chart %s of the retained version %s: %w", retained.Chart, gv.Version, err)
	}
	version := &generatedAPI{ChartName: api.ChartName, ChartVersion: retained.Chart, Kind: api.Kind, Plural: api.Plural, Version: gv.Version}
	opts, objs, err := r.versionRBAC(ctx, def, ch, retained.Digest, version)
	if err != nil {
		return fmt.Errorf("generating the RBAC of the retained version %s: %w", gv.Version, err)
	}
	// A kept archive the controller may not read is logged by applyVersionRBAC: the
	// controller fetches from the chart source meanwhile.
	if _, err := r.applyVersionRBAC(ctx, def, version, objs); err != nil {
		return fmt.Errorf("applying the RBAC of the retained version %s: %w", gv.Version, err)
	}
	if r.Kinds != nil {
		r.Kinds.SetFormerIdentity(def.Namespace, version.Plural, version.Version, opts.FormerServiceAccount)
		if r.Kinds.InProcess {
			return r.removeLegacyIdentity(ctx, def, version.Plural, version.Version)
		}
	}
	// A retained version's controller from before identities moved to Compositor's
	// namespace moves like the current one's, as the record of moves says.
	if state, err := r.moveState(ctx, def.Namespace, version.Plural, version.Version); err != nil || state == "" {
		return err
	}
	if err := r.applyController(ctx, def, version, opts, objs); err != nil {
		return fmt.Errorf("moving the controller of the retained version %s to Compositor's namespace: %w", gv.Version, err)
	}
	return nil
}

// chartTypes are the resource types ch, of digest, creates, kept by digest: a digest
// names the chart's content, whose types change only with the kinds the API server
// serves, and a kind it does not serve fails rbac.ResourceTypes, whose errors are not
// kept.
func (r *Reconciler) chartTypes(ch *chart.Chart, digest string) ([]rbac.ResourceType, error) {
	r.cachesOnce.Do(r.initCaches)
	if digest != "" {
		if types, ok := r.typesOf.Get(digest); ok {
			return types.([]rbac.ResourceType), nil
		}
	}
	types, err := rbac.ResourceTypes(ch, r.Mapper)
	if err != nil {
		return nil, err
	}
	if digest != "" {
		r.typesOf.Add(digest, types)
	}
	return types, nil
}

// removedTypes are the types the other chart versions of api's kind create: every
// chart a definition of the kind serves, the version its status serves and those it
// retains (status.retained), def's own included (def as a whole, not a view: its
// status names its previous chart until the new version is published, the current
// one after), except the chart of digest, api's own. A composition moved from one of
// them to this version is upgraded to this chart, and Helm deletes what the old
// revision had only if this version's controller can read it. A chart that cannot be
// had now is skipped: the controller then reports what it could not delete (condition
// Pruned).
func (r *Reconciler) removedTypes(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, digest string) []rbac.ResourceType {
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the definitions of the kind, for the types its other versions create")
		return nil
	}
	// def as this reconciliation has it, before the cache sees its status.
	defs := slices.DeleteFunc(list.Items, func(d corev1alpha1.CompositionDefinition) bool { return d.UID == def.UID })
	defs = append(defs, *def)
	seen := map[string]bool{digest: true}
	var out []rbac.ResourceType
	for i := range defs {
		other := &defs[i]
		if other.Status.Kind != api.Kind {
			continue
		}
		for _, served := range servedCharts(other) {
			if served.Digest == "" || seen[served.Digest] {
				continue
			}
			seen[served.Digest] = true
			gv, err := schema.ParseGroupVersion(served.APIVersion)
			if err != nil {
				continue
			}
			view := ownership.At(other, gv.WithKind(api.Kind))
			if view == nil {
				continue
			}
			types, err := r.typesOfServed(ctx, view)
			if err != nil {
				ctrl.LoggerFrom(ctx).Info("The chart of another version of the kind is not available: its controller may not delete what that chart created",
					"definition", other.Namespace+"/"+other.Name, "version", served.APIVersion, "reason", err.Error())
				continue
			}
			out = append(out, types...)
		}
	}
	return out
}

// servedCharts are the charts def's status serves: the version its status names and
// those it retains.
func servedCharts(def *corev1alpha1.CompositionDefinition) []corev1alpha1.ServedChart {
	out := []corev1alpha1.ServedChart{{APIVersion: def.Status.APIVersion, Digest: def.Status.Digest, PackageURL: def.Status.PackageURL}}
	return append(out, def.Status.Retained...)
}

// typesOfServed are the types the chart of view (a definition as ownership.At gives it
// for one of its versions) creates, kept by its digest.
func (r *Reconciler) typesOfServed(ctx context.Context, view *corev1alpha1.CompositionDefinition) ([]rbac.ResourceType, error) {
	r.cachesOnce.Do(r.initCaches)
	if types, ok := r.typesOf.Get(view.Status.Digest); ok {
		return types.([]rbac.ResourceType), nil
	}
	ch, _, err := r.Charts.Chart(ctx, view)
	if err != nil {
		return nil, err
	}
	return r.chartTypes(ch, view.Status.Digest)
}
