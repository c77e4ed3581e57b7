package composition

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// webChart renders a ConfigMap and a Deployment of one replica.
func webChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "web", Version: "0.1.0"},
		Templates: []*chartcommon.File{
			{Name: "templates/config.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-config'}\ndata: {a: b}\n")},
			{Name: "templates/web.yaml", Data: []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: '{{ .Release.Name }}-web'}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: registry.invalid/web:1}]}
`)},
		},
	}
}

// Issue 28: Healthy tells whether the objects of a release are ready, as kstatus reads
// them, and names the first one that is not and why; the API server alone (no
// workload controller) rolls nothing out, so a Deployment stays in progress until its
// status says otherwise.
func TestHealthNamesTheFirstObjectThatIsNotReady(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	const namespace = "health"
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))
	helm, err := NewHelm(cp.Config, testSeal(t), logr.Discard())
	require.NoError(t, err)
	r := &Reconciler{}
	s := site{helm: helm}

	assert.Equal(t, health{status: metav1.ConditionUnknown, reason: ReasonNotInstalled, message: "no release is installed"}, r.healthOn(ctx, s, nil))

	_, rel, err := helm.UpgradeInstall(ctx, namespace, "shop", webChart(), nil, InstallOptions{})
	require.NoError(t, err)
	h := r.healthOn(ctx, s, rel)
	assert.Equal(t, metav1.ConditionFalse, h.status)
	assert.Equal(t, "InProgress", h.reason)
	assert.Contains(t, h.message, "Deployment.apps/shop-web of release shop is not ready: ")
	assert.GreaterOrEqual(t, h.retry, minHealthRetry, "looked at again")

	// The Deployment's controller would write this status once its pod runs.
	web := &appsv1.Deployment{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "shop-web"}, web))
	web.Status = appsv1.DeploymentStatus{
		ObservedGeneration: web.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
		},
	}
	require.NoError(t, cp.Client.Status().Update(ctx, web))
	h = r.healthOn(ctx, s, rel)
	assert.Equal(t, health{status: metav1.ConditionTrue, reason: ReasonCurrent, message: "every object of release shop is ready"}, h)

	// An object of the release that is gone is named too.
	require.NoError(t, cp.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "shop-config"}}))
	h = r.healthOn(ctx, s, rel)
	assert.Equal(t, metav1.ConditionFalse, h.status)
	assert.Equal(t, "NotFound", h.reason)
	assert.Equal(t, "ConfigMap/shop-config of release shop is not ready: the object is not there", h.message)
}

func TestHealthMessagesAreBounded(t *testing.T) {
	assert.Equal(t, "short", shortened("short"))
	long := strings.Repeat("é", maxHealthMessage)
	got := shortened(long)
	assert.LessOrEqual(t, len(got), maxHealthMessage+len("…"))
	assert.True(t, utf8.ValidString(got), "cut at a rune boundary")
	assert.True(t, strings.HasSuffix(got, "…"))
}
