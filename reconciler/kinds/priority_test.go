package kinds

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// Issue 53: a composition someone creates or changes is reconciled before a backlog
// nobody waits for — what a version's informer lists when it starts, and resyncs —
// which goes to the priority queue at low priority. A backlogged composition that
// someone then changes moves up with the change.
func TestPeopleComeBeforeTheBacklog(t *testing.T) {
	q := priorityqueue.New[request]("test")
	defer q.ShutDown()
	k := &Runtime{queue: q}
	key := VersionKey{Namespace: "defs", Plural: "apps", Version: "v1"}
	h := k.handler(key, false)
	obj := func(namespace, name, resourceVersion string, generation int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("composition.krateo.io/v1")
		u.SetKind("App")
		u.SetNamespace(namespace)
		u.SetName(name)
		u.SetResourceVersion(resourceVersion)
		u.SetGeneration(generation)
		return u
	}
	for i := range 50 {
		h.OnAdd(obj("bulk", fmt.Sprint("listed-", i), "1", 1), true)
	}
	h.OnUpdate(obj("bulk", "listed-7", "1", 1), obj("bulk", "listed-7", "1", 1)) // a resync
	h.OnAdd(obj("team", "created", "2", 1), false)
	h.OnUpdate(obj("bulk", "listed-9", "1", 1), obj("bulk", "listed-9", "3", 2)) // someone's change

	var first []string
	for range 3 {
		item, priority, shutdown := q.GetWithPriority()
		require.False(t, shutdown)
		first = append(first, fmt.Sprintf("%s binding=%t priority=%d", item.NamespacedName, item.Binding, priority))
		q.Done(item)
	}
	assert.ElementsMatch(t, []string{
		"team/created binding=false priority=0",
		"team/ binding=true priority=0",
		"bulk/listed-9 binding=false priority=0",
	}, first, "what people did, before the 50 listed compositions and their namespace's binding")
	item, priority, _ := q.GetWithPriority()
	assert.Negative(t, priority, "then the backlog: %v", item)
}
