package conversion

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePointer(t *testing.T) {
	tests := map[string][]string{
		"/spec":         {"spec"},
		"/spec/a~1b/~0": {"spec", "a/b", "~"},
		"/spec/~01":     {"spec", "~1"},
		"/spec//x":      {"spec", "", "x"},
	}
	for p, want := range tests {
		got, err := parsePointer(p)
		require.NoError(t, err, p)
		assert.Equal(t, want, got, p)
		assert.Equal(t, p, pointerOf(got), "escaping gives the pointer back")
	}
	for _, bad := range []string{"", "spec", "/spec/~", "/spec/~2"} {
		_, err := parsePointer(bad)
		assert.Error(t, err, bad)
	}
}
