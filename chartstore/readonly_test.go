package chartstore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A read-only Store, a generated controller's, never writes: it refuses before it
// reaches the API server (its Client is nil here).
func TestReadOnlyStoreNeverWrites(t *testing.T) {
	store := &Store{Namespace: "compositor-system", ReadOnly: true}
	archive := []byte("archive")
	assert.ErrorIs(t, store.Put(context.Background(), digestOf(archive), archive), ErrReadOnly)
	assert.ErrorIs(t, store.Prune(context.Background(), func(string) bool { return false }), ErrReadOnly)
}
