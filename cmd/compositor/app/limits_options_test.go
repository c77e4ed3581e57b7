package app

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies"
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
