package policy

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/controlplane"
)

const noTeamB = `package compositor.noteamb

deny contains "team-b may not" if {
	input.review.object.metadata.namespace == "team-b"
}
`

// A policy is compiled into the engine and says so in its status; one that no longer
// compiles keeps its last good version in force and reports the error's line; a
// deleted one leaves the engine.
func TestPoliciesFollowTheirObjects(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	engine, err := policies.NewEngine(ctx, policies.Options{DisabledBuiltins: policies.BuiltinIDs()})
	require.NoError(t, err)
	r := &Reconciler{Client: cp.Client, Engine: engine}
	reconcile := func(name string) {
		t.Helper()
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: name}})
		require.NoError(t, err)
	}
	inForce := func() map[string]string {
		out := map[string]string{}
		for _, p := range engine.Policies() {
			out[p.Name] = p.Rego
		}
		return out
	}

	obj := &policyv1alpha1.CompositionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "no-team-b"}, Spec: policyv1alpha1.CompositionPolicySpec{Rego: noTeamB}}
	require.NoError(t, cp.Client.Create(ctx, obj))
	reconcile("no-team-b")
	assert.Equal(t, map[string]string{"no-team-b": noTeamB}, inForce())
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
	assert.True(t, obj.Status.Compiled)
	assert.Empty(t, obj.Status.Errors)
	assert.Equal(t, obj.Generation, obj.Status.ObservedGeneration)

	obj.Spec.Rego = "package compositor.noteamb\n\ndeny contains \"x\" if {\n\tinput.review.object.metadata.namespace ==\n}\n"
	require.NoError(t, cp.Client.Update(ctx, obj))
	reconcile("no-team-b")
	assert.Equal(t, map[string]string{"no-team-b": noTeamB}, inForce(), "the last good version stays in force")
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
	assert.False(t, obj.Status.Compiled)
	require.NotEmpty(t, obj.Status.Errors)
	assert.Positive(t, obj.Status.Errors[0].Line, "the error names its line: %+v", obj.Status.Errors)
	assert.Equal(t, obj.Generation, obj.Status.ObservedGeneration)

	require.NoError(t, cp.Client.Delete(ctx, obj))
	reconcile("no-team-b")
	assert.Empty(t, inForce(), "a deleted policy leaves the engine")

	reconcile("never-existed")
	assert.Empty(t, inForce())
}
