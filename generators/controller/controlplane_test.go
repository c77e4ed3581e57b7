package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// The real API server accepts the Deployment, and its pods meet the "restricted" Pod
// Security Standard: in a namespace that enforces it, the API server admits a pod
// built from the template and refuses one with the hardening taken out.
func TestControlPlaneAcceptsDeployment(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := t.Context()
	c := cp.Client

	for _, ns := range []string{"fireworksapp-system", "compositor-system"} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name:   ns,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
		}}))
	}
	def := definition(map[string]string{"krateo.io/connector-verbose": "true"})
	def.UID = ""
	require.NoError(t, c.Create(ctx, def))

	d := Deployment(fireworksOptions(def))
	require.NoError(t, c.Create(ctx, d.DeepCopy(), client.DryRunAll), "server-side dry run")
	var none appsv1.Deployment
	assert.True(t, apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(d), &none)), "a dry run stores nothing")

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "controller", Namespace: d.Namespace, Labels: d.Spec.Template.Labels},
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
	require.NoError(t, c.Create(ctx, pod.DeepCopy(), client.DryRunAll), "restricted Pod Security admits the pod")

	weak := pod.DeepCopy()
	weak.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
	err := c.Create(ctx, weak, client.DryRunAll)
	assert.True(t, apierrors.IsForbidden(err), "the namespace really enforces restricted: %v", err)

	require.NoError(t, c.Create(ctx, d))
	var got appsv1.Deployment
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(d), &got))
	assert.Empty(t, got.OwnerReferences, "no owner across namespaces")
	assert.Equal(t, def.Namespace, got.Labels["compositor.dev/definition-namespace"], "its labels name the definition")
	assert.Equal(t, d.Spec.Template.Spec.Containers[0].Args, got.Spec.Template.Spec.Containers[0].Args)
}
