// The rights of a target's kubeconfig identity: before anything is installed on a
// target cluster, checkRights makes sure the release namespace is there
// (ensureNamespace) and asks the cluster (SelfSubjectAccessReview) whether the
// identity may do what the install needs, saying what is missing (describe). Rights
// found sufficient are kept in Targets.granted for rightsFresh, per engagement, chart
// and namespace (rightsKey).

package composition

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/multicluster"
)

// rightsFresh is how long a target's rights, once found sufficient for a chart in
// a namespace, are not asked again.
const rightsFresh = 5 * time.Minute

// rightsKey is one check of a target's rights: the engagement, the chart, the namespace.
type rightsKey struct {
	cluster   string
	done      <-chan struct{}
	digest    string
	namespace string
}

// Verbs the identity of a target needs in the release namespace: Helm reads, creates,
// patches (upgrades) and deletes the objects of a release, and keeps its release
// records as Secrets there.
var (
	objectVerbs = []string{"get", "create", "patch", "delete"}
	recordVerbs = []string{"get", "list", "create", "update", "delete"}
)

// checkRights makes sure namespace exists on cl and that the identity of cl's
// kubeconfig may do there what installing w needs, asking the cluster itself
// (SelfSubjectAccessReview, per kind the chart creates and verb Helm uses). What is
// missing comes back as a GateError listing it, before anything is installed.
func (t *Targets) checkRights(ctx context.Context, cl multicluster.Cluster, h *Helm, w work, namespace string, clusterResources []schema.GroupResource) error {
	key := rightsKey{cluster: cl.Name, done: cl.Done(), digest: w.digest, namespace: namespace}
	t.mu.Lock()
	at, ok := t.granted[key]
	t.mu.Unlock()
	if ok && time.Since(at) < rightsFresh {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, targetTimeout)
	defer cancel()
	c := cl.Client()
	if err := ensureNamespace(ctx, c, cl.Name, namespace); err != nil {
		return err
	}
	types, err := rbac.ResourceTypes(w.chart, h.mapper)
	if err != nil {
		return fmt.Errorf("finding the kinds the chart creates, with cluster %s's discovery: %w", cl.Name, err)
	}
	attributes := make([]authorizationv1.ResourceAttributes, 0, len(types)*len(objectVerbs)+len(recordVerbs))
	for _, verb := range recordVerbs {
		attributes = append(attributes, authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Resource: "secrets"})
	}
	for _, typ := range types {
		ns := namespace
		if !typ.Namespaced {
			if !slices.Contains(clusterResources, typ.GroupResource()) {
				continue // the install gate refuses it: no right is needed
			}
			ns = ""
		}
		for _, verb := range objectVerbs {
			attributes = append(attributes, authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: typ.Group, Resource: typ.Resource})
		}
	}
	var missing []string
	for _, attrs := range attributes {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}
		if err := c.Create(ctx, review); err != nil {
			return fmt.Errorf("asking cluster %s what its kubeconfig's identity may do: %w", cl.Name, err)
		}
		if !review.Status.Allowed {
			missing = append(missing, describe(attrs))
		}
	}
	if len(missing) > 0 {
		return &GateError{Reason: ReasonTargetForbidden, Message: fmt.Sprintf(
			"nothing was installed: the identity of the kubeconfig may not %s; grant it that and the install is tried again within %s",
			strings.Join(missing, ", "), retryRefused)}
	}
	t.mu.Lock()
	if t.granted == nil {
		t.granted = map[rightsKey]time.Time{}
	}
	for k := range t.granted {
		select {
		case <-k.done:
			delete(t.granted, k)
		default:
		}
	}
	t.granted[key] = time.Now()
	t.mu.Unlock()
	return nil
}

// describe is a right as kubectl auth can-i says it: "create deployments.apps in
// namespace team".
func describe(attrs authorizationv1.ResourceAttributes) string {
	resource := schema.GroupResource{Group: attrs.Group, Resource: attrs.Resource}.String()
	if attrs.Namespace == "" {
		return attrs.Verb + " " + resource + " (cluster-wide)"
	}
	return attrs.Verb + " " + resource + " in namespace " + attrs.Namespace
}

// ensureNamespace creates namespace on a target that does not have it: the release goes
// into the namespace of the same name as the composition's. An identity that may
// neither read nor create namespaces cannot tell whether it is there: then the check
// of its rights in it, and Helm, say what is wrong.
func ensureNamespace(ctx context.Context, c client.Client, cluster, namespace string) error {
	err := c.Get(ctx, client.ObjectKey{Name: namespace}, &corev1.Namespace{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err):
		err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
		if err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("creating namespace %s on cluster %s: %w", namespace, cluster, err)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading namespace %s on cluster %s: %w", namespace, cluster, err)
	}
	err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsForbidden(err):
		return &GateError{Reason: ReasonTargetForbidden, Message: fmt.Sprintf(
			"nothing was installed: namespace %s does not exist there and the identity of the kubeconfig may not create it: create it, or grant create namespaces", namespace)}
	default:
		return fmt.Errorf("creating namespace %s on cluster %s: %w", namespace, cluster, err)
	}
}
