package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// crashNamespace holds the definition and compositions of the crash-test chart.
const crashNamespace = "crash"

// crashObjects is how many ConfigMaps one crash-test release holds: enough that
// Helm takes a while to create or update them, and the test can kill Compositor
// while it does.
const crashObjects = 200

// crashChart renders crashObjects ConfigMaps holding spec.value.
var crashChart = &chart.Chart{
	Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "crash-test", Version: "0.1.0"},
	Values:   map[string]any{"value": "one", "objects": crashObjects},
	Schema:   []byte(`{"type":"object","properties":{"value":{"type":"string"},"objects":{"type":"integer","minimum":1,"maximum":1000}},"additionalProperties":false}`),
	Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(`{{- range $i := until (int .Values.objects) }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $.Release.Name }}-{{ $i }}
data:
  value: {{ $.Values.value | quote }}
{{- end }}
`)}},
}

const crashResource = "crashtests.v0-1-0.composition.krateo.io"

func crashTest(name, value string, objects int) string {
	return fmt.Sprintf("apiVersion: composition.krateo.io/v0-1-0\nkind: CrashTest\nmetadata: {name: %s, namespace: %s}\nspec: {value: %q, objects: %d}\n", name, crashNamespace, value, objects)
}

// compositorProcess runs `compositor serve` as a child process against cp, with the
// composition controllers in process and its webhooks at a fixed loopback address, so
// that a test can kill it and start it again.
type compositorProcess struct {
	t           *testing.T
	cp          *controlplane.ControlPlane
	webhookAddr string
	args        []string
	logDir      string
	runs        int
	cmd         *exec.Cmd
	exited      chan struct{}
}

func newCompositorProcess(t *testing.T, cp *controlplane.ControlPlane, args ...string) *compositorProcess {
	t.Helper()
	res := cp.Kubectl(context.Background(), "", "create", "namespace", "compositor-system")
	require.NoError(t, res.Err, res.Stderr)
	p := &compositorProcess{t: t, cp: cp, webhookAddr: freePort(t), args: args, logDir: t.TempDir()}
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			data, _ := os.ReadFile(filepath.Join(p.logDir, fmt.Sprintf("serve-%d.log", p.runs)))
			lines := strings.Split(string(data), "\n")
			t.Logf("last lines of the last compositor serve:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	return p
}

// start runs compositor serve once more.
func (p *compositorProcess) start() {
	p.t.Helper()
	p.runs++
	log, err := os.Create(filepath.Join(p.logDir, fmt.Sprintf("serve-%d.log", p.runs)))
	require.NoError(p.t, err)
	args := append([]string{"serve", "--controllers", "in-process", "--leader-election=false",
		"--webhook-bind-address", p.webhookAddr, "--webhook-url", "https://" + p.webhookAddr,
		"--health-probe-bind-address", "0", "--metrics-bind-address", "0",
		"--allow-chart-network", "127.0.0.0/8"}, p.args...)
	cmd := exec.Command(buildCompositor(p.t), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+p.cp.Kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(p.t, cmd.Start())
	p.cmd, p.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) { _ = cmd.Wait(); _ = log.Close(); close(exited) }(p.exited)
}

// stop sends sig to the running compositor serve and waits until it has ended.
func (p *compositorProcess) stop(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	<-p.exited
	p.cmd = nil
}

// helmReleaseSecrets are the Helm release Secrets of release name in namespace.
func helmReleaseSecrets(t assert.TestingT, cp *controlplane.ControlPlane, namespace, name string) []corev1.Secret {
	list := &corev1.SecretList{}
	assert.NoError(t, cp.Client.List(context.Background(), list, client.InNamespace(namespace), client.MatchingLabels{"owner": "helm", "name": name}))
	return list.Items
}

// waitForStatus waits until revision of release name is in status, as Helm's label
// on its release Secret says.
func waitForStatus(t *testing.T, cp *controlplane.ControlPlane, name string, revision int, status string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		found := ""
		for _, s := range helmReleaseSecrets(c, cp, crashNamespace, name) {
			if s.Labels["version"] == fmt.Sprint(revision) {
				found = s.Labels["status"]
			}
		}
		assert.Equal(c, status, found)
	}, 2*time.Minute, 5*time.Millisecond)
}

// eventNotes are the notes of the events about an object with reason.
func eventNotes(t assert.TestingT, cp *controlplane.ControlPlane, namespace, name, reason string) []string {
	list := &corev1.EventList{}
	assert.NoError(t, cp.Client.List(context.Background(), list, client.InNamespace(namespace)))
	var notes []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name && e.Reason == reason {
			notes = append(notes, e.Message)
		}
	}
	return notes
}

// releaseObjects are the UIDs of the release's ConfigMaps by name, and their values.
func releaseObjects(t assert.TestingT, cp *controlplane.ControlPlane, name string) (map[string]types.UID, map[string]string) {
	list := &corev1.ConfigMapList{}
	assert.NoError(t, cp.Client.List(context.Background(), list, client.InNamespace(crashNamespace)))
	uids, values := map[string]types.UID{}, map[string]string{}
	for _, cm := range list.Items {
		if cm.Annotations["meta.helm.sh/release-name"] == name {
			uids[cm.Name], values[cm.Name] = cm.UID, cm.Data["value"]
		}
	}
	return uids, values
}

// historyOf is `helm history` of the release: status and description by revision.
func historyOf(t assert.TestingT, cp *controlplane.ControlPlane, name string) map[int][2]string {
	res := cp.Helm(context.Background(), "history", name, "-n", crashNamespace, "-o", "yaml")
	assert.NoError(t, res.Err, res.Stderr)
	var rows []struct {
		Revision    int    `json:"revision"`
		Status      string `json:"status"`
		Description string `json:"description"`
	}
	assert.NoError(t, yaml.Unmarshal([]byte(res.Stdout), &rows))
	out := map[int][2]string{}
	for _, r := range rows {
		out[r.Revision] = [2]string{r.Status, r.Description}
	}
	return out
}

// Issue 16: Compositor killed (SIGKILL) in the middle of an install, then of an
// upgrade, leaves the release pending-install, then pending-upgrade; started again, it
// marks the interrupted revision failed, runs the operation again, keeps the objects
// the interrupted one had created, and the composition ends Ready.
func TestKilledDuringInstallAndUpgradeRecovers(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	serve := newCompositorProcess(t, cp, "--max-reconcile-rate", "50")
	serve.start()
	applyDefinition(t, cp, serveCharts(t, crashChart).URL, crashNamespace, "crash-test", "0.1.0")
	const name = "victim"

	// ready waits until the composition is Ready for its latest generation.
	ready := func() {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, "True Available release victim is installed", readyCondition(c, cp, crashResource, crashNamespace, name))
			res := cp.Kubectl(ctx, "", "get", crashResource, name, "-n", crashNamespace, "-o",
				`jsonpath={.metadata.generation} {.status.conditions[?(@.type=="Ready")].observedGeneration}`)
			assert.NoError(c, res.Err, res.Stderr)
			generations := strings.Fields(res.Stdout)
			if assert.Len(c, generations, 2) {
				assert.Equal(c, generations[0], generations[1], "Ready is about the latest generation")
			}
		}, 3*time.Minute, 250*time.Millisecond)
	}
	for _, step := range []struct {
		operation, value, pending string
		interrupted               int
	}{
		{operation: "install", value: "one", pending: "pending-install", interrupted: 1},
		{operation: "upgrade", value: "two", pending: "pending-upgrade", interrupted: 3},
	} {
		start := time.Now()
		res := cp.Kubectl(ctx, crashTest(name, step.value, crashObjects), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		waitForStatus(t, cp, name, step.interrupted, step.pending)
		serve.stop(syscall.SIGKILL)
		killedAfter := time.Since(start)
		before, _ := releaseObjects(t, cp, name)
		waitForStatus(t, cp, name, step.interrupted, step.pending) // still, with no one left to finish it
		t.Logf("%s: killed %s after the apply, with %d of %d ConfigMaps there and revision %d %s",
			step.operation, killedAfter.Round(time.Millisecond), len(before), crashObjects, step.interrupted, step.pending)

		serve.start()
		ready()
		t.Logf("%s: Ready %s after the apply", step.operation, time.Since(start).Round(time.Millisecond))
		uids, values := releaseObjects(t, cp, name)
		assert.Len(t, uids, crashObjects, "every object of the release is there")
		for cm, uid := range before {
			assert.Equal(t, uid, uids[cm], "%s was kept, not created again", cm)
		}
		for cm, value := range values {
			assert.Equal(t, step.value, value, cm)
		}
		history := historyOf(t, cp, name)
		assert.Equal(t, "deployed", history[step.interrupted+1][0], "the operation ran again: %v", history)
		assert.Contains(t, history[step.interrupted][1], "Interrupted while "+step.pending, "%v", history)
		assert.Len(t, history, step.interrupted+1, "no other revision: %v", history)
		assert.Contains(t, eventNotes(t, cp, crashNamespace, name, "ReleaseRecovered"),
			fmt.Sprintf("release %s revision %d was left %s by an interrupted operation: marked it failed and runs the operation again", name, step.interrupted, step.pending))
	}
}
