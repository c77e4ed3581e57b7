package app

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
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

// maxPlanBytes bounds the plan a ConfigMap may inflate to.
const maxPlanBytes = 64 << 20

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
// ("" is the kubeconfig's namespace): the one its status names by hash, read from the
// ConfigMap Compositor keeps it in, checked against that hash.
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
	p, err := readKeptPlan(ctx, c, namespace, name)
	if err != nil {
		return err
	}
	if p.Hash != ro.Plan.Hash {
		return fmt.Errorf("the plan kept in ConfigMap %s/%s is %s, and the rollout follows %s: it is being rewritten, try again", namespace, definition.PlanConfigMapName(name), p.Hash, ro.Plan.Hash)
	}
	header := fmt.Sprintf("Rollout %s → %s: %s", ro.FromVersion, ro.ToVersion, ro.Phase)
	if ro.Message != "" {
		header += ": " + ro.Message
	}
	return writePlan(out, p, opts.Output, header+"\n")
}

// readKeptPlan reads the plan of definition name from its ConfigMap, and checks that its
// content is what its hash says.
func readKeptPlan(ctx context.Context, c client.Client, namespace, name string) (*plan.Plan, error) {
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: namespace, Name: definition.PlanConfigMapName(name)}
	if err := c.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("ConfigMap %s holds no plan yet: Compositor writes it as it plans", key)
		}
		return nil, fmt.Errorf("reading the plan from ConfigMap %s: %w", key, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[definition.PlanConfigMapKey]))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %s is not a gzipped plan: %w", key, definition.PlanConfigMapKey, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, maxPlanBytes+1))
	if err != nil || len(raw) > maxPlanBytes {
		return nil, fmt.Errorf("ConfigMap %s: %s is not a gzipped plan of at most %d bytes (%v)", key, definition.PlanConfigMapKey, maxPlanBytes, err)
	}
	// Numbers as written: a float64 would change an integer past 2^53, and the hash.
	p := &plan.Plan{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("ConfigMap %s: decoding the plan: %w", key, err)
	}
	digest, err := p.Digest()
	if err != nil {
		return nil, err
	}
	if digest != p.Hash {
		return nil, fmt.Errorf("ConfigMap %s: the plan's content hashes to %s, not to the %s it names: it was changed after Compositor wrote it", key, digest, p.Hash)
	}
	return p, nil
}
