package conversion

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
)

// withV2Rules is the fireworks-app CRD with rules as the steps chart 2.0.0 declares
// from 1.1.6.
func withV2Rules(t *testing.T, rules string) *Schemas {
	t.Helper()
	c := fireworks(t).crd.DeepCopy()
	var parsed []corev1alpha1.ConversionRule
	require.NoError(t, json.Unmarshal([]byte(rules), &parsed))
	text, err := json.Marshal(corev1alpha1.ConversionDeclaration{Chart: "2.0.0", Steps: []corev1alpha1.ConversionStep{{From: "1.1.6", To: "2.0.0", Rules: parsed}}})
	require.NoError(t, err)
	c.Annotations[vocab.AnnotationPrefixConversions+"v2-0-0"] = string(text)
	s, err := SchemasFromCRD(c)
	require.NoError(t, err)
	return s
}

func TestCheckDeclaredReportsAnAcknowledgedLoss(t *testing.T) {
	losses, err := fireworks(t).schemas.CheckDeclared("v2-0-0")
	require.NoError(t, err)
	require.Len(t, losses, 1, "%v", losses)
	assert.Equal(t, "1.1.6 → 2.0.0", losses[0].Step)
	assert.Equal(t, "service.type", losses[0].Path)
	assert.Contains(t, losses[0].Example, `service.type: "NodePort" comes back as "LoadBalancer"`)
	assert.Contains(t, losses[0].Reason, "NodePort becomes public")

	// Versions that declare nothing have nothing to check.
	losses, err = fireworks(t).schemas.CheckDeclared("v1-1-5")
	assert.NoError(t, err)
	assert.Empty(t, losses)
}

func TestCheckDeclaredRefusesAnUnacknowledgedLoss(t *testing.T) {
	s := withV2Rules(t, `[{"move":"service.type","to":"exposure","map":{"ClusterIP":"internal","NodePort":"public","LoadBalancer":"public"},"reverse":{"internal":"ClusterIP","public":"LoadBalancer"}}]`)
	_, err := s.CheckDeclared("v2-0-0")
	require.ErrorIs(t, err, ErrLossyRule)
	assert.Contains(t, err.Error(), `step 1.1.6 → 2.0.0, move service.type to exposure: service.type: "NodePort" comes back as "LoadBalancer"`)
	assert.Contains(t, err.Error(), "acknowledgeLoss")
}

func TestCheckDeclaredRefusesAValueTheOtherVersionRefuses(t *testing.T) {
	s := withV2Rules(t, `[{"move":"service.type","to":"exposure","map":{"ClusterIP":"internal","NodePort":"external","LoadBalancer":"public"}}]`)
	_, err := s.CheckDeclared("v2-0-0")
	require.ErrorIs(t, err, ErrBadRule)
	assert.Contains(t, err.Error(), `gives exposure: "external", which v2-0-0 refuses`)
}

func TestCheckDeclaredRefusesAMapWithoutAnEntry(t *testing.T) {
	s := withV2Rules(t, `[{"move":"service.type","to":"exposure","map":{"ClusterIP":"internal","LoadBalancer":"public"}}]`)
	_, err := s.CheckDeclared("v2-0-0")
	require.ErrorIs(t, err, ErrBadRule)
	assert.Contains(t, err.Error(), `the map has no entry for NodePort and no default`)
	assert.Contains(t, err.Error(), `fails for service.type: "NodePort"`)
}

func TestCheckDeclaredRefusesAnExpressionThatFails(t *testing.T) {
	s := withV2Rules(t, `[{"derive":"exposure","expression":"self.service.type == 'ClusterIP' ? 'internal' : 'public'","inverse":{"service.type":"self.exposure == 'public' ? 'LoadBalancer' : 'ClusterIP'"},"acknowledgeLoss":"NodePort"}]`)
	_, err := s.CheckDeclared("v2-0-0")
	require.ErrorIs(t, err, ErrBadRule, "values without service fail self.service.type")
	assert.Contains(t, err.Error(), "derive exposure: expression: no such key")

	// Written with optional fields, the same rule is accepted, and its loss reported.
	s = withV2Rules(t, `[{"derive":"exposure","expression":"!has(self.service) || self.service == null || !has(self.service.type) || self.service.type == null ? dyn(null) : self.service.type == 'ClusterIP' ? 'internal' : 'public'","inverse":{"service.type":"!has(self.exposure) || self.exposure == null ? dyn(null) : self.exposure == 'public' ? 'LoadBalancer' : 'ClusterIP'"},"acknowledgeLoss":"NodePort becomes public"}]`)
	losses, err := s.CheckDeclared("v2-0-0")
	require.NoError(t, err)
	paths := []string{}
	for _, l := range losses {
		paths = append(paths, l.Path)
	}
	assert.Contains(t, paths, "service.type")
}
