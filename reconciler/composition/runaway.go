package composition

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// firstRunawayRetry is how soon a composition whose render was first stopped at the
// deadline is tried again. A render stopped only because the machine was busy installs
// at that try; each further stop of the same spec doubles the wait, up to retryRunaway,
// so a template that never ends costs a deadline's CPU at ever longer intervals.
const firstRunawayRetry = 5 * time.Second

// runaways counts, per composition, the renders of its current spec stopped at the
// deadline in a row, and keeps the last refusal. A composition leaves it once it
// installs, once it is gone, and when its spec changes (a new generation starts from
// firstRunawayRetry). A try whose render could not start (its lane's workers busy)
// learns nothing: the refusal stands, and the count is kept.
type runaways struct {
	mu      sync.Mutex
	stopped map[types.NamespacedName]runaway
}

type runaway struct {
	uid        types.UID
	generation int64
	stops      int
	// refusal is what the last stop was refused for, and wait how long it waited.
	refusal *GateError
	wait    time.Duration
}

// retryAfter records one more stop of obj's render, refused as refusal, and says when
// to try again.
func (r *runaways) retryAfter(obj client.Object, refusal *GateError) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped == nil {
		r.stopped = map[types.NamespacedName]runaway{}
	}
	key := client.ObjectKeyFromObject(obj)
	last := r.stopped[key]
	if last.uid != obj.GetUID() || last.generation != obj.GetGeneration() {
		last = runaway{uid: obj.GetUID(), generation: obj.GetGeneration()}
	}
	wait := retryRunaway
	if last.stops < 16 {
		wait = min(firstRunawayRetry<<last.stops, retryRunaway)
	}
	last.stops++
	last.refusal, last.wait = refusal, wait
	r.stopped[key] = last
	return wait
}

// standing is the refusal of obj's current spec and how long its retry waits, when its
// last render was stopped at the deadline.
func (r *runaways) standing(obj client.Object) (*GateError, time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.stopped[client.ObjectKeyFromObject(obj)]
	if !ok || last.uid != obj.GetUID() || last.generation != obj.GetGeneration() {
		return nil, 0, false
	}
	return last.refusal, last.wait, true
}

// forget drops what is counted of the composition key.
func (r *runaways) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.stopped, key)
}
