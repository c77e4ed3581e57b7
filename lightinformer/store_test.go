package lightinformer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

func object(name, resourceVersion string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "team", Name: name, ResourceVersion: resourceVersion,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
}

// TestRelistsAndResyncsTellWhatChanged: the first list is told as adds in the initial
// list; a relist tells what it added, kept (as updates, with the old object) and
// dropped (as a deletion of unknown final state); a resync replays every object; and
// the store never keeps managed fields.
func TestRelistsAndResyncsTellWhatChanged(t *testing.T) {
	var got []string
	handler := toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			got = append(got, "add "+obj.(metav1.Object).GetName()+map[bool]string{true: " (initial)"}[initial])
		},
		UpdateFunc: func(old, obj any) {
			got = append(got, "update "+obj.(metav1.Object).GetName()+" from "+old.(metav1.Object).GetResourceVersion())
		},
		DeleteFunc: func(obj any) {
			tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown)
			if ok {
				got = append(got, "delete "+tombstone.Key+" (unknown)")
				return
			}
			got = append(got, "delete "+obj.(metav1.Object).GetName())
		},
	}
	store := &tellingStore{
		indexer: toolscache.NewIndexer(toolscache.DeletionHandlingMetaNamespaceKeyFunc, toolscache.Indexers{}),
		handler: handler,
	}
	assert.False(t, store.synced.Load())

	require.NoError(t, store.Replace([]any{object("a", "1"), object("b", "1")}, "1"))
	assert.True(t, store.synced.Load())
	assert.ElementsMatch(t, []string{"add a (initial)", "add b (initial)"}, got)

	got = nil
	require.NoError(t, store.Add(object("c", "2")))
	require.NoError(t, store.Update(object("c", "3")))
	require.NoError(t, store.Delete(object("c", "3")))
	assert.Equal(t, []string{"add c", "update c from 2", "delete c"}, got)

	got = nil
	require.NoError(t, store.Replace([]any{object("b", "4"), object("d", "4")}, "4"))
	assert.ElementsMatch(t, []string{"update b from 1", "add d", "delete team/a (unknown)"}, got)

	got = nil
	require.NoError(t, store.Resync())
	assert.ElementsMatch(t, []string{"update b from 4", "update d from 4"}, got)

	keys := store.indexer.ListKeys()
	assert.ElementsMatch(t, []string{"team/b", "team/d"}, keys)
	for _, obj := range store.indexer.List() {
		assert.Empty(t, obj.(metav1.Object).GetManagedFields())
	}
}
