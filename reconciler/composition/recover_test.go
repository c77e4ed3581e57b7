package composition

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	releasecommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// twoConfigMaps is a chart of two ConfigMaps that hold the value a.
func twoConfigMaps() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "two", Version: "0.1.0"},
		Values:   map[string]any{"a": "one"},
		Templates: []*chartcommon.File{
			{Name: "templates/first.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-first'}\ndata: {a: '{{ .Values.a }}'}\n")},
			{Name: "templates/second.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-second'}\ndata: {a: '{{ .Values.a }}'}\n")},
		},
	}
}

// Issue 16: a release a killed process left pending-install or pending-upgrade — the
// state Helm refuses every later operation in — is marked failed with Helm's own
// storage, the operation runs again, the release ends deployed, the objects the
// interrupted operation created are kept (same UID), and an event says what was done.
func TestInterruptedReleasesAreRecovered(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	const namespace = "stuck"
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))
	helm, err := NewHelm(cp.Config, testSeal(t), logr.Discard())
	require.NoError(t, err)
	storage, err := helm.Actions(namespace)
	require.NoError(t, err)

	configMap := func(name string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cm))
		return cm
	}
	// leavePending rewrites the release's record as a killed process leaves it: the
	// last revision pending, with what it was about to install.
	leavePending := func(rel *release.Release, status releasecommon.Status, version int, values map[string]any) *release.Release {
		pending := *rel
		info := *rel.Info
		info.Status, info.Description = status, "Initial install underway"
		pending.Info, pending.Version, pending.Config = &info, version, values
		if version == rel.Version {
			require.NoError(t, storage.Releases.Update(&pending))
		} else {
			require.NoError(t, storage.Releases.Create(&pending))
		}
		return &pending
	}
	composition := func(name string) *unstructured.Unstructured {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion("composition.krateo.io/v1")
		obj.SetKind("Two")
		obj.SetNamespace(namespace)
		obj.SetName(name)
		return obj
	}

	for _, tc := range []struct {
		name   string
		status releasecommon.Status
		// revision is the pending one; the recovered operation makes revision+1.
		revision int
		values   map[string]any
		// after is the interrupted revision's status in the end: Helm supersedes the
		// failed revision it upgrades from when none was deployed.
		after releasecommon.Status
	}{
		{name: "install", status: releasecommon.StatusPendingInstall, revision: 1, values: map[string]any{"a": "one"}, after: releasecommon.StatusSuperseded},
		{name: "upgrade", status: releasecommon.StatusPendingUpgrade, revision: 2, values: map[string]any{"a": "two"}, after: releasecommon.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rel, err := helm.UpgradeInstall(ctx, namespace, tc.name, twoConfigMaps(), map[string]any{"a": "one"}, InstallOptions{})
			require.NoError(t, err)
			kept := configMap(tc.name + "-first").UID
			// The killed operation had created the first object, not yet the second.
			require.NoError(t, cp.Client.Delete(ctx, configMap(tc.name+"-second")))
			last := leavePending(rel, tc.status, tc.revision, tc.values)

			_, _, err = helm.UpgradeInstall(ctx, namespace, tc.name, twoConfigMaps(), tc.values, InstallOptions{Last: last})
			require.Error(t, err, "Helm alone refuses a pending release")
			assert.Contains(t, err.Error(), "another operation")

			recorder := events.NewFakeRecorder(10)
			r := &Reconciler{Helm: helm, Recorder: recorder}
			last, err = helm.lastRelease(namespace, tc.name)
			require.NoError(t, err)
			require.NoError(t, r.recoverInterrupted(composition(tc.name), site{helm: helm}, last))
			require.Len(t, recorder.Events, 1)
			event := <-recorder.Events
			assert.Contains(t, event, EventReleaseRecovered)
			assert.Contains(t, event, fmt.Sprintf("release %s revision %d was left %s", tc.name, tc.revision, tc.status))

			outcome, rel, err := helm.UpgradeInstall(ctx, namespace, tc.name, twoConfigMaps(), tc.values, InstallOptions{Last: last})
			require.NoError(t, err)
			assert.Equal(t, Upgraded, outcome)
			assert.Equal(t, tc.revision+1, rel.Version)
			assert.Equal(t, releasecommon.StatusDeployed, rel.Info.Status)

			history, err := storage.Releases.History(tc.name)
			require.NoError(t, err)
			statuses := map[int]releasecommon.Status{}
			for _, r := range history {
				h, err := asRelease(r)
				require.NoError(t, err)
				statuses[h.Version] = h.Info.Status
				if h.Version == tc.revision {
					assert.Contains(t, h.Info.Description, "Interrupted while "+string(tc.status))
				}
			}
			assert.Equal(t, tc.after, statuses[tc.revision], "the interrupted revision")
			assert.Equal(t, releasecommon.StatusDeployed, statuses[tc.revision+1])
			assert.Equal(t, kept, configMap(tc.name+"-first").UID, "the object the interrupted operation created is kept")
			assert.Equal(t, tc.values["a"], configMap(tc.name + "-second").Data["a"], "the missing object is created")
			assert.Equal(t, tc.values["a"], configMap(tc.name + "-first").Data["a"])

			again, err := helm.lastRelease(namespace, tc.name)
			require.NoError(t, err)
			require.NoError(t, r.recoverInterrupted(composition(tc.name), site{helm: helm}, again))
			assert.Empty(t, recorder.Events, "a deployed release is left alone")
		})
	}
}
