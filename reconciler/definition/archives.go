package definition

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/internal/condition"
)

// noteNotKept adds to the Synced condition that the fetched archive could not be kept
// in the cluster (Source.Keep, called before the status records the digest, so that
// admission and the controllers of any replica find it without the chart source).
// Failing to keep it costs nothing until the chart source is down.
func noteNotKept(def *corev1alpha1.CompositionDefinition, fetched *chartfetch.Result, err error) {
	if err == nil {
		return
	}
	c := meta.FindStatusCondition(def.Status.Conditions, corev1alpha1.ConditionSynced)
	if c == nil || c.Status != "True" {
		return
	}
	c.Message += fmt.Sprintf("; the chart archive %s is not kept in the cluster (%v), so while its chart source is down a restarted Compositor cannot judge compositions", fetched.Digest, err)
}

// pruneCharts deletes the archives kept in the cluster that no definition records;
// def's digest counts even before the cache has seen its status.
func (r *Reconciler) pruneCharts(ctx context.Context, def *corev1alpha1.CompositionDefinition) error {
	if r.Charts.Store == nil {
		return nil
	}
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	recorded := map[string]bool{}
	for _, d := range append(list.Items, *def) {
		recorded[d.Status.Digest] = true
		for _, r := range d.Status.Retained {
			// A deprecated version runs no composition: nothing reads its chart.
			recorded[r.Digest] = recorded[r.Digest] || !r.Deprecated()
		}
	}
	return r.Charts.Store.Prune(ctx, func(digest string) bool { return recorded[digest] })
}

// keptChart goes on, when the chart source of a definition that already serves its
// spec's chart version (as its status's version, or one it retains) fails, with the
// chart kept in the cluster: the generated API, its controllers and admission keep
// working, and the returned error, for the conditions, says that only a new chart
// version waits for the source. Without a kept chart it returns err alone.
func (r *Reconciler) keptChart(ctx context.Context, def *corev1alpha1.CompositionDefinition, err error) (*chartfetch.Result, error) {
	var ce *condition.Error
	if !errors.As(err, &ce) || ce.Reason != chartstore.ReasonChartFetchFailed {
		return nil, err
	}
	kept, keptErr := r.Charts.Kept(ctx, def)
	if keptErr != nil {
		return nil, err
	}
	// The spec may name a version the definition retains (moved back to it): that
	// version's chart is the one kept.
	apiVersion := def.Status.APIVersion
	for _, r := range def.Status.Retained {
		if r.Digest == kept.Digest && kept.Digest != def.Status.Digest {
			apiVersion = r.APIVersion
		}
	}
	return kept, &condition.Error{Reason: ce.Reason, Err: fmt.Errorf(
		"the chart source is unreachable, so a new chart version waits for it: %w; %s %s goes on being served and judged from the chart kept in the cluster (%s)",
		ce.Err, def.Status.Kind, apiVersion, kept.Digest)}
}
