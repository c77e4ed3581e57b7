package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api"
	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/plan"
	"github.com/compositor-dev/compositor/reconciler/definition"
)

// kubeconfigFor is the REST config and namespace of kubeconfig ("" follows $KUBECONFIG
// and ~/.kube/config, as kubectl does).
func kubeconfigFor(kubeconfig string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading kubeconfig: %w", err)
	}
	namespace, _, err := loader.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("loading kubeconfig: %w", err)
	}
	return cfg, namespace, nil
}

// clusterClient is a client of the cluster kubeconfig names (see kubeconfigFor), with
// Compositor's types, and the kubeconfig's namespace.
func clusterClient(kubeconfig string) (client.Client, string, error) {
	cfg, namespace, err := kubeconfigFor(kubeconfig)
	if err != nil {
		return nil, "", err
	}
	scheme, err := api.NewScheme()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("connecting to the cluster: %w", err)
	}
	return c, namespace, nil
}

// RunPlanDefinition prints the plan the rollout of definition namespace/name follows
// ("" is the kubeconfig's namespace), the one its status names by hash: whole, from
// Compositor's namespace (opts.CompositorNamespace), verified against that hash, to
// whoever may read it (the platform); else the view of the definition's namespace,
// which lists only that namespace's compositions, verified against the digest the
// status records of it; else an error that names both ConfigMaps. What is shown when
// it is a view, and why, goes before the text, or to errOut for json and yaml.
func RunPlanDefinition(ctx context.Context, out, errOut io.Writer, opts *PlanOptions, namespace, name string) error {
	c, current, err := clusterClient(opts.Kubeconfig)
	if err != nil {
		return err
	}
	if namespace == "" {
		namespace = current
	}
	def := &corev1alpha1.CompositionDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, def); err != nil {
		return fmt.Errorf("reading CompositionDefinition %s/%s: %w", namespace, name, err)
	}
	ro := def.Status.Rollout
	if ro == nil || ro.Plan.Hash == "" {
		return fmt.Errorf("CompositionDefinition %s/%s has no plan: no chart version change has moved its compositions yet", namespace, name)
	}
	p, notice, err := readKeptPlan(ctx, c, cmp.Or(opts.CompositorNamespace, defaultCompositorNamespace), def)
	if err != nil {
		return err
	}
	header := fmt.Sprintf("Rollout %s → %s: %s", ro.FromVersion, ro.ToVersion, ro.Phase)
	if ro.Message != "" {
		header += ": " + ro.Message
	}
	header += "\n"
	progress, recordNotice := rolloutProgress(ctx, c, cmp.Or(opts.CompositorNamespace, defaultCompositorNamespace), def)
	for _, n := range []string{recordNotice, notice} {
		if n == "" {
			continue
		}
		if opts.Output == "json" || opts.Output == "yaml" {
			if errOut != nil {
				fmt.Fprintln(errOut, n)
			}
		} else {
			header += n + "\n"
		}
	}
	return writePlan(out, p, opts.Output, header+progress)
}

// rolloutProgress is the text of which compositions def's rollout moved, failed, left
// and has still to move: of every namespace, from the rollout's record in Compositor's
// namespace, to whoever may read it (the platform); else of def's namespace only, from
// def's status, with a notice that says so and why. Nothing before the rollout moves.
func rolloutProgress(ctx context.Context, c client.Client, compositorNamespace string, def *corev1alpha1.CompositionDefinition) (string, string) {
	ro := def.Status.Rollout
	var lists definition.RolloutRecord
	lists.Pending, lists.Moved, lists.Failed, lists.Stayed = ro.Pending, ro.Moved, ro.Failed, ro.Stayed
	counts := fmt.Sprintf("%d moved (%d Ready), %d to move, %d failed, %d stayed on %s", ro.MovedCount, ro.Ready, ro.PendingCount, ro.FailedCount, ro.StayedCount, ro.From)
	key := client.ObjectKey{Namespace: compositorNamespace, Name: definition.RolloutRecordName(def.UID)}
	if namespace, name, ok := strings.Cut(ro.Record, "/"); ok {
		key = client.ObjectKey{Namespace: namespace, Name: name} // the status is Compositor's
	}
	var why string
	cm := &corev1.ConfigMap{}
	switch err := c.Get(ctx, key, cm); {
	case ro.Record == "" && !hasEntries(&lists):
		return "", "" // nothing moved yet, or the status of an earlier Compositor, which lists every namespace
	case ro.Record == "":
		return formatProgress(&lists, ""), ""
	case apierrors.IsForbidden(err):
		why = fmt.Sprintf("you may not read the rollout's record, ConfigMap %s (the platform's)", key)
	case apierrors.IsNotFound(err):
		why = fmt.Sprintf("the rollout's record is not in ConfigMap %s", key)
	case err != nil:
		why = fmt.Sprintf("the rollout's record, ConfigMap %s, could not be read: %v", key, err)
	default:
		rec, err := definition.DecodeRolloutRecord(cm)
		switch {
		case err != nil:
			why = err.Error()
		case !rec.Follows(ro):
			why = fmt.Sprintf("the rollout's record, ConfigMap %s, records another rollout (it is being rewritten: try again)", key)
		default:
			return fmt.Sprintf("Every namespace's compositions, from the rollout's record, ConfigMap %s: %s\n", key, counts) + formatProgress(rec, ""), ""
		}
	}
	return formatProgress(&lists, def.Namespace),
		fmt.Sprintf("Rollout of namespace %s only, from the definition's status (%s in every namespace); %s.", def.Namespace, counts, why)
}

func hasEntries(rec *definition.RolloutRecord) bool {
	return len(rec.Pending)+len(rec.Moved)+len(rec.Failed)+len(rec.Stayed)+len(rec.NotMovedBack) > 0
}

// formatProgress is one line per composition of rec, under what it is; of namespace
// only, when it is not "" (the definition's status lists no other).
func formatProgress(rec *definition.RolloutRecord, namespace string) string {
	var b strings.Builder
	section := func(title string, entries []string) {
		if len(entries) == 0 {
			return
		}
		fmt.Fprintf(&b, "%s:\n", title)
		for _, e := range entries {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	var moved []string
	for _, m := range rec.Moved {
		moved = append(moved, fmt.Sprintf("%s (at %s, generation %d)", m.Name, m.At.UTC().Format(time.RFC3339), m.Generation))
	}
	of := ""
	if namespace != "" {
		of = " of namespace " + namespace
	}
	section("Moved"+of, moved)
	section("Failed"+of, rec.Failed)
	section("To move"+of, rec.Pending)
	section("Stayed"+of, rec.Stayed)
	section("Not moved back"+of, rec.NotMovedBack)
	return b.String()
}

// defaultCompositorNamespace is where `compositor serve` runs unless told otherwise.
const defaultCompositorNamespace = "compositor-system"

// ErrNoVerifiedPlan means neither the whole plan nor the view of the definition's
// namespace could be read and verified against the definition's status.
var ErrNoVerifiedPlan = errors.New("no plan verified against the definition's status")

// readKeptPlan reads the plan def's rollout follows: the whole plan from
// compositorNamespace, else, when that may not be read or is not there, the view of
// def's namespace, with a notice that says it is a view, that it was verified against
// def's status, and why the whole plan is not shown. The whole plan must hash to the
// hash def's status names; the view, kept where def's namespace's tenants may write,
// must digest to the view digest the status records (plan.Plan.Verify): the status
// only Compositor writes.
func readKeptPlan(ctx context.Context, c client.Client, compositorNamespace string, def *corev1alpha1.CompositionDefinition) (*plan.Plan, string, error) {
	whole := client.ObjectKey{Namespace: compositorNamespace, Name: definition.WholePlanConfigMapName(def.UID)}
	p, wholeErr := readPlanConfigMap(ctx, c, whole, def, false)
	if wholeErr == nil {
		return p, "", nil
	}
	if !apierrors.IsForbidden(wholeErr) && !apierrors.IsNotFound(wholeErr) {
		return nil, "", wholeErr
	}
	view := client.ObjectKey{Namespace: def.Namespace, Name: definition.PlanConfigMapName(def.Name)}
	p, viewErr := readPlanConfigMap(ctx, c, view, def, true)
	switch {
	case viewErr == nil:
		why := fmt.Sprintf("you may not read the whole plan, ConfigMap %s (the platform's)", whole)
		if apierrors.IsNotFound(wholeErr) {
			why = fmt.Sprintf("the whole plan is not in ConfigMap %s: if Compositor runs in another namespace, name it with --compositor-namespace", whole)
		}
		if p.Scope == nil {
			// A whole plan an earlier Compositor kept in def's namespace: its hash is
			// the status's.
			return p, fmt.Sprintf("Whole plan kept by an earlier Compositor in ConfigMap %s, verified against the hash of the definition's status; %s.", view, why), nil
		}
		return p, fmt.Sprintf("View of namespace %s only, from ConfigMap %s, verified against the digest the definition's status records of it (status.rollout.plan.viewDigest %s); %s.",
			def.Namespace, view, def.Status.Rollout.Plan.ViewDigest, why), nil
	case apierrors.IsNotFound(wholeErr) && apierrors.IsNotFound(viewErr):
		return nil, "", fmt.Errorf("neither ConfigMap %s (the whole plan) nor %s (the view of namespace %s) holds a plan yet: Compositor writes them as it plans (is %s Compositor's namespace? --compositor-namespace)",
			whole, view, def.Namespace, compositorNamespace)
	case apierrors.IsForbidden(wholeErr) && apierrors.IsForbidden(viewErr):
		return nil, "", fmt.Errorf("you may not read ConfigMap %s (the whole plan, the platform's) nor %s (the view of namespace %s, its tenants'): %w",
			whole, view, def.Namespace, viewErr)
	}
	where := fmt.Sprintf("the whole plan is not in ConfigMap %s (is %s Compositor's namespace? --compositor-namespace)", whole, compositorNamespace)
	if apierrors.IsForbidden(wholeErr) {
		where = fmt.Sprintf("you may not read the whole plan, ConfigMap %s", whole)
	}
	return nil, "", fmt.Errorf("%w: %s, and %w", ErrNoVerifiedPlan, where, viewErr)
}

// readPlanConfigMap reads the plan ConfigMap key keeps for def, and verifies it
// against def's status: a whole plan by its hash, a view (only where view) by the
// digest the status records of it.
func readPlanConfigMap(ctx context.Context, c client.Client, key client.ObjectKey, def *corev1alpha1.CompositionDefinition, view bool) (*plan.Plan, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, cm); err != nil {
		return nil, fmt.Errorf("reading the plan from ConfigMap %s: %w", key, err)
	}
	p, err := definition.DecodeKeptPlan(cm)
	if err != nil {
		return nil, err
	}
	if p.Scope != nil && !view {
		return nil, fmt.Errorf("ConfigMap %s holds a view of namespace %s, not the whole plan", key, p.Scope.Namespace)
	}
	if p.Scope != nil && p.Scope.Namespace != def.Namespace {
		return nil, fmt.Errorf("ConfigMap %s holds the view of namespace %s, not of %s", key, p.Scope.Namespace, def.Namespace)
	}
	recorded := def.Status.Rollout.Plan
	switch err := p.Verify(recorded.Hash, recorded.ViewDigest); {
	case errors.Is(err, plan.ErrStale):
		return nil, fmt.Errorf("the plan kept in ConfigMap %s is not the one the rollout follows (%w): it is being rewritten, try again", key, err)
	case errors.Is(err, plan.ErrUnrecorded):
		return nil, fmt.Errorf("ConfigMap %s is not shown: %w, as the definition's status records no digest of it (the plan was made by an earlier Compositor); the platform's compositor plan shows the whole plan", key, err)
	case errors.Is(err, plan.ErrAltered) && p.Scope != nil:
		return nil, fmt.Errorf("ConfigMap %s is refused: it is not the view Compositor wrote, which the definition's status records (%w); its namespace's tenants may write it: Compositor writes it again at its next plan, or ask the platform for the whole plan", key, err)
	case err != nil:
		return nil, fmt.Errorf("ConfigMap %s: %w", key, err)
	}
	return p, nil
}
