package definition

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/reconciler/internal/ssa"
)

// applyCRD serves the definition's version in the CRD of its kind, which every
// definition of that chart shares. It keeps the other served versions that a
// definition still claims or retains, or that compositions still use.
//
// The version the definition served before stays until its compositions have moved
// (rollout.go): converting them to the new version needs its schema and what it
// declares.
func (r *Reconciler) applyCRD(ctx context.Context, api *generatedAPI, previous string) (claimed map[string]bool, err error) {
	existing := &apiextensionsv1.CustomResourceDefinition{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: api.CRDName()}, existing); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		existing = nil
	}
	if claimed, err = r.claimedVersions(ctx, api.Kind, nil); err != nil {
		return nil, err
	}
	claimed[api.Version] = true
	deprecated, err := r.deprecatedVersions(ctx, api.Kind)
	if err != nil {
		return nil, err
	}
	delete(deprecated, api.Version)
	return claimed, r.writeCRD(ctx, api, existing, func(version string) bool { return claimed[version] || version == previous }, deprecated)
}

// deprecatedVersions are the served versions of kind that definitions keep only for
// the clients that still speak them (retained with a RemoveAfter), and that no
// definition claims otherwise, each with the warning the API server gives their
// clients: which version to use instead, and when the deprecated one goes.
func (r *Reconciler) deprecatedVersions(ctx context.Context, kind string) (map[string]string, error) {
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	live := map[string]bool{}
	type until struct {
		at  time.Time
		use string
	}
	deprecated := map[string]until{}
	for i := range list.Items {
		d := &list.Items[i]
		if d.Status.Kind != kind {
			continue
		}
		if v, err := crd.VersionName(d.Spec.Chart.Version); err == nil && d.Spec.Chart.Version != "" {
			live[v] = true
		}
		if v := previousVersion(d); v != "" {
			live[v] = true
		}
		for _, ret := range d.Status.Retained {
			gv, err := schema.ParseGroupVersion(ret.APIVersion)
			if err != nil {
				continue
			}
			if !ret.Deprecated() {
				live[gv.Version] = true
				continue
			}
			if cur, ok := deprecated[gv.Version]; !ok || ret.RemoveAfter.After(cur.at) {
				deprecated[gv.Version] = until{at: ret.RemoveAfter.Time, use: d.Status.APIVersion}
			}
		}
	}
	out := map[string]string{}
	for version, u := range deprecated {
		if live[version] {
			continue
		}
		out[version] = fmt.Sprintf("%s/%s %s is deprecated and served only until %s: use %s",
			vocab.CompositionGroup, version, kind, u.at.UTC().Format(time.RFC3339), u.use)
	}
	return out, nil
}

// writeCRD builds the CRD with the definition's version plus the versions of existing
// that keep accepts, within the size budget as a whole, and applies it. The versions in
// deprecated are marked deprecated, with their warning; every other is not.
func (r *Reconciler) writeCRD(ctx context.Context, api *generatedAPI, existing *apiextensionsv1.CustomResourceDefinition, keep func(version string) bool, deprecated map[string]string) error {
	conversion := r.Conversion
	conversion.CABundle = r.Bundle.CABundle()
	generated, _, err := crd.Build(crd.BuildOptions{
		ChartName:  api.ChartName,
		Versions:   []crd.ServedVersion{{ChartVersion: api.ChartVersion, Spec: api.Spec, Conversions: api.Conversions}},
		Conversion: conversion,
	})
	if err != nil {
		return &condition.Error{Reason: ReasonInvalidSchema, Terminal: true, Err: fmt.Errorf("generating the CRD: %w", err)}
	}
	if existing != nil {
		// Not terminal: the versions of other definitions may be what does not fit,
		// and they may go.
		if _, err := crd.Merge(generated, existing.Spec.Versions, keep, 0); err != nil {
			return &condition.Error{Reason: ReasonInvalidSchema, Err: err}
		}
		crd.KeepDeclarations(generated, existing.Annotations)
	}
	for i := range generated.Spec.Versions {
		v := &generated.Spec.Versions[i]
		warning, ok := deprecated[v.Name]
		v.Deprecated, v.DeprecationWarning = ok && v.Served, nil
		if v.Deprecated {
			v.DeprecationWarning = &warning
		}
	}
	if err := r.checkConversions(generated, api); err != nil {
		return err
	}
	if generated.Labels == nil {
		generated.Labels = map[string]string{}
	}
	generated.Labels[vocab.LabelManaged] = "true"
	return ssa.Apply(ctx, r.Client, generated)
}

// claimedVersions are the served versions of kind that definitions other than except
// ask for: the version of their spec.chart.version, or the one their status reports.
func (r *Reconciler) claimedVersions(ctx context.Context, kind string, except *corev1alpha1.CompositionDefinition) (map[string]bool, error) {
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	claimed := map[string]bool{}
	for i := range list.Items {
		d := &list.Items[i]
		if d.Status.Kind != kind || (except != nil && d.UID == except.UID) {
			continue
		}
		if v, err := crd.VersionName(d.Spec.Chart.Version); err == nil && d.Spec.Chart.Version != "" {
			claimed[v] = true
		} else if v := previousVersion(d); v != "" {
			claimed[v] = true
		}
		for _, ret := range d.Status.Retained {
			if gv, err := schema.ParseGroupVersion(ret.APIVersion); err == nil {
				claimed[gv.Version] = true
			}
		}
	}
	return claimed, nil
}

// retains tells whether def retains version for the compositions still pinned to it.
func retains(def *corev1alpha1.CompositionDefinition, version string) bool {
	return slices.ContainsFunc(def.Status.Retained, func(r corev1alpha1.ServedChart) bool {
		return r.APIVersion == vocab.CompositionGroup+"/"+version
	})
}

// previousVersion is the served version the definition's status reports.
func previousVersion(def *corev1alpha1.CompositionDefinition) string {
	served, _ := ownership.Served(def)
	return served.Version
}

// compositions lists the metadata of the compositions of kind labelled with version,
// read through the served version via.
func (r *Reconciler) compositions(ctx context.Context, api *generatedAPI, via, version string) ([]metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: via, Kind: api.Kind + "List"})
	if err := r.Live.List(ctx, list, client.MatchingLabels{vocab.LabelCompositionVersion: version}); err != nil {
		return nil, fmt.Errorf("listing %s compositions of version %s: %w", api.Kind, version, err)
	}
	return list.Items, nil
}

// pruneVersions removes from the CRD of api every served version that no definition
// claims and no composition is labelled with. claimed were read before this
// reconciliation changed def: the versions def retains now count too, so that one it
// began to keep for its clients (deprecated) in this very reconciliation stays.
func (r *Reconciler) pruneVersions(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, claimed map[string]bool) error {
	current := &apiextensionsv1.CustomResourceDefinition{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: api.CRDName()}, current); err != nil {
		return client.IgnoreNotFound(err)
	}
	claimed = maps.Clone(claimed)
	for _, ret := range def.Status.Retained {
		if gv, err := schema.ParseGroupVersion(ret.APIVersion); err == nil {
			claimed[gv.Version] = true
		}
	}
	return r.removeUnusedVersions(ctx, current, api.Kind, claimed)
}

// removeUnusedVersions drops the served versions of current that are not claimed and
// hold no composition, and deletes the CRD when no served version is left.
func (r *Reconciler) removeUnusedVersions(ctx context.Context, current *apiextensionsv1.CustomResourceDefinition, kind string, claimed map[string]bool) error {
	api := &generatedAPI{Kind: kind}
	var kept []apiextensionsv1.CustomResourceDefinitionVersion
	served := 0
	for _, v := range current.Spec.Versions {
		if v.Name == crd.HubVersion || claimed[v.Name] {
			kept = append(kept, v)
			served += btoi(v.Served)
			continue
		}
		items, err := r.compositions(ctx, api, v.Name, v.Name)
		if err != nil {
			return err
		}
		if len(items) > 0 {
			kept = append(kept, v)
			served += btoi(v.Served)
		}
	}
	if len(kept) == len(current.Spec.Versions) {
		return nil
	}
	if served == 0 {
		if err := r.Client.Delete(ctx, current, client.Preconditions{ResourceVersion: &current.ResourceVersion}); err != nil {
			return client.IgnoreNotFound(err)
		}
		return nil
	}
	current.Spec.Versions = kept
	return r.Client.Update(ctx, current)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkConversions checks the conversions api declares against the other versions
// served with it (conversion.Schemas.CheckDeclared) before the CRD is applied, and
// records what acknowledged rules lose. The check converts hundreds of values, and
// every reconciliation asks: its result is kept for the same versions, schemas and
// declarations.
func (r *Reconciler) checkConversions(generated *apiextensionsv1.CustomResourceDefinition, api *generatedAPI) error {
	if len(api.Conversions) == 0 {
		api.ConversionLosses = []corev1alpha1.ConversionLoss{} // none declared: none lost
		return nil
	}
	key, err := conversionCheckKey(generated, api.Version)
	if err != nil {
		return err
	}
	r.cachesOnce.Do(r.initCaches)
	if done, ok := r.checked.Get(key); ok {
		res := done.(conversionCheck)
		api.ConversionLosses = res.losses
		return res.err
	}
	res := conversionCheck{}
	schemas, err := conversion.SchemasFromCRD(generated)
	if err != nil {
		res.err = &condition.Error{Reason: ReasonInvalidConversions, Terminal: true, Err: err}
	} else if res.losses, err = schemas.CheckDeclared(api.Version); err != nil {
		// Not terminal: another definition's version may be what the rule does not fit,
		// and it may go.
		res.err = &condition.Error{Reason: ReasonInvalidConversions, Err: err}
	}
	r.checked.Add(key, res)
	api.ConversionLosses = res.losses
	return res.err
}

// checkedConversions bounds the results of conversion checks kept, and the resource
// types of other definitions' charts (removedTypes).
const checkedConversions = 1024

func (r *Reconciler) initCaches() {
	r.checked, r.typesOf = lru.New(checkedConversions), lru.New(checkedConversions)
}

type conversionCheck struct {
	losses []corev1alpha1.ConversionLoss
	err    error
}

// conversionCheckKey names what a conversion check of version depends on: the CRD's
// served versions (their names and schemas) and its conversion declarations.
func conversionCheckKey(generated *apiextensionsv1.CustomResourceDefinition, version string) (string, error) {
	declarations := map[string]string{}
	for k, v := range generated.Annotations {
		if strings.HasPrefix(k, vocab.AnnotationPrefixConversions) {
			declarations[k] = v
		}
	}
	text, err := json.Marshal(struct {
		Version      string
		Versions     []apiextensionsv1.CustomResourceDefinitionVersion
		Declarations map[string]string
	}{version, generated.Spec.Versions, declarations})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(text)
	return hex.EncodeToString(sum[:]), nil
}
