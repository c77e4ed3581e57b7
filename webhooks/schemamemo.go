package webhooks

import (
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"github.com/compositor-dev/compositor/policies"
)

// schemaMemo keeps, for a moment, what /mutate's schema check found for an admission
// request, so that /validate, which the API server calls next for the same request
// (the same UID), does not check the same values again. An entry is used only for the
// same chart digest and values deeply equal to those checked: another mutating webhook
// may have changed the spec in between, and then the check runs again. What an entry
// holds is a pure function of the chart and the values, so an entry can never make a
// decision differ from a fresh check, whoever sent the request that made it.
type schemaMemo struct {
	cache *lru.Cache // safe for concurrent use
	now   func() time.Time
}

type schemaMemoEntry struct {
	digest     string
	spec       map[string]any
	violations []policies.Violation
	at         time.Time
}

const (
	// schemaMemoSize bounds the entries: the requests between /mutate and /validate.
	schemaMemoSize = 4096
	// schemaMemoTTL is how long an entry is good for: /validate follows /mutate within
	// the API server's webhook timeouts.
	schemaMemoTTL = 30 * time.Second
)

func newSchemaMemo() *schemaMemo {
	return &schemaMemo{cache: lru.New(schemaMemoSize), now: time.Now}
}

// remember records the schema check of request uid: spec against the chart of digest.
func (m *schemaMemo) remember(uid types.UID, digest string, spec map[string]any, violations []policies.Violation) {
	if m == nil || uid == "" || digest == "" {
		return
	}
	m.cache.Add(uid, schemaMemoEntry{digest: digest, spec: spec, violations: violations, at: m.now()})
}

// recall marks r's schema as checked when request uid's values were checked already
// against the same chart.
func (m *schemaMemo) recall(uid types.UID, r *policies.Request) bool {
	if m == nil || uid == "" || r.ChartDigest == "" {
		return false
	}
	v, ok := m.cache.Get(uid)
	if !ok {
		return false
	}
	m.cache.Remove(uid) // one /validate per /mutate
	e := v.(schemaMemoEntry)
	if e.digest != r.ChartDigest || m.now().Sub(e.at) > schemaMemoTTL || !reflect.DeepEqual(e.spec, r.Spec()) {
		return false
	}
	r.SchemaChecked, r.SchemaViolations = true, e.violations
	return true
}
