package policies

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"math"
	"slices"
	"sync"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// DefaultRenderMemoBytes bounds what the engine remembers of its renders.
const DefaultRenderMemoBytes = 16 << 20

// renderMemo remembers what this process's admissions rendered, so that an update's
// old objects need not be rendered a second time: the old version of a composition is,
// most often, the one this process admitted last. It is this process's own record:
// nothing a tenant writes reaches it but through a render, keyed by a digest of every
// input of that render. Least recently used renders go first once their cost (encoded
// size and memoEntryCost each) passes the budget; a miss costs what no memo costs, a
// render.
//
// It holds each render as JSON, so that what it hands out is a copy no reader shares.
type renderMemo struct {
	budget int

	mu      sync.Mutex
	used    int
	recent  *list.List // of *memoEntry, most recently used first
	entries map[renderKey]*list.Element
}

type renderKey [sha256.Size]byte

// memoEntryCost is what an entry costs besides its encoding: its key, list element
// and map slot, rounded up. Counted, it bounds the entries too: renders of nothing
// ("[]") are not free.
const memoEntryCost = 512

type memoEntry struct {
	key     renderKey
	encoded []byte
}

// newRenderMemo remembers up to budget bytes of encoded renders; nil when budget is
// not positive, which remembers nothing.
func newRenderMemo(budget int) *renderMemo {
	if budget <= 0 {
		return nil
	}
	return &renderMemo{budget: budget, recent: list.New(), entries: map[renderKey]*list.Element{}}
}

// keyOf names the render of ch (by its content digest) with spec and opts. ok is false
// when the chart has no digest (its content cannot be told from another's) or the
// render looks objects up (their answers are not inputs the key can hold).
func keyOf(digest string, spec map[string]any, opts RenderOptions) (key renderKey, ok bool) {
	if digest == "" || opts.Lookup != nil {
		return key, false
	}
	h := sha256.New()
	writeString(h, digest)
	writeString(h, opts.ReleaseName)
	writeString(h, opts.Namespace)
	if opts.IsUpgrade {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	binary.Write(h, binary.BigEndian, int64(opts.MaxRenderedBytes)) //nolint:errcheck // a hash never fails
	binary.Write(h, binary.BigEndian, int64(max(1, opts.Revision))) //nolint:errcheck // a hash never fails
	if c := opts.Capabilities; c != nil {
		writeString(h, c.KubeVersion.Version)
		writeString(h, c.KubeVersion.Major)
		writeString(h, c.KubeVersion.Minor)
		writeString(h, c.HelmVersion.Version)
		binary.Write(h, binary.BigEndian, int64(len(c.APIVersions))) //nolint:errcheck // a hash never fails
		for _, v := range c.APIVersions {
			writeString(h, v)
		}
	} else {
		writeString(h, "")
	}
	if err := writeValue(h, spec); err != nil {
		return key, false
	}
	h.Sum(key[:0])
	return key, true
}

// writeValue writes v to h with its type, so that values a template can tell apart
// (1 and 1.0, "1" and 1, {} and null) never share a key. Map keys go in order.
func writeValue(h hash.Hash, v any) error {
	var scratch [9]byte
	tagged := func(tag byte, n uint64) {
		scratch[0] = tag
		binary.BigEndian.PutUint64(scratch[1:], n)
		h.Write(scratch[:])
	}
	switch v := v.(type) {
	case nil:
		h.Write([]byte{'z'})
	case bool:
		if v {
			h.Write([]byte{'t'})
		} else {
			h.Write([]byte{'f'})
		}
	case string:
		h.Write([]byte{'s'})
		writeString(h, v)
	case int64:
		tagged('i', uint64(v))
	case int:
		tagged('i', uint64(int64(v)))
	case float64:
		tagged('d', math.Float64bits(v))
	case json.Number:
		h.Write([]byte{'n'})
		writeString(h, string(v))
	case []any:
		tagged('a', uint64(len(v)))
		for _, e := range v {
			if err := writeValue(h, e); err != nil {
				return err
			}
		}
	case map[string]any:
		tagged('m', uint64(len(v)))
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			writeString(h, k)
			if err := writeValue(h, v[k]); err != nil {
				return err
			}
		}
	default:
		// Not what a decoded composition holds; such values are not remembered.
		return fmt.Errorf("a value of type %T", v)
	}
	return nil
}

// writeString writes s with its length, so that no two sequences of strings run together.
func writeString(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// remember keeps objs as the render named key. A render that costs more than an eighth
// of the budget is not kept: it would push out many others.
func (m *renderMemo) remember(key renderKey, objs []RenderedObject) {
	if m == nil {
		return
	}
	m.mu.Lock()
	if el, ok := m.entries[key]; ok {
		m.recent.MoveToFront(el)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	encoded, err := json.Marshal(objs)
	if err != nil || len(encoded)+memoEntryCost > m.budget/8 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[key]; ok {
		return // remembered meanwhile
	}
	m.entries[key] = m.recent.PushFront(&memoEntry{key: key, encoded: encoded})
	m.used += len(encoded) + memoEntryCost
	for m.used > m.budget {
		oldest := m.recent.Back()
		e := m.recent.Remove(oldest).(*memoEntry)
		delete(m.entries, e.key)
		m.used -= len(e.encoded) + memoEntryCost
	}
}

// recall gives a copy of the render named key, if remembered. A number comes back
// int64 when whole, float64 otherwise, which Rego reads as the render's number.
func (m *renderMemo) recall(key renderKey) ([]RenderedObject, bool) {
	if m == nil {
		return nil, false
	}
	var encoded []byte
	m.mu.Lock()
	if el, ok := m.entries[key]; ok {
		m.recent.MoveToFront(el)
		encoded = el.Value.(*memoEntry).encoded // never written again
	}
	m.mu.Unlock()
	if encoded == nil {
		return nil, false
	}
	var objs []RenderedObject
	if err := utiljson.Unmarshal(encoded, &objs); err != nil {
		return nil, false
	}
	return objs, true
}
