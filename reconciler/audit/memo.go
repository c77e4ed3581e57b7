package audit

import (
	"crypto/sha256"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/compositor-dev/compositor/policies"
)

// compositionsAudited counts the compositions each pass looked at, by whether they
// were judged again (result="judged", which renders their chart for rendered policies
// and constraints) or found as the previous pass left them (result="unchanged", which
// renders and evaluates nothing).
var compositionsAudited = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "compositor_audit_compositions_total",
	Help: "Compositions the audit looked at, by result: judged (evaluated, and rendered where policies need it) or unchanged (the previous pass's verdict, nothing rendered)",
}, []string{"result"})

func init() {
	ctrlmetrics.Registry.MustRegister(compositionsAudited)
}

// verdicts remembers, per composition, what the audit found and everything it found it
// from, so that a pass over compositions nothing changed renders and evaluates nothing:
// the chart, the values and the rest of the object, the namespace's labels, the
// definition that judged it and the policies and constraints in force. Only the
// audit's own findings are kept, never anything a tenant wrote: the key is a digest of
// the inputs, and a composition whose inputs differ in any way is judged again.
//
// It holds one entry per composition that exists: a pass forgets those it did not see.
type verdicts struct {
	mu      sync.Mutex
	entries map[types.UID]verdict
}

// failedVerdictTTL is how long a verdict with a failure in it stands: a render or
// evaluation that did not answer (a deadline, a busy sandbox) is tried again after it,
// even if nothing changed. A template that loops costs its lane one deadline per TTL,
// not one per pass.
const failedVerdictTTL = 30 * time.Minute

type verdict struct {
	inputs [sha256.Size]byte
	engine policies.Version
	found  []policies.Violation
	// expires, when not zero, is when the verdict stops standing.
	expires time.Time
}

// recall returns what was found for uid under inputs and engine, if it still stands
// at now.
func (m *verdicts) recall(uid types.UID, inputs [sha256.Size]byte, engine policies.Version, now time.Time) ([]policies.Violation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.entries[uid]
	if !ok || v.inputs != inputs || v.engine != engine || (!v.expires.IsZero() && !now.Before(v.expires)) {
		return nil, false
	}
	return v.found, true
}

// keep records what was found for uid.
func (m *verdicts) keep(uid types.UID, v verdict) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil {
		m.entries = map[types.UID]verdict{}
	}
	m.entries[uid] = v
}

// forget drops every composition a complete pass did not see.
func (m *verdicts) forget(seen map[types.UID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	maps.DeleteFunc(m.entries, func(uid types.UID, _ verdict) bool { return !seen[uid] })
}

// inputsOf digests what a composition is judged from: the object as stored, less
// the fields every write of it changes (its resourceVersion and managedFields); the
// labels of its namespace; and its definition's chart, name and annotations.
func inputsOf(obj map[string]any, namespaceLabels map[string]string, r *policies.Request, capabilities string) ([sha256.Size]byte, bool) {
	h := sha256.New()
	object := maps.Clone(obj)
	if md, ok := obj["metadata"].(map[string]any); ok {
		md = maps.Clone(md)
		delete(md, "resourceVersion")
		delete(md, "managedFields")
		object["metadata"] = md
	}
	// encoding/json writes map keys sorted: equal objects give equal bytes.
	enc := json.NewEncoder(h)
	labelKeys := slices.Sorted(maps.Keys(namespaceLabels))
	labels := make([]string, 0, 2*len(labelKeys))
	for _, k := range labelKeys {
		labels = append(labels, k, namespaceLabels[k])
	}
	clusterScoped := make([]string, 0, len(r.ClusterScoped))
	for gk := range r.ClusterScoped {
		clusterScoped = append(clusterScoped, gk.String())
	}
	slices.Sort(clusterScoped)
	for _, part := range []any{object, labels, r.Definition, r.ChartDigest, r.Resource, r.Installed, clusterScoped, capabilities} {
		if err := enc.Encode(part); err != nil {
			return [sha256.Size]byte{}, false
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, true
}
