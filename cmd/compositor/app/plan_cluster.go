package app

import (
	"cmp"
	"context"
	"fmt"
	"io"

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
// Compositor's namespace (opts.CompositorNamespace), checked against that hash, to
// whoever may read it (the platform); else the view of the definition's namespace,
// which lists only that namespace's compositions, to its tenants; else an error that
// names both ConfigMaps.
func RunPlanDefinition(ctx context.Context, out io.Writer, opts *PlanOptions, namespace, name string) error {
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
	p, err := readKeptPlan(ctx, c, cmp.Or(opts.CompositorNamespace, defaultCompositorNamespace), def)
	if err != nil {
		return err
	}
	header := fmt.Sprintf("Rollout %s → %s: %s", ro.FromVersion, ro.ToVersion, ro.Phase)
	if ro.Message != "" {
		header += ": " + ro.Message
	}
	return writePlan(out, p, opts.Output, header+"\n")
}

// defaultCompositorNamespace is where `compositor serve` runs unless told otherwise.
const defaultCompositorNamespace = "compositor-system"

// readKeptPlan reads the plan def's rollout follows: the whole plan from
// compositorNamespace, else, when that may not be read or is not there, the view of
// def's namespace. Either must be what Compositor wrote (plan.Plan.Check) and name the
// hash def's status names.
func readKeptPlan(ctx context.Context, c client.Client, compositorNamespace string, def *corev1alpha1.CompositionDefinition) (*plan.Plan, error) {
	whole := client.ObjectKey{Namespace: compositorNamespace, Name: definition.WholePlanConfigMapName(def.UID)}
	p, wholeErr := readPlanConfigMap(ctx, c, whole, def)
	if wholeErr == nil {
		return p, nil
	}
	if !apierrors.IsForbidden(wholeErr) && !apierrors.IsNotFound(wholeErr) {
		return nil, wholeErr
	}
	view := client.ObjectKey{Namespace: def.Namespace, Name: definition.PlanConfigMapName(def.Name)}
	p, viewErr := readPlanConfigMap(ctx, c, view, def)
	switch {
	case viewErr == nil:
		return p, nil
	case apierrors.IsNotFound(wholeErr) && apierrors.IsNotFound(viewErr):
		return nil, fmt.Errorf("neither ConfigMap %s (the whole plan) nor %s (the view of namespace %s) holds a plan yet: Compositor writes them as it plans (is %s Compositor's namespace? --compositor-namespace)",
			whole, view, def.Namespace, compositorNamespace)
	case apierrors.IsForbidden(wholeErr) && apierrors.IsForbidden(viewErr):
		return nil, fmt.Errorf("you may not read ConfigMap %s (the whole plan, the platform's) nor %s (the view of namespace %s, its tenants'): %w",
			whole, view, def.Namespace, viewErr)
	}
	return nil, fmt.Errorf("reading the whole plan: %w; reading the view of namespace %s: %w", wholeErr, def.Namespace, viewErr)
}

// readPlanConfigMap reads the plan ConfigMap key keeps for def, and checks it.
func readPlanConfigMap(ctx context.Context, c client.Client, key client.ObjectKey, def *corev1alpha1.CompositionDefinition) (*plan.Plan, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, cm); err != nil {
		return nil, fmt.Errorf("reading the plan from ConfigMap %s: %w", key, err)
	}
	p, err := definition.DecodeKeptPlan(cm)
	if err != nil {
		return nil, err
	}
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", key, err)
	}
	if p.Scope != nil && p.Scope.Namespace != def.Namespace {
		return nil, fmt.Errorf("ConfigMap %s holds the view of namespace %s, not of %s", key, p.Scope.Namespace, def.Namespace)
	}
	if want := def.Status.Rollout.Plan.Hash; p.Hash != want {
		return nil, fmt.Errorf("the plan kept in ConfigMap %s is %s, and the rollout follows %s: it is being rewritten, try again", key, p.Hash, want)
	}
	return p, nil
}
