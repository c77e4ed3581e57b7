package policies

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/builtins"
)

// Limits bound what admission accepts before it does any expensive work (the schema
// check, rendering, the policies), so that the cost of judging one write is bounded by
// its size, never by its shape. The defaults are far above real charts' values: the
// deepest values of the public charts Compositor was tried with (Bitnami's among them)
// are about ten levels deep, their largest values.yaml about 4,000 keys, and a string
// of 256 KiB is the whole of what Kubernetes allows in an object's annotations.
type Limits struct {
	// MaxDepth is the most keys and indexes in the path of any field of an object
	// (spec.a.b[0].c is 5 deep).
	MaxDepth int
	// MaxKeys is the most keys and array elements in an object, all levels together.
	MaxKeys int
	// MaxStringBytes is the longest string (value or key) of an object, in bytes.
	MaxStringBytes int
	// MaxRenderedBytes is the most bytes a chart may render to for one composition,
	// every manifest together; rendering stops at it.
	MaxRenderedBytes int
}

// Default limits; see Limits for why.
const (
	DefaultMaxDepth         = 64
	DefaultMaxKeys          = 10_000
	DefaultMaxStringBytes   = 256 << 10
	DefaultMaxRenderedBytes = 8 << 20
	// DefaultMaxRangeElements bounds numbers.range and numbers.range_step in policies.
	DefaultMaxRangeElements = 1 << 20
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{MaxDepth: DefaultMaxDepth, MaxKeys: DefaultMaxKeys, MaxStringBytes: DefaultMaxStringBytes, MaxRenderedBytes: DefaultMaxRenderedBytes}
}

// Flags naming each limit, for messages.
const (
	FlagMaxDepth         = "--max-value-depth"
	FlagMaxKeys          = "--max-value-keys"
	FlagMaxStringBytes   = "--max-string-bytes"
	FlagMaxRenderedBytes = "--max-rendered-bytes"
	FlagMaxRangeElements = "--policy-max-range"
)

// Reasons of a LimitError, as counted on /metrics.
const (
	LimitDepth    = "depth"
	LimitKeys     = "keys"
	LimitString   = "string"
	LimitRendered = "rendered"
)

// Validate reports every limit that is not positive.
func (l Limits) Validate() error {
	var errs []error
	for _, c := range []struct {
		flag string
		v    int
	}{{FlagMaxDepth, l.MaxDepth}, {FlagMaxKeys, l.MaxKeys}, {FlagMaxStringBytes, l.MaxStringBytes}, {FlagMaxRenderedBytes, l.MaxRenderedBytes}} {
		if c.v < 1 {
			errs = append(errs, fmt.Errorf("%s must be at least 1, got %d", c.flag, c.v))
		}
	}
	return errors.Join(errs...)
}

// LimitError is an object refused for one bound. Its message names the field, the
// value and the limit with its flag.
type LimitError struct {
	// Reason is LimitDepth, LimitKeys, LimitString or LimitRendered.
	Reason string
	// Field is the path of the field, shortened when it is long.
	Field string
	// Value is the measure of the object (levels, keys, bytes); Limit the bound.
	Value, Limit int
}

func (e *LimitError) Error() string {
	switch e.Reason {
	case LimitDepth:
		return fmt.Sprintf("%s: nested %d levels deep, more than the limit of %d (%s)", e.Field, e.Value, e.Limit, FlagMaxDepth)
	case LimitKeys:
		return fmt.Sprintf("%s: the object has %d keys and elements in all, more than the limit of %d (%s); the limit was passed here", e.Field, e.Value, e.Limit, FlagMaxKeys)
	case LimitString:
		return fmt.Sprintf("%s: a string of %d bytes, more than the limit of %d (%s)", e.Field, e.Value, e.Limit, FlagMaxStringBytes)
	case LimitRendered:
		return fmt.Sprintf("%s: the chart renders to more than %d bytes, the limit (%s)", e.Field, e.Limit, FlagMaxRenderedBytes)
	}
	return fmt.Sprintf("%s: %d, more than the limit of %d", e.Field, e.Value, e.Limit)
}

// shownSegments is how many leading segments of a long path a message shows.
const shownSegments = 3

// CheckObject measures obj (every field but status, which only Compositor writes, and
// metadata.managedFields, which the API server writes and which mirrors every field
// written: counting it would halve the limits) and
// returns one LimitError per bound it breaks, depth first, then keys, then strings;
// nil when it is within l. The walk is linear in the object and allocates only for a
// refusal. A zero limit is no limit.
func (l Limits) CheckObject(obj map[string]any) []*LimitError {
	w := walker{limits: l}
	for k, v := range obj {
		if k == "status" {
			continue
		}
		w.path = append(w.path, pathSeg{key: k})
		w.key(k)
		w.walk(v)
		w.path = w.path[:0]
	}
	var out []*LimitError
	if w.deepest != nil {
		out = append(out, &LimitError{Reason: LimitDepth, Field: w.deepestField, Value: w.maxDepth, Limit: l.MaxDepth})
	}
	if w.keysAt != "" {
		out = append(out, &LimitError{Reason: LimitKeys, Field: w.keysAt, Value: w.keys, Limit: l.MaxKeys})
	}
	if w.longAt != "" {
		out = append(out, &LimitError{Reason: LimitString, Field: w.longAt, Value: w.longest, Limit: l.MaxStringBytes})
	}
	return out
}

type pathSeg struct {
	key   string
	index int
	isKey bool
}

type walker struct {
	limits Limits
	path   []pathSeg

	keys     int
	keysAt   string
	maxDepth int
	// deepest is non-nil once the depth limit is passed.
	deepest      *struct{}
	deepestField string
	longest      int
	longAt       string
}

func (w *walker) key(k string) {
	w.keys++
	if w.limits.MaxKeys > 0 && w.keys == w.limits.MaxKeys+1 {
		w.keysAt = w.field(false)
	}
	w.str(len(k), true)
}

func (w *walker) str(n int, isKey bool) {
	if w.limits.MaxStringBytes > 0 && n > w.limits.MaxStringBytes && n > w.longest {
		w.longest = n
		w.longAt = w.field(false)
		if isKey {
			w.longAt += " (a key)"
		}
	}
}

func (w *walker) walk(v any) {
	depth := len(w.path)
	if depth > w.maxDepth {
		w.maxDepth = depth
		if w.limits.MaxDepth > 0 && depth > w.limits.MaxDepth {
			w.deepest = &struct{}{}
			w.deepestField = w.field(true)
		}
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if depth == 1 && k == "managedFields" && w.path[0].key == "metadata" {
				continue
			}
			w.path = append(w.path, pathSeg{key: k, isKey: true})
			w.key(k)
			w.walk(e)
			w.path = w.path[:len(w.path)-1]
		}
	case []any:
		for i, e := range x {
			w.path = append(w.path, pathSeg{index: i})
			w.keys++
			if w.limits.MaxKeys > 0 && w.keys == w.limits.MaxKeys+1 {
				w.keysAt = w.field(false)
			}
			w.walk(e)
			w.path = w.path[:len(w.path)-1]
		}
	case string:
		w.str(len(x), false)
	}
}

// field formats the current path: in full when short, else its first segments and
// the number of levels, e.g. spec.nest.nest.…(9001 levels). short shortens any path
// longer than shownSegments; otherwise only paths over 16 segments are shortened.
func (w *walker) field(short bool) string {
	n := len(w.path)
	shown := n
	if (short && n > shownSegments) || n > 16 {
		shown = shownSegments
	}
	var b strings.Builder
	for i, s := range w.path[:shown] {
		switch {
		case i == 0 || s.isKey:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		default:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
		}
	}
	if shown < n {
		fmt.Fprintf(&b, ".…(%d levels)", n)
	}
	return b.String()
}

// CheckRendered refuses rendered manifests (file name to content, as Helm's engine
// returns them) whose total size passes MaxRenderedBytes. Render must call it on the
// engine's output before parsing a single manifest.
func (l Limits) CheckRendered(chartName string, files map[string]string) error {
	if l.MaxRenderedBytes <= 0 {
		return nil
	}
	total := 0
	for _, f := range files {
		total += len(f)
		if total > l.MaxRenderedBytes {
			return &LimitError{Reason: LimitRendered, Field: "chart " + chartName, Value: total, Limit: l.MaxRenderedBytes}
		}
	}
	return nil
}

// maxRangeElements bounds the arrays numbers.range and numbers.range_step may build in
// a policy; see SetMaxRangeElements.
var maxRangeElements atomic.Int64

// SetMaxRangeElements sets the most elements numbers.range and numbers.range_step may
// return in any policy of the process (DefaultMaxRangeElements until set; n < 1 is
// taken as the default). A bigger range is an evaluation error naming the limit, raised
// before a single element is built: within a 2 s deadline OPA would otherwise build
// some tens of millions of numbers, about 450 MB, before it noticed the deadline.
func SetMaxRangeElements(n int) {
	if n < 1 {
		n = DefaultMaxRangeElements
	}
	maxRangeElements.Store(int64(n))
}

// MaxRangeElements is the bound SetMaxRangeElements set.
func MaxRangeElements() int { return int(maxRangeElements.Load()) }

func init() {
	SetMaxRangeElements(DefaultMaxRangeElements)
	// OPA looks its own built-ins up before any function given to rego, so the bound
	// replaces them process-wide; both keep OPA's implementation below the bound.
	for _, b := range []*ast.Builtin{ast.NumbersRange, ast.NumbersRangeStep} {
		inner := topdown.GetBuiltin(b.Name)
		if inner == nil {
			panic("OPA has no built-in " + b.Name)
		}
		topdown.RegisterBuiltinFunc(b.Name, boundedRange(b.Name, b.Decl.Arity(), inner))
	}
}

// boundedRange refuses a range of more elements than MaxRangeElements, then calls inner.
// arity is 2 (from, to) or 3 (and step); OPA may pass the output term after them.
func boundedRange(name string, arity int, inner topdown.BuiltinFunc) topdown.BuiltinFunc {
	return func(bctx topdown.BuiltinContext, operands []*ast.Term, iter func(*ast.Term) error) error {
		if len(operands) >= arity {
			x, errX := builtins.BigIntOperand(operands[0].Value, 1)
			y, errY := builtins.BigIntOperand(operands[1].Value, 2)
			step := big.NewInt(1)
			var errS error
			if arity == 3 {
				step, errS = builtins.BigIntOperand(operands[2].Value, 3)
			}
			if errX == nil && errY == nil && errS == nil && step.Sign() > 0 {
				n := new(big.Int).Sub(y, x)
				n.Abs(n)
				n.Quo(n, step)
				n.Add(n, big.NewInt(1))
				if limit := big.NewInt(maxRangeElements.Load()); n.Cmp(limit) > 0 {
					// A Halt, not an error: OPA would make an erring built-in undefined,
					// and a deny rule that is undefined admits.
					return topdown.Halt{Err: &topdown.Error{Code: topdown.BuiltinErr, Location: bctx.Location,
						Message: fmt.Sprintf("%s: the range has %s elements, more than the limit of %s (%s)", name, n, limit, FlagMaxRangeElements)}}
				}
			}
		}
		return inner(bctx, operands, iter)
	}
}
