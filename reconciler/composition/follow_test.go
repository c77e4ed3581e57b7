package composition

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/compositor-dev/compositor/api/vocab"
)

func TestPlacementProgressedPassesEntriesAndFinalizers(t *testing.T) {
	old := &unstructured.Unstructured{Object: map[string]interface{}{"metadata": map[string]interface{}{"name": "x"}}}
	entry := old.DeepCopy()
	setClusters(entry, map[string]ClusterStatus{"eu-1": {Name: "eu-1"}})
	finalized := old.DeepCopy()
	finalized.SetFinalizers([]string{vocab.CompositionFinalizer})
	conditions := old.DeepCopy()
	_ = unstructured.SetNestedField(conditions.Object, int64(2), "status", "observedGeneration")
	reworded := entry.DeepCopy()
	setClusters(reworded, map[string]ClusterStatus{"eu-1": {Name: "eu-1", Message: "dial tcp 10.0.0.1:6443: i/o timeout"}})
	p := PlacementProgressed{}
	assert.True(t, p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: entry}))
	assert.True(t, p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: finalized}))
	assert.False(t, p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: conditions}), "the leader's own conditions wake nobody")
	assert.False(t, p.Update(event.UpdateEvent{ObjectOld: entry, ObjectNew: reworded}), "a message alone wakes nobody")
}
