package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/compositor-dev/compositor/policies"
)

// /validate reuses /mutate's schema check for the same request when the values are
// unchanged, and checks again when another mutating webhook changed them, when the
// UID differs, or when the memory is too old.
func TestValidateReusesTheMutatingSchemaCheck(t *testing.T) {
	m, v, runs := countingHandlers(t, time.Second, 1, nil)
	ctx := context.Background()
	write := func(uid string, spec map[string]any) map[string]any {
		req := compositionRequest("CREATE", named(spec), nil)
		req["uid"] = uid
		return req
	}

	req := write("uid-1", map[string]any{"replicaCount": 2})
	resp := m.Handle(ctx, admissionRequest(t, req))
	require.True(t, resp.Allowed, "%v", resp.Result)
	require.Equal(t, int64(1), runs.Load(), "/mutate checks the schema")
	resp = v.Handle(ctx, admissionRequest(t, req))
	require.True(t, resp.Allowed, "%v", resp.Result)
	assert.Equal(t, int64(1), runs.Load(), "/validate reuses it")
	resp = v.Handle(ctx, admissionRequest(t, req))
	require.True(t, resp.Allowed)
	assert.Equal(t, int64(2), runs.Load(), "once: a second /validate checks again")

	req = write("uid-2", map[string]any{"replicaCount": 2})
	m.Handle(ctx, admissionRequest(t, req))
	changed := write("uid-2", map[string]any{"replicaCount": 3}) // another webhook's patch
	v.Handle(ctx, admissionRequest(t, changed))
	assert.Equal(t, int64(4), runs.Load(), "changed values are checked again")

	m.Handle(ctx, admissionRequest(t, write("uid-3", map[string]any{"replicaCount": 2})))
	v.Handle(ctx, admissionRequest(t, write("uid-4", map[string]any{"replicaCount": 2})))
	assert.Equal(t, int64(6), runs.Load(), "another request's check is not reused")
}

func TestSchemaMemoForgetsOldEntriesAndOtherCharts(t *testing.T) {
	memo := newSchemaMemo()
	now := time.Now()
	memo.now = func() time.Time { return now }
	spec := map[string]any{"a": "b"}
	request := func(digest string) *policies.Request {
		return &policies.Request{ChartDigest: digest, Object: map[string]any{"spec": map[string]any{"a": "b"}}}
	}
	memo.remember(types.UID("u"), "sha256:one", spec, nil)
	assert.False(t, memo.recall("u", request("sha256:two")), "another chart")

	memo.remember("u", "sha256:one", spec, []policies.Violation{{Message: "x"}})
	now = now.Add(schemaMemoTTL + time.Second)
	assert.False(t, memo.recall("u", request("sha256:one")), "too old")

	memo.remember("u", "sha256:one", spec, []policies.Violation{{Message: "x"}})
	r := request("sha256:one")
	require.True(t, memo.recall("u", r))
	assert.True(t, r.SchemaChecked)
	assert.Equal(t, []policies.Violation{{Message: "x"}}, r.SchemaViolations)

	memo.remember("", "sha256:one", spec, nil)
	assert.False(t, memo.recall("", request("sha256:one")), "no UID, no memory")
}
