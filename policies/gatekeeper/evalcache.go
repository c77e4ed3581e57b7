package gatekeeper

import (
	"context"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// An evaluation of a template, or of a batch, keeps the values of the rules and
// functions it evaluates (OPA's virtual cache) so that each is computed once. OPA's own
// cache is a tree with a hash map at every node: caching data.__c7.violation makes a
// node and a map for __c7, another node for violation, and so on for each helper rule
// and each function call (whose arguments are levels of their own). In a batch, where
// every constraint has a package of its own, that tree was about a fifth of the bytes
// an admission write allocated, and their garbage collection a good part of its time.
//
// refCache holds the same entries flat: one map per frame from a hash of the whole
// reference to its entries, the entries and the copies of their references taken from
// slabs, and the whole reused from one evaluation to the next. It answers as OPA's
// does (topdown.VirtualCache): a value put for a reference is what Get returns for an
// equal reference (element by element, with ast.Term.Equal, as OPA's tree compares
// each level); nil put marks the reference undefined, and that stays, as in OPA's tree,
// even if a value is put after; Push starts an empty frame (a `with`), Pop drops it.
type refCache struct {
	frames []map[uint64]*refEntry // the active frame last
	spare  []map[uint64]*refEntry // popped frames, emptied, for the next Push
	// entries and terms are the current slabs: an entry or a reference taken from
	// them is never moved, since a full slab is replaced rather than grown.
	entries []refEntry
	terms   []*ast.Term
}

type refEntry struct {
	ref       ast.Ref
	value     *ast.Term
	undefined bool
	next      *refEntry // with the same hash
}

const (
	entrySlab = 64
	termSlab  = 256
	// A frame that grew past keptFrame entries is not kept for reuse: one evaluation
	// that cached a great many values should not hold their map's memory for good.
	keptFrame = 4096
)

var _ topdown.VirtualCache = (*refCache)(nil)

var refCaches = sync.Pool{New: func() any {
	return &refCache{frames: []map[uint64]*refEntry{make(map[uint64]*refEntry, 64)}}
}}

// refHash hashes a reference by its terms, in order (ast.Ref.Hash is their sum, which
// every permutation shares).
func refHash(ref ast.Ref) uint64 {
	h := uint64(14695981039346656037)
	for _, t := range ref {
		h = (h ^ uint64(t.Value.Hash())) * 1099511628211
	}
	return h
}

func sameRef(a, b ast.Ref) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func (c *refCache) Push() {
	var m map[uint64]*refEntry
	if n := len(c.spare); n > 0 {
		m, c.spare = c.spare[n-1], c.spare[:n-1]
	} else {
		m = make(map[uint64]*refEntry)
	}
	c.frames = append(c.frames, m)
}

func (c *refCache) Pop() {
	n := len(c.frames)
	m := c.frames[n-1]
	if n == 1 {
		// OPA pops only what it pushed; the first frame is emptied rather than lost.
		clear(m)
		return
	}
	c.frames[n-1] = nil
	c.frames = c.frames[:n-1]
	if len(m) <= keptFrame {
		clear(m)
		c.spare = append(c.spare, m)
	}
}

func (c *refCache) find(ref ast.Ref) (*refEntry, uint64) {
	h := refHash(ref)
	for e := c.frames[len(c.frames)-1][h]; e != nil; e = e.next {
		if sameRef(e.ref, ref) {
			return e, h
		}
	}
	return nil, h
}

func (c *refCache) Get(ref ast.Ref) (*ast.Term, bool) {
	e, _ := c.find(ref)
	switch {
	case e == nil:
		return nil, false
	case e.undefined:
		return nil, true
	}
	return e.value, false
}

func (c *refCache) Put(ref ast.Ref, value *ast.Term) {
	e, h := c.find(ref)
	if e == nil {
		e = c.newEntry(ref)
		frame := c.frames[len(c.frames)-1]
		e.next = frame[h]
		frame[h] = e
	}
	if value != nil {
		e.value = value
	} else {
		e.undefined = true
	}
}

// newEntry is an entry for a copy of ref: OPA hands over references whose slices it
// reuses (a function call's key, a rule's plugged reference), as its tree keeps their
// terms rather than their slices.
func (c *refCache) newEntry(ref ast.Ref) *refEntry {
	if len(c.entries) == cap(c.entries) {
		c.entries = make([]refEntry, 0, entrySlab)
	}
	if cap(c.terms)-len(c.terms) < len(ref) {
		c.terms = make([]*ast.Term, 0, max(termSlab, len(ref)))
	}
	n := len(c.terms)
	c.terms = append(c.terms, ref...)
	c.entries = append(c.entries, refEntry{ref: c.terms[n : n+len(ref) : n+len(ref)]})
	return &c.entries[len(c.entries)-1]
}

// Keys lists the references of the active frame that hold a value.
func (c *refCache) Keys() []ast.Ref {
	var out []ast.Ref
	for _, e := range c.frames[len(c.frames)-1] {
		for ; e != nil; e = e.next {
			if e.value != nil {
				out = append(out, e.ref)
			}
		}
	}
	return out
}

// reset empties the cache for another evaluation, letting go of every value.
func (c *refCache) reset() {
	for len(c.frames) > 1 {
		c.Pop()
	}
	if len(c.frames[0]) > keptFrame {
		c.frames[0] = make(map[uint64]*refEntry, 64)
	} else {
		clear(c.frames[0])
	}
	clear(c.entries)
	c.entries = c.entries[:0]
	clear(c.terms)
	c.terms = c.terms[:0]
}

// evalQuery evaluates a prepared query of a template or a batch on input, with the
// options every such evaluation takes: no metrics, a refCache, and cancellation when
// ctx ends by a callback (context.AfterFunc) rather than by the goroutine OPA starts
// for each evaluation otherwise. opts are added.
func evalQuery(ctx context.Context, q rego.PreparedEvalQuery, input ast.Value, opts ...rego.EvalOption) (rego.ResultSet, error) {
	vc := refCaches.Get().(*refCache)
	defer func() {
		vc.reset()
		refCaches.Put(vc)
	}()
	cancel := topdown.NewCancel()
	stop := context.AfterFunc(ctx, cancel.Cancel)
	defer stop()
	opts = append(opts,
		rego.EvalParsedInput(input),
		rego.EvalMetrics(metrics.NoOp()),
		rego.EvalVirtualCache(vc),
		rego.EvalExternalCancel(cancel))
	return q.Eval(ctx, opts...)
}
