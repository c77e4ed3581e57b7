package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/membudget"
)

// The admission bounds of issue #26 are flags with defaults, and a bad value is named.
func TestServeLimitFlags(t *testing.T) {
	opts, err := parse(t, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, policies.DefaultLimits(), opts.Limits)
	assert.Equal(t, policies.DefaultMaxRangeElements, opts.PolicyMaxRange)
	assert.GreaterOrEqual(t, opts.LaneConcurrency, 1)

	opts, err = parse(t, []string{"--max-value-depth=10", "--max-value-keys=500", "--max-string-bytes=1024", "--max-rendered-bytes=4096", "--policy-max-range=100", "--admission-namespace-concurrency=3"}, nil)
	require.NoError(t, err)
	assert.Equal(t, policies.Limits{MaxDepth: 10, MaxKeys: 500, MaxStringBytes: 1024, MaxRenderedBytes: 4096}, opts.Limits)
	assert.Equal(t, 100, opts.PolicyMaxRange)
	assert.Equal(t, 3, opts.LaneConcurrency)

	_, err = parse(t, []string{"--max-value-depth=0", "--max-value-keys=-1", "--max-string-bytes=0", "--max-rendered-bytes=0", "--policy-max-range=0", "--admission-namespace-concurrency=0"}, nil)
	require.Error(t, err)
	for _, want := range []string{
		"--max-value-depth must be at least 1, got 0",
		"--max-value-keys must be at least 1, got -1",
		"--max-string-bytes must be at least 1, got 0",
		"--max-rendered-bytes must be at least 1, got 0",
		"--policy-max-range must be at least 1, got 0",
		"--admission-namespace-concurrency must be at least 1, got 0",
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// --policy-max-memory: auto (a budget below the memory limit), a quantity, 0 for
// none; anything else is named.
func TestPolicyMaxMemoryFlag(t *testing.T) {
	opts, err := parse(t, nil, nil)
	require.NoError(t, err)
	budget, err := opts.policyMemoryBudget()
	require.NoError(t, err)
	assert.Equal(t, membudget.Default(), budget)
	assert.Positive(t, budget)

	for arg, want := range map[string]int64{"768Mi": 768 << 20, "0": 0, "2G": 2_000_000_000} {
		opts, err := parse(t, []string{"--policy-max-memory=" + arg}, nil)
		require.NoError(t, err, arg)
		budget, err := opts.policyMemoryBudget()
		require.NoError(t, err, arg)
		assert.Equal(t, want, budget, arg)
	}
	for _, arg := range []string{"lots", "-1Mi"} {
		_, err := parse(t, []string{"--policy-max-memory=" + arg}, nil)
		assert.ErrorContains(t, err, "--policy-max-memory must be auto, 0 or a quantity of bytes such as 768Mi, got \""+arg+"\"", arg)
	}
}
