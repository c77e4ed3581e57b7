package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// republish replaces chart version 1.1.5 in dir with other content under the same
// version (another template, a tighter schema), as a compromised or careless registry
// would, or another team's repository, and reindexes dir.
func republish(t *testing.T, dir string) {
	t.Helper()
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	for i, tpl := range ch.Templates {
		if tpl.Name == "templates/configmap.yaml" {
			ch.Templates[i] = &chartcommon.File{Name: tpl.Name, Data: append(append([]byte{}, tpl.Data...), []byte("\n  tampered: \"yes\"\n")...)}
		}
	}
	// A tighter schema, too: at most 3 replicas where the original allows 10.
	ch.Schema = bytes.Replace(ch.Schema, []byte(`"maximum": 10`), []byte(`"maximum": 3`), 1)
	require.Contains(t, string(ch.Schema), `"maximum": 3`)
	_, err = chartutil.Save(ch, dir)
	require.NoError(t, err)
	index, err := repo.IndexDirectory(dir, "")
	require.NoError(t, err)
	require.NoError(t, index.WriteFile(filepath.Join(dir, "index.yaml"), 0o644))
}

// Issue 12, item 6: the digest a definition recorded is the only content of that chart
// version Compositor uses; other bytes under the same version wait for a person.
func TestChartContentIsPinnedToTheRecordedDigest(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.Controllers = app.ControllersInProcess
		o.Poll = time.Second
	})
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	repository := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
	ctx := context.Background()
	readyDefinitionFrom(t, cp, repository.URL)
	digest := func() string {
		return cp.Kubectl(ctx, "", "get", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "-o", "jsonpath={.status.digest}").Stdout
	}
	recorded := digest()
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, recorded)

	republish(t, dir)
	var message string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		synced := definitionCondition(c, cp, "Synced")
		if assert.NotNil(c, synced) {
			assert.Equal(c, "ChartChanged", synced.Reason)
			message = synced.Message
		}
	}, time.Minute, 250*time.Millisecond)
	assert.Contains(t, message, "the chart source serves different content for the same chart version: chart fireworks-app 1.1.5 was recorded as "+recorded)
	assert.Contains(t, message, "kubectl annotate compositiondefinition fireworksapp-1-1-5 -n fireworksapp-system compositor.dev/accept-chart-digest=sha256:")
	assert.Equal(t, recorded, digest(), "the recorded digest stays")
	assert.Equal(t, metav1.ConditionTrue, definitionCondition(t, cp, "Ready").Status, "the API goes on serving the recorded content")
	events := &corev1.EventList{}
	require.NoError(t, cp.Client.List(ctx, events, client.InNamespace("fireworksapp-system")))
	var reasons []string
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "CompositionDefinition" {
			reasons = append(reasons, e.Reason)
		}
	}
	assert.Contains(t, reasons, "ChartChanged", "an event says so")

	// A composition written meanwhile is judged and installed from the recorded content.
	res := cp.Kubectl(ctx, fireworksApp("pinned", 1), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True", compositionField(c, cp, "v1-1-5", "pinned", `{.status.conditions[?(@.type=="Ready")].status}`))
	}, 2*time.Minute, 250*time.Millisecond)
	assert.Equal(t, recorded, compositionField(t, cp, "v1-1-5", "pinned", "{.status.digest}"))
	cm := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "fireworksapp-system", Name: "pinned-config"}, cm))
	assert.NotContains(t, cm.Data, "tampered")

	// A person accepts the new content: it is recorded, and used from then on.
	served, err := os.ReadFile(filepath.Join(dir, "fireworks-app-1.1.5.tgz"))
	require.NoError(t, err)
	sum := sha256.Sum256(served)
	accepted := "sha256:" + hex.EncodeToString(sum[:])
	res = cp.Kubectl(ctx, "", "annotate", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "compositor.dev/accept-chart-digest="+accepted)
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, accepted, digest())
		if synced := definitionCondition(c, cp, "Synced"); assert.NotNil(c, synced) {
			assert.Equal(c, metav1.ConditionTrue, synced.Status)
		}
	}, time.Minute, 250*time.Millisecond)
}

// definitionCondition is the condition of type kind of fireworksapp-1-1-5, or nil.
func definitionCondition(t assert.TestingT, cp *controlplane.ControlPlane, kind string) *metav1.Condition {
	return definitionConditionOf(t, cp, "fireworksapp-system", "fireworksapp-1-1-5", kind)
}

// definitionConditionOf is the condition of type kind of a definition, or nil.
func definitionConditionOf(t assert.TestingT, cp *controlplane.ControlPlane, namespace, name, kind string) *metav1.Condition {
	def := &corev1alpha1.CompositionDefinition{}
	if !assert.NoError(t, cp.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, def)) {
		return nil
	}
	return meta.FindStatusCondition(def.Status.Conditions, kind)
}
