package gatekeeper_test

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
	"github.com/compositor-dev/compositor/policies/membudget"
)

// A template whose evaluation grows the heap past the memory budget is stopped with
// ErrMemory, long before its deadline, and only it: the constraint beside it, in the
// same batch, still gives its violation.
func TestATemplatePastTheMemoryBudgetIsStoppedAlone(t *testing.T) {
	hog := template("K8sHog", regoCode("v1", `package k8shog

violation contains {"msg": "never"} if {
	pairs := [[a, b] | some a in numbers.range(1, 100000); some b in numbers.range(1, 100000)]
	count(pairs) < 0
}
`))
	team := template("K8sTeam", regoCode("", teamV0))
	lib := library(t, map[string]map[string]any{"K8sHog": hog, "K8sTeam": team},
		[3]string{"K8sHog", "hog", `match: {kinds: [{apiGroups: [""], kinds: [Pod]}]}`},
		[3]string{"K8sTeam", "team", `match: {kinds: [{apiGroups: [""], kinds: [Pod]}]}`})

	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	membudget.SetBudget(int64(s[0].Value.Uint64()) + 64<<20)
	t.Cleanup(func() { membudget.SetBudget(0) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	results := lib.Review(ctx, gatekeeper.SubjectOf(pod("web", "shop", nil)), &gatekeeper.Request{Operation: "CREATE"})
	require.NoError(t, ctx.Err(), "stopped by the guard, not the deadline")
	byConstraint := map[string]gatekeeper.Result{}
	for _, r := range results {
		byConstraint[r.Constraint.Name] = r
	}
	require.Contains(t, byConstraint, "hog")
	assert.ErrorIs(t, byConstraint["hog"].Err, membudget.ErrMemory)
	require.Contains(t, byConstraint, "team")
	assert.NoError(t, byConstraint["team"].Err)
	assert.NotEmpty(t, byConstraint["team"].Msg)
}
