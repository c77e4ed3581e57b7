package definition

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/ownership"
)

// waitForCompositions is how often a definition being deleted looks again for the
// compositions that hold it.
const waitForCompositions = 30 * time.Second

// finalize removes what the definition generated once no composition of its version is
// left, then lets the definition go.
func (r *Reconciler) finalize(ctx context.Context, def *corev1alpha1.CompositionDefinition) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(def, vocab.DefinitionFinalizer) {
		return ctrl.Result{}, nil
	}
	versions := []string{previousVersion(def)}
	for _, ret := range def.Status.Retained {
		if gv, err := schema.ParseGroupVersion(ret.APIVersion); err == nil {
			versions = append(versions, gv.Version)
		}
	}
	for _, version := range versions {
		if version == "" {
			continue
		}
		done, err := r.releaseVersion(ctx, def, version)
		if err != nil || !done {
			return ctrl.Result{RequeueAfter: waitForCompositions}, err
		}
	}
	if err := r.plans().Forget(ctx, def); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.forgetRollout(ctx, def); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.deleteSealKey(ctx, def); err != nil {
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(def, vocab.DefinitionFinalizer)
	return ctrl.Result{}, r.Client.Update(ctx, def)
}

// releaseVersion gives up the definition's served version: it reports false while
// compositions of that version exist and no other definition serves it.
func (r *Reconciler) releaseVersion(ctx context.Context, def *corev1alpha1.CompositionDefinition, version string) (bool, error) {
	api := &generatedAPI{Kind: def.Status.Kind, Plural: def.Status.Resource, Version: version}
	current := &apiextensionsv1.CustomResourceDefinition{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: api.CRDName()}, current); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		return true, r.deleteWorkloads(ctx, def, api.Plural, version)
	}
	another, err := r.servedByAnother(ctx, def, version)
	if err != nil {
		return false, err
	}
	if another {
		// Another definition serves the version (the webhook let this one be deleted
		// for that reason): its controller takes the compositions over, and the
		// version stays.
		return true, r.deleteWorkloads(ctx, def, api.Plural, version)
	}
	items, err := r.compositions(ctx, api, version, version)
	if err != nil {
		return false, err
	}
	if n := len(items); n > 0 {
		failed(def, ReasonDeleting, fmt.Sprintf("waiting for %d %s of version %s to be deleted: kubectl delete %s.%s.%s --all -A",
			n, api.Kind, version, api.Plural, version, "composition.krateo.io"))
		return false, nil
	}
	if err := r.deleteWorkloads(ctx, def, api.Plural, version); err != nil {
		return false, err
	}
	claimed, err := r.claimedVersions(ctx, api.Kind, def)
	if err != nil {
		return false, err
	}
	return true, r.removeUnusedVersions(ctx, current, api.Kind, claimed)
}

// servedByAnother reports whether a definition other than def, not being deleted,
// serves version of def's kind.
func (r *Reconciler) servedByAnother(ctx context.Context, def *corev1alpha1.CompositionDefinition, version string) (bool, error) {
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, list); err != nil {
		return false, err
	}
	return ownership.ServedByAnother(list.Items, def, schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: version, Kind: def.Status.Kind}), nil
}
