package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/compositor-dev/compositor/certs/webhookclient"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// helmNotes renders the chart's NOTES.txt as `helm install` prints them, with --set
// values.
func helmNotes(t *testing.T, set ...string) string {
	t.Helper()
	args := []string{"install", "compositor", chartDir(), "--namespace", "compositor-system", "--dry-run=client"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(filepath.Join(controlplane.BinDir(), "helm"), args...).CombinedOutput()
	require.NoError(t, err, string(out))
	return string(out)
}

// The chart starts serve with --webhook-client-ca from webhook.clientAuth, and its
// notes warn when neither that nor a NetworkPolicy narrows who is heard.
func TestDeploymentChartHearsOnlyTheAPIServer(t *testing.T) {
	controlplane.Require(t, "helm")
	client, err := webhookclient.Write(filepath.Join(t.TempDir(), "client"))
	require.NoError(t, err)
	ca, err := os.ReadFile(client.CAFile)
	require.NoError(t, err)

	t.Run("a CA bundle is mounted from a ConfigMap and required", func(t *testing.T) {
		objects, err := helmTemplate(t, "webhook.clientAuth.caBundle="+string(ca), "webhook.clientAuth.names={"+webhookclient.Name+"}")
		require.NoError(t, err)
		configMap := as[corev1.ConfigMap](t, objects["ConfigMap/compositor-webhook-client-ca"])
		assert.Equal(t, string(ca), configMap.Data["ca.crt"])
		pod := as[appsv1.Deployment](t, objects["Deployment/compositor"]).Spec.Template.Spec
		container := pod.Containers[0]
		assert.Contains(t, container.Args, "--webhook-client-ca=/etc/compositor/webhook-client/ca.crt")
		assert.Contains(t, container.Args, "--webhook-client-name="+webhookclient.Name)
		assert.Contains(t, container.VolumeMounts, corev1.VolumeMount{Name: "webhook-client-ca", MountPath: "/etc/compositor/webhook-client", ReadOnly: true})
		var volume *corev1.Volume
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == "webhook-client-ca" {
				volume = &pod.Volumes[i]
			}
		}
		require.NotNil(t, volume)
		assert.Equal(t, "compositor-webhook-client-ca", volume.ConfigMap.Name)
		// The binary accepts every argument the chart gives it.
		out, err := exec.Command(buildCompositor(t), append(container.Args, "--help")...).CombinedOutput()
		require.NoError(t, err, string(out))
	})

	t.Run("an existing ConfigMap is mounted and none is made", func(t *testing.T) {
		objects, err := helmTemplate(t, "webhook.clientAuth.existingConfigMap=apiserver-client-ca", "webhook.clientAuth.names={"+webhookclient.Name+"}")
		require.NoError(t, err)
		assert.NotContains(t, objects, "ConfigMap/compositor-webhook-client-ca")
		pod := as[appsv1.Deployment](t, objects["Deployment/compositor"]).Spec.Template.Spec
		assert.Contains(t, pod.Containers[0].Args, "--webhook-client-ca=/etc/compositor/webhook-client/ca.crt")
		found := false
		for _, v := range pod.Volumes {
			found = found || (v.ConfigMap != nil && v.ConfigMap.Name == "apiserver-client-ca")
		}
		assert.True(t, found, "the ConfigMap is mounted")
	})

	t.Run("a CA without the names of the API server's certificate is refused", func(t *testing.T) {
		_, err := helmTemplate(t, "webhook.clientAuth.existingConfigMap=apiserver-client-ca")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "webhook.clientAuth.names must name the API server's client certificate")
	})

	t.Run("off by default", func(t *testing.T) {
		objects, err := helmTemplate(t)
		require.NoError(t, err)
		assert.NotContains(t, objects, "ConfigMap/compositor-webhook-client-ca")
		for _, arg := range as[appsv1.Deployment](t, objects["Deployment/compositor"]).Spec.Template.Spec.Containers[0].Args {
			assert.NotContains(t, arg, "--webhook-client")
		}
	})

	t.Run("the notes warn when anyone is heard", func(t *testing.T) {
		const warning = "WARNING: the webhook port answers anyone who reaches it"
		assert.Contains(t, helmNotes(t), warning)
		assert.Contains(t, helmNotes(t, "networkPolicy.enabled=true"), warning, "a NetworkPolicy open to any source narrows nothing")
		assert.NotContains(t, helmNotes(t, "networkPolicy.enabled=true", "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24"), warning)
		assert.NotContains(t, helmNotes(t, "webhook.clientAuth.existingConfigMap=apiserver-client-ca", "webhook.clientAuth.names={"+webhookclient.Name+"}"), warning)
	})
}
