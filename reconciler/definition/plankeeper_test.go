package definition

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/plan"
)

func TestPlanDigestKey(t *testing.T) {
	master := []byte("the master key, 32 bytes of it..")
	key, err := PlanDigestKey(master)
	require.NoError(t, err)
	again, err := PlanDigestKey(bytes.Clone(master))
	require.NoError(t, err)
	assert.Equal(t, key, again, "one master key, one plan key: equal values keep equal digests across restarts")
	assert.Len(t, key, 32)
	assert.NotEqual(t, master, key)
	other, err := PlanDigestKey([]byte("another master key, 32 bytes...."))
	require.NoError(t, err)
	assert.NotEqual(t, key, other)
	_, err = PlanDigestKey(nil)
	assert.Error(t, err, "no master key, no plan")
}

// TestSummarizeListsTheDefinitionsNamespace: the status, which the definition's
// namespace reads, counts every composition and names only that namespace's.
func TestSummarizeListsTheDefinitionsNamespace(t *testing.T) {
	p := &plan.Plan{Hash: "sha256:h", Summary: plan.Summary{ToMove: 3, Refused: 2, Deletions: 2}, Compositions: []plan.Composition{
		{Namespace: "payroll", Name: "payroll-eu-v2-enterprise", Refused: []string{"spec.plan: enterprise is not allowed"},
			Deleted: []plan.ObjectRef{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "payroll", Name: "payroll-eu-v2-enterprise-config"}}},
		{Namespace: "team-a", Name: "bad", Refused: []string{"spec.exposure: must be one of internal, public"},
			Deleted: []plan.ObjectRef{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team-a", Name: "bad-config"}}},
		{Namespace: "team-a", Name: "web"},
	}}
	s := summarize(p, "team-a")
	assert.EqualValues(t, 3, s.ToMove)
	assert.EqualValues(t, 2, s.Refused)
	assert.EqualValues(t, 2, s.Deletions)
	assert.Equal(t, []string{"team-a/bad: spec.exposure: must be one of internal, public"}, s.RefusedCompositions)
	assert.Equal(t, []string{"team-a/bad: ConfigMap team-a/bad-config (v1)"}, s.DeletedObjects)
}
