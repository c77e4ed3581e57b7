package webhooks

import (
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"github.com/compositor-dev/compositor/policies"
)

// reviewMemo keeps, for a moment, what /mutate learned of an admission request: the
// labels of its namespace, its owning definition and chart, and what the chart's schema
// says of its values. /validate, which the API server calls next for the same request
// (the same UID), takes it instead of looking them up and checking again. The object
// itself is always /validate's own: another mutating webhook may have changed it in
// between, so the schema's verdict is reused only for values deeply equal to those
// checked. An entry is used once, and only within schemaMemoTTL.
type reviewMemo struct {
	cache *lru.Cache // safe for concurrent use
	now   func() time.Time
}

// reviewMemoEntry keeps only what describe gives and checks, not the objects: a tenant's
// large objects are not held for the memo's life.
type reviewMemoEntry struct {
	known      policies.Request // who, where, and the namespace's labels, definition and chart
	spec       map[string]any   // the values the schema checked
	pinned     string           // the version the composition was pinned to
	violations []policies.Violation
	at         time.Time
}

const (
	// reviewMemoSize bounds the entries: the requests between /mutate and /validate.
	reviewMemoSize = 4096
	// reviewMemoTTL is how long an entry is good for: /validate follows /mutate within
	// the API server's webhook timeouts.
	reviewMemoTTL = 30 * time.Second
)

func newReviewMemo() *reviewMemo {
	return &reviewMemo{cache: lru.New(reviewMemoSize), now: time.Now}
}

// remember records what request uid's /mutate learned: r, with the chart of the version
// pinned, and the schema's violations of r's values.
func (m *reviewMemo) remember(uid types.UID, r *policies.Request, pinned string, violations []policies.Violation) {
	if m == nil || uid == "" || r.Chart == nil || r.ChartDigest == "" {
		return
	}
	known := policies.Request{
		Operation: r.Operation, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name,
		NamespaceLabels: r.NamespaceLabels, Definition: r.Definition, Chart: r.Chart, ChartDigest: r.ChartDigest,
		ClusterScoped: r.ClusterScoped,
	}
	m.cache.Add(uid, &reviewMemoEntry{known: known, spec: r.Spec(), pinned: pinned, violations: violations, at: m.now()})
}

// take returns what /mutate learned of request uid, once; nil when nothing, or when
// it is too old.
func (m *reviewMemo) take(uid types.UID) *reviewMemoEntry {
	if m == nil || uid == "" {
		return nil
	}
	v, ok := m.cache.Get(uid)
	if !ok {
		return nil
	}
	m.cache.Remove(uid) // one /validate per /mutate
	e := v.(*reviewMemoEntry)
	if m.now().Sub(e.at) > reviewMemoTTL {
		return nil
	}
	return e
}

// describe gives r, a request for a composition pinned to version pinned, what the
// entry knows of it: the namespace's labels, the definition and chart, and the schema's
// verdict when r's values are those checked. It reports false, and gives nothing, when
// the entry is of another kind, namespace, name, operation or pinned version (another
// mutating webhook may have moved the pin): what it gives depends only on those,
// whoever sent the request that made the entry.
func (e *reviewMemoEntry) describe(r *policies.Request, pinned string) bool {
	known := &e.known
	if known.Kind != r.Kind || known.Namespace != r.Namespace || known.Name != r.Name || known.Operation != r.Operation || e.pinned != pinned {
		return false
	}
	r.NamespaceLabels, r.Definition, r.Chart, r.ChartDigest = known.NamespaceLabels, known.Definition, known.Chart, known.ChartDigest
	r.ClusterScoped = known.ClusterScoped
	if sameJSON(e.spec, r.Spec()) {
		r.SchemaChecked, r.SchemaViolations = true, e.violations
	}
	return true
}

// sameJSON reports whether a and b, decoded JSON (maps, slices, strings, numbers,
// booleans and nulls), are deeply equal, as reflect.DeepEqual would say, at a fraction
// of its cost. Other types are left to reflect.DeepEqual.
func sameJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) || (a == nil) != (b == nil) {
			return false
		}
		for k, av := range a {
			bv, ok := b[k]
			if !ok || !sameJSON(av, bv) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) || (a == nil) != (b == nil) {
			return false
		}
		for i := range a {
			if !sameJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	case string, bool, int64, float64, nil:
		return a == b
	default:
		return reflect.DeepEqual(a, b)
	}
}
