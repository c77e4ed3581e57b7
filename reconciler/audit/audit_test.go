package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/policies"
)

func example(namespace, name, message string) policyv1alpha1.AuditViolation {
	return policyv1alpha1.AuditViolation{APIVersion: "composition.krateo.io/v1-1-5", Kind: "FireworksApp", Namespace: namespace, Name: name, Message: message}
}

func TestAuditFindingsCountEveryViolationAndKeepTheFirstExamples(t *testing.T) {
	var all []policyv1alpha1.AuditViolation
	for i := range 50 {
		all = append(all, example(fmt.Sprintf("ns-%d", i%3), fmt.Sprintf("app-%02d", i), "too few replicas"))
	}
	// Whatever order the objects are listed in, the same examples are kept.
	for seed := range uint64(5) {
		shuffled := append([]policyv1alpha1.AuditViolation(nil), all...)
		rand.New(rand.NewPCG(seed, seed)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		f := newAuditFindings()
		for _, v := range shuffled {
			f.add("ha", v)
		}
		f.add("other", example("a", "b", "c"))

		got := f.status("ha")
		assert.EqualValues(t, 50, got.ViolationCount)
		require.Len(t, got.Examples, policyv1alpha1.MaxAuditExamples)
		for i := 1; i < len(got.Examples); i++ {
			assert.Negative(t, compareAuditViolations(got.Examples[i-1], got.Examples[i]), "examples are ordered by namespace/name")
		}
		assert.Equal(t, example("ns-0", "app-00", "too few replicas"), got.Examples[0])
		assert.Equal(t, "ns-1", got.Examples[len(got.Examples)-1].Namespace, "the 17 of ns-0 come first, then ns-1's")
		assert.Nil(t, got.LastRunTime)
	}
}

func TestAuditFindingsOfACleanPolicy(t *testing.T) {
	got := newAuditFindings().status("clean")
	assert.Equal(t, policyv1alpha1.AuditStatus{}, got)
}

func TestAuditUpdateWritesOnlyWhatChanged(t *testing.T) {
	now := metav1.NewTime(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	recent := metav1.NewTime(now.Add(-time.Minute))
	stale := metav1.NewTime(now.Add(-auditHeartbeat))
	one := []policyv1alpha1.AuditViolation{example("default", "a", "x")}
	tests := []struct {
		name    string
		current policyv1alpha1.AuditStatus
		found   policyv1alpha1.AuditStatus
		write   bool
	}{
		{"never audited, clean", policyv1alpha1.AuditStatus{}, policyv1alpha1.AuditStatus{}, true},
		{"clean again", policyv1alpha1.AuditStatus{LastRunTime: &recent}, policyv1alpha1.AuditStatus{Examples: []policyv1alpha1.AuditViolation{}}, false},
		{"same findings", policyv1alpha1.AuditStatus{LastRunTime: &recent, ViolationCount: 1, Examples: one}, policyv1alpha1.AuditStatus{ViolationCount: 1, Examples: one}, false},
		{"same findings, stale time", policyv1alpha1.AuditStatus{LastRunTime: &stale, ViolationCount: 1, Examples: one}, policyv1alpha1.AuditStatus{ViolationCount: 1, Examples: one}, true},
		{"new count", policyv1alpha1.AuditStatus{LastRunTime: &recent, ViolationCount: 1, Examples: one}, policyv1alpha1.AuditStatus{ViolationCount: 2, Examples: one}, true},
		{"other example", policyv1alpha1.AuditStatus{LastRunTime: &recent, ViolationCount: 1, Examples: one}, policyv1alpha1.AuditStatus{ViolationCount: 1, Examples: []policyv1alpha1.AuditViolation{example("default", "b", "x")}}, true},
		{"violations gone", policyv1alpha1.AuditStatus{LastRunTime: &recent, ViolationCount: 1, Examples: one}, policyv1alpha1.AuditStatus{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, write := auditUpdate(tt.current, tt.found, now)
			assert.Equal(t, tt.write, write)
			require.NotNil(t, got.LastRunTime)
			assert.Equal(t, now, *got.LastRunTime)
			assert.Equal(t, tt.found.ViolationCount, got.ViolationCount)
			if len(tt.found.Examples) == 0 {
				assert.Nil(t, got.Examples, "no examples is no list, so a merge patch removes the old ones")
			}
		})
	}
}

func TestAuditMessage(t *testing.T) {
	tests := []struct {
		name string
		v    policies.Violation
		want string
	}{
		{"plain", policies.Violation{Message: "too few replicas", Policy: "ha"}, "too few replicas"},
		{"path", policies.Violation{Path: "spec.replicaCount", Message: "too few", Policy: "ha"}, "spec.replicaCount: too few"},
		{"rendered object", policies.Violation{Object: "Deployment/x", Path: "spec.replicas", Message: "too few", Policy: "ha"}, "Deployment/x spec.replicas: too few"},
		{"id", policies.Violation{Message: "too few", Policy: "ha", ID: "HA-1"}, "too few [HA-1]"},
		{"one line", policies.Violation{Message: "too\nfew\treplicas ", Policy: "ha"}, "too few replicas"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, auditMessage(tt.v))
		})
	}

	long := auditMessage(policies.Violation{Message: strings.Repeat("é", maxAuditMessage)})
	assert.LessOrEqual(t, len(long), maxAuditMessage)
	assert.True(t, strings.HasSuffix(long, "..."))
	assert.True(t, strings.HasPrefix(long, "éé"))
	assert.True(t, utf8.ValidString(long), "no character is cut in half")
}

// digestCharts serves a chart per status digest, counting the loads.
type digestCharts struct {
	charts map[string]*chart.Chart
	loads  int
}

func (c *digestCharts) Chart(_ context.Context, def *corev1alpha1.CompositionDefinition) (*chart.Chart, string, error) {
	c.loads++
	return c.charts[def.Status.Digest], def.Status.Digest, nil
}

// A definition that moved to 2.0.0 and retains 1.1.5 is two versions with two charts:
// the compositions pinned to each are audited with their own version's chart, each
// loaded once per pass.
func TestAuditChartsOfADefinitionsVersions(t *testing.T) {
	oldChart := &chart.Chart{Metadata: &chart.Metadata{Name: "fireworks-app", Version: "1.1.5"}}
	newChart := &chart.Chart{Metadata: &chart.Metadata{Name: "fireworks-app", Version: "2.0.0"}}
	charts := &digestCharts{charts: map[string]*chart.Chart{"sha256:old": oldChart, "sha256:new": newChart}}
	def := corev1alpha1.CompositionDefinition{}
	def.Namespace, def.Name = "platform", "fireworksapp"
	def.Spec.Chart.Version = "2.0.0"
	def.Status.Kind, def.Status.APIVersion, def.Status.Digest = "FireworksApp", "composition.krateo.io/v2-0-0", "sha256:new"
	def.Status.Retained = []corev1alpha1.ServedChart{{APIVersion: "composition.krateo.io/v1-1-5", Chart: "1.1.5", Digest: "sha256:old"}}
	p := &auditPass{Auditor: &Auditor{Charts: charts}, charts: map[string]chartResult{}, definitions: []corev1alpha1.CompositionDefinition{def}}
	gvk := func(version string) schema.GroupVersionKind {
		return schema.GroupVersionKind{Group: "composition.krateo.io", Version: version, Kind: "FireworksApp"}
	}
	ctx := context.Background()
	for range 2 {
		got := p.chart(ctx, ownership.For(p.definitions, gvk("v2-0-0"), "apps"))
		assert.Same(t, newChart, got.chart)
		assert.Equal(t, "sha256:new", got.digest)
		got = p.chart(ctx, ownership.For(p.definitions, gvk("v1-1-5"), "apps"))
		assert.Same(t, oldChart, got.chart, "the retained version's own chart")
		assert.Equal(t, "sha256:old", got.digest)
	}
	assert.Equal(t, 2, charts.loads, "each chart once per pass")
}
