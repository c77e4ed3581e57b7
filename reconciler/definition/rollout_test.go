package definition

import (
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/ownership"
)

// servingDefinition serves FireworksApp v1-1-5 from chart 1.1.5 of digest sha256:old.
func servingDefinition() *corev1alpha1.CompositionDefinition {
	def := &corev1alpha1.CompositionDefinition{}
	def.Namespace, def.Name = "platform", "fireworksapp"
	def.Spec.Chart.Version = "2.0.0"
	def.Status.Kind, def.Status.APIVersion, def.Status.Resource = "FireworksApp", "composition.krateo.io/v1-1-5", "fireworksapps"
	def.Status.Digest, def.Status.PackageURL = "sha256:old", "http://charts/fireworks-app-1.1.5.tgz"
	def.Status.Managed.VersionInfo = []corev1alpha1.VersionInfo{{Version: "v1-1-5", Served: true, Chart: "1.1.5"}}
	return def
}

func TestBeginRolloutRetainsTheServedVersion(t *testing.T) {
	def := servingDefinition()
	api := &generatedAPI{Kind: "FireworksApp", Plural: "fireworksapps", Version: "v2-0-0", ChartVersion: "2.0.0"}
	beginRollout(def, api, &chartfetch.Result{Digest: "sha256:new"}, map[string]bool{})
	require.Equal(t, []corev1alpha1.ServedChart{{APIVersion: "composition.krateo.io/v1-1-5", Chart: "1.1.5", Digest: "sha256:old", PackageURL: "http://charts/fireworks-app-1.1.5.tgz"}}, def.Status.Retained)
	require.NotNil(t, def.Status.Rollout)
	assert.Equal(t, corev1alpha1.Rollout{From: "1.1.5", To: "2.0.0", FromVersion: "v1-1-5", ToVersion: "v2-0-0", ToDigest: "sha256:new"}, *def.Status.Rollout)

	// Once the status names 2.0.0, a composition of v1-1-5 is served from 1.1.5's chart.
	def.Status.APIVersion, def.Status.Digest = "composition.krateo.io/v2-0-0", "sha256:new"
	old := ownership.At(def, schema.GroupVersionKind{Group: "composition.krateo.io", Version: "v1-1-5", Kind: "FireworksApp"})
	require.NotNil(t, old)
	assert.Equal(t, "sha256:old", old.Status.Digest)
	assert.Equal(t, "1.1.5", old.Spec.Chart.Version)
	assert.Equal(t, "sha256:new", def.Status.Digest, "the view is a copy")
	assert.Equal(t, "2.0.0", def.Spec.Chart.Version)
	assert.Same(t, def, ownership.At(def, schema.GroupVersionKind{Group: "composition.krateo.io", Version: "v2-0-0", Kind: "FireworksApp"}))
	assert.Nil(t, ownership.At(def, schema.GroupVersionKind{Group: "composition.krateo.io", Version: "v1-1-6", Kind: "FireworksApp"}))
	def.Status.Managed.VersionInfo = []corev1alpha1.VersionInfo{{Version: "v2-0-0", Served: true, Chart: "2.0.0"}, {Version: "v1-1-5", Served: true, Chart: "1.1.5"}, {Version: "hub", Stored: true}}
	old = ownership.At(def, schema.GroupVersionKind{Group: "composition.krateo.io", Version: "v1-1-5", Kind: "FireworksApp"})
	assert.True(t, ownership.Retains(old, "v1-1-5"))
	assert.False(t, ownership.Retains(old, "v2-0-0"))
	assert.Equal(t, "v2-0-0", ownership.Current(def))
	assert.Equal(t, "v2-0-0", ownership.Current(old), "a view knows the version served now")

	// Moving back to a retained version serves it again: it is not retained any more.
	back := &generatedAPI{Kind: "FireworksApp", Plural: "fireworksapps", Version: "v1-1-5", ChartVersion: "1.1.5"}
	def.Status.Managed.VersionInfo = []corev1alpha1.VersionInfo{{Version: "v2-0-0", Served: true, Chart: "2.0.0"}}
	beginRollout(def, back, &chartfetch.Result{Digest: "sha256:old"}, map[string]bool{})
	require.Len(t, def.Status.Retained, 1)
	assert.Equal(t, "composition.krateo.io/v2-0-0", def.Status.Retained[0].APIVersion)
	assert.Equal(t, "v2-0-0", def.Status.Rollout.FromVersion)
}

func TestBeginRolloutLeavesAVersionAnotherDefinitionClaims(t *testing.T) {
	def := servingDefinition()
	api := &generatedAPI{Kind: "FireworksApp", Plural: "fireworksapps", Version: "v2-0-0", ChartVersion: "2.0.0"}
	beginRollout(def, api, &chartfetch.Result{Digest: "sha256:new"}, map[string]bool{"v1-1-5": true})
	assert.Empty(t, def.Status.Retained)
	assert.Nil(t, def.Status.Rollout)
}

// moved is a composition moved to chart version with digest, its Ready condition as
// given (nil: none yet).
func moved(version, digest string, ready *metav1.Condition) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"helmChartVersion": version, "digest": digest}}}
	if ready != nil {
		obj.Object["status"].(map[string]any)["conditions"] = []any{map[string]any{
			"type": ready.Type, "status": string(ready.Status), "reason": ready.Reason, "message": ready.Message,
			"lastTransitionTime": ready.LastTransitionTime.UTC().Format(time.RFC3339),
		}}
	}
	return obj
}

// placed is a composition placed on one target cluster per chart version given.
func placed(ready *metav1.Condition, versions ...string) *unstructured.Unstructured {
	obj := moved("", "", ready)
	var clusters []any
	for i, v := range versions {
		clusters = append(clusters, map[string]any{"name": string(rune('a' + i)), "ready": true, "chartVersion": v})
	}
	obj.Object["status"].(map[string]any)["clusters"] = clusters
	return obj
}

func TestMovedState(t *testing.T) {
	batch := time.Now().Add(-time.Minute)
	condition := func(status metav1.ConditionStatus, reason string, at time.Time) *metav1.Condition {
		return &metav1.Condition{Type: "Ready", Status: status, Reason: reason, Message: "m", LastTransitionTime: metav1.NewTime(at)}
	}
	for name, tc := range map[string]struct {
		obj      *unstructured.Unstructured
		deadline time.Duration
		want     movedStateKind
	}{
		"ready on the new chart":          {moved("2.0.0", "sha256:new", condition("True", "Available", batch)), time.Hour, stateReady},
		"ready on the old chart":          {moved("1.1.5", "sha256:old", condition("True", "Available", batch)), time.Hour, stateWaiting},
		"ready on other content":          {moved("2.0.0", "sha256:other", condition("True", "Available", batch)), time.Hour, stateWaiting},
		"failing since the move":          {moved("1.1.5", "sha256:old", condition("False", "InstallFailed", batch.Add(time.Second))), time.Hour, stateFailed},
		"failing for a moment":            {moved("1.1.5", "sha256:old", condition("False", "InstallFailed", time.Now())), time.Hour, stateWaiting},
		"failing before the move":         {moved("1.1.5", "sha256:old", condition("False", "InstallFailed", batch.Add(-time.Hour))), time.Hour, stateWaiting},
		"failing before, past deadline":   {moved("1.1.5", "sha256:old", condition("False", "InstallFailed", batch.Add(-time.Hour))), time.Second, stateFailed},
		"installing":                      {moved("1.1.5", "sha256:old", condition("False", "Installing", batch.Add(time.Second))), time.Hour, stateWaiting},
		"no condition yet":                {moved("", "", nil), time.Hour, stateWaiting},
		"no condition yet, past deadline": {moved("", "", nil), time.Second, stateFailed},
		"placed, every cluster on it":     {placed(condition("True", "Available", batch), "2.0.0", "2.0.0"), time.Hour, stateReady},
		"placed, one cluster behind":      {placed(condition("True", "Available", batch), "2.0.0", "1.1.5"), time.Hour, stateWaiting},
	} {
		t.Run(name, func(t *testing.T) {
			got, why := movedState(tc.obj, "2.0.0", "sha256:new", batch, tc.deadline)
			assert.Equal(t, tc.want, got, why)
		})
	}
}

func TestSettingsDefaults(t *testing.T) {
	def := &corev1alpha1.CompositionDefinition{}
	s := settingsOf(def)
	assert.Equal(t, upgradeSettings{approval: corev1alpha1.ApprovalOnRisk, canary: 1, batch: 10, failed: 0, deadline: 10 * time.Minute}, s)
	def.Spec.Upgrade = &corev1alpha1.UpgradePolicy{Approval: corev1alpha1.ApprovalNever, Canary: ptr.To[int32](2), BatchSize: ptr.To[int32](8), MaxFailures: ptr.To[int32](3), ProgressDeadlineSeconds: ptr.To[int32](30)}
	assert.Equal(t, upgradeSettings{approval: corev1alpha1.ApprovalNever, canary: 2, batch: 8, failed: 3, deadline: 30 * time.Second}, settingsOf(def))
}

func TestClip(t *testing.T) {
	assert.Equal(t, "short", clipTo("short", 10))
	assert.Equal(t, "abcdefg…", clipTo("abcdefghijklmnop", 10))
	got := clipTo("ééééééé", 10) // two bytes each: cut at a rune boundary
	assert.True(t, utf8.ValidString(got), got)
	assert.LessOrEqual(t, len(got), 10)
}
