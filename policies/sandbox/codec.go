package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"

	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies"
)

// The wire format between the parent and a worker: each message is a frame, a 4-byte
// big-endian length and that many bytes. Values (a composition's spec, a chart's
// values, rendered objects) are trees of nil, bool, int64, uint64, float64, string,
// []any and map[string]any, written with a type tag each, so that the worker sees
// exactly the types the parent has (an int64 stays an int64, an empty list stays an
// empty list: JSON and gob would not keep both).

// maxDepth bounds the nesting of a value on the wire, as encoding/json bounds it.
const maxDepth = 10000

// value tags.
const (
	tagNil byte = iota
	tagFalse
	tagTrue
	tagInt
	tagUint
	tagFloat
	tagString
	tagList
	tagMap
	tagNumber // json.Number
)

// request operations. opLookupAnswer is no request: it answers a worker's
// statusLookup question in the middle of a render.
const (
	opRender byte = 1 + iota
	opSchema
	opRenderFiles
	opLookupAnswer
)

// response statuses. statusLookup is no answer: the worker asks its parent to look an
// object up for the render it is making, and waits for opLookupAnswer.
const (
	statusOK byte = iota
	statusError
	statusNeedChart
	statusLookup
)

// error flags: the sentinel errors a worker's error matches.
const (
	flagRender = 1 << iota
	flagSchemaCompile
	flagRemoteRef
	flagNoChart
)

var sentinels = []struct {
	flag uint64
	err  error
}{
	{flagRender, policies.ErrRender},
	{flagSchemaCompile, policies.ErrSchemaCompile},
	{flagRemoteRef, policies.ErrRemoteRef},
	{flagNoChart, policies.ErrNoChart},
}

// request is one job for a worker. opts.Lookup does not cross the pipe: the worker
// is told whether there is one, and asks for each object (lookupQuestion).
type request struct {
	op     byte
	digest string
	chart  *chart.Chart // nil: the worker has it by digest
	spec   map[string]any
	opts   policies.RenderOptions
}

// response is a worker's answer, or (statusLookup) its question.
type response struct {
	status     byte
	errMsg     string
	errFlags   uint64
	limit      *policies.LimitError // the limit the error names, if any
	objects    []policies.RenderedObject
	files      map[string]string
	violations []policies.Violation
	question   lookupQuestion
}

// lookupQuestion is a template's lookup, asked of the parent.
type lookupQuestion struct{ apiVersion, kind, namespace, name string }

// lookupAnswer is the parent's answer: the object or list, nil when there is none, or
// the lookup's error.
type lookupAnswer struct {
	object map[string]any
	errMsg string
}

// workerError is an error the worker gave: its message, and the sentinels it matches.
type workerError struct {
	msg   string
	flags uint64
	limit *policies.LimitError
}

func (e *workerError) Error() string { return e.msg }

// Unwrap gives the limit the error names, for errors.As.
func (e *workerError) Unwrap() error {
	if e.limit == nil {
		return nil
	}
	return e.limit
}

func (e *workerError) Is(target error) bool {
	for _, s := range sentinels {
		if e.flags&s.flag != 0 && target == s.err {
			return true
		}
	}
	return false
}

func errorFlags(err error) uint64 {
	var f uint64
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			f |= s.flag
		}
	}
	return f
}

// encoder appends to b.
type encoder struct{ b []byte }

func (e *encoder) byte(x byte)      { e.b = append(e.b, x) }
func (e *encoder) uvarint(x uint64) { e.b = binary.AppendUvarint(e.b, x) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bytes(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *encoder) bool(x bool) {
	if x {
		e.byte(1)
	} else {
		e.byte(0)
	}
}

func (e *encoder) value(v any, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("a value nested deeper than %d levels cannot be sent to a sandbox worker", maxDepth)
	}
	switch x := v.(type) {
	case nil:
		e.byte(tagNil)
	case bool:
		if x {
			e.byte(tagTrue)
		} else {
			e.byte(tagFalse)
		}
	case string:
		e.byte(tagString)
		e.str(x)
	case int64:
		e.int(x)
	case int:
		e.int(int64(x))
	case int32:
		e.int(int64(x))
	case int16:
		e.int(int64(x))
	case int8:
		e.int(int64(x))
	case uint64:
		e.uint(x)
	case uint:
		e.uint(uint64(x))
	case uint32:
		e.uint(uint64(x))
	case uint16:
		e.uint(uint64(x))
	case uint8:
		e.uint(uint64(x))
	case float64:
		e.float(x)
	case float32:
		e.float(float64(x))
	case json.Number:
		e.byte(tagNumber)
		e.str(string(x))
	case []any:
		if x == nil {
			e.byte(tagNil)
			return nil
		}
		e.byte(tagList)
		e.uvarint(uint64(len(x)))
		for _, item := range x {
			if err := e.value(item, depth+1); err != nil {
				return err
			}
		}
	case map[string]any:
		if x == nil {
			e.byte(tagNil)
			return nil
		}
		e.byte(tagMap)
		e.uvarint(uint64(len(x)))
		for k, item := range x {
			e.str(k)
			if err := e.value(item, depth+1); err != nil {
				return err
			}
		}
	default:
		return e.reflectValue(reflect.ValueOf(v), depth)
	}
	return nil
}

// reflectValue writes lists and string-keyed maps of other types ([]string,
// map[string]string) as []any and map[string]any.
func (e *encoder) reflectValue(rv reflect.Value, depth int) error {
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			e.byte(tagNil)
			return nil
		}
		e.byte(tagList)
		e.uvarint(uint64(rv.Len()))
		for i := range rv.Len() {
			if err := e.value(rv.Index(i).Interface(), depth+1); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		if rv.IsNil() {
			e.byte(tagNil)
			return nil
		}
		e.byte(tagMap)
		e.uvarint(uint64(rv.Len()))
		it := rv.MapRange()
		for it.Next() {
			e.str(it.Key().String())
			if err := e.value(it.Value().Interface(), depth+1); err != nil {
				return err
			}
		}
		return nil
	case reflect.String:
		e.byte(tagString)
		e.str(rv.String())
		return nil
	}
	return fmt.Errorf("a value of type %s cannot be sent to a sandbox worker", rv.Type())
}

func (e *encoder) int(x int64) {
	e.byte(tagInt)
	e.b = binary.AppendVarint(e.b, x)
}

func (e *encoder) uint(x uint64) {
	e.byte(tagUint)
	e.uvarint(x)
}

func (e *encoder) float(x float64) {
	e.byte(tagFloat)
	e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(x))
}

// chart writes ch: metadata and lock as JSON, files, values, schema, dependencies.
func (e *encoder) chart(ch *chart.Chart, depth int) error {
	if depth > 100 {
		return errors.New("charts nested deeper than 100 levels cannot be sent to a sandbox worker")
	}
	for _, part := range []any{ch.Metadata, ch.Lock} {
		raw, err := json.Marshal(part)
		if err != nil {
			return err
		}
		e.bytes(raw)
	}
	for _, files := range [][]*chartcommon.File{ch.Templates, ch.Files} {
		e.uvarint(uint64(len(files)))
		for _, f := range files {
			if f == nil {
				f = &chartcommon.File{}
			}
			e.str(f.Name)
			e.bytes(f.Data)
		}
	}
	if err := e.value(ch.Values, 0); err != nil {
		return err
	}
	e.bool(ch.Schema != nil)
	e.bytes(ch.Schema)
	deps := ch.Dependencies()
	e.uvarint(uint64(len(deps)))
	for _, d := range deps {
		if err := e.chart(d, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (e *encoder) request(r *request) error {
	e.byte(r.op)
	e.str(r.digest)
	e.bool(r.chart != nil)
	if r.chart != nil {
		if err := e.chart(r.chart, 0); err != nil {
			return err
		}
	}
	var spec any
	if r.spec != nil {
		spec = r.spec
	}
	if err := e.value(spec, 0); err != nil {
		return err
	}
	e.str(r.opts.ReleaseName)
	e.str(r.opts.Namespace)
	e.bool(r.opts.IsUpgrade)
	e.uvarint(uint64(max(0, r.opts.MaxRenderedBytes)))
	e.uvarint(uint64(max(0, r.opts.Revision)))
	caps := r.opts.Capabilities
	e.bool(caps != nil)
	if caps != nil {
		e.str(caps.KubeVersion.Version)
		e.str(caps.KubeVersion.Major)
		e.str(caps.KubeVersion.Minor)
		e.uvarint(uint64(len(caps.APIVersions)))
		for _, v := range caps.APIVersions {
			e.str(v)
		}
	}
	e.bool(r.opts.Lookup != nil)
	return nil
}

func (e *encoder) lookupAnswer(a *lookupAnswer) error {
	e.byte(opLookupAnswer)
	e.str(a.errMsg)
	var obj any
	if a.object != nil {
		obj = a.object
	}
	return e.value(obj, 0)
}

func (e *encoder) response(op byte, r *response) error {
	e.byte(r.status)
	switch r.status {
	case statusError:
		e.str(r.errMsg)
		e.uvarint(r.errFlags)
		e.bool(r.limit != nil)
		if l := r.limit; l != nil {
			e.str(l.Reason)
			e.str(l.Field)
			e.b = binary.AppendVarint(e.b, int64(l.Value))
			e.b = binary.AppendVarint(e.b, int64(l.Limit))
		}
	case statusLookup:
		q := r.question
		for _, s := range []string{q.apiVersion, q.kind, q.namespace, q.name} {
			e.str(s)
		}
	case statusOK:
		if op == opRenderFiles {
			names := make([]string, 0, len(r.files))
			for name := range r.files {
				names = append(names, name)
			}
			sort.Strings(names)
			e.uvarint(uint64(len(names)))
			for _, name := range names {
				e.str(name)
				e.str(r.files[name])
			}
		} else if op == opRender {
			e.uvarint(uint64(len(r.objects)))
			for _, o := range r.objects {
				e.str(o.Template)
				var obj any
				if o.Object != nil {
					obj = o.Object
				}
				if err := e.value(obj, 0); err != nil {
					return err
				}
			}
		} else {
			e.uvarint(uint64(len(r.violations)))
			for _, v := range r.violations {
				for _, s := range []string{v.Path, v.Message, v.Source, v.Policy, v.ID, v.Object, string(v.Action)} {
					e.str(s)
				}
			}
		}
	}
	return nil
}

// errShort: a message ends before its content.
var errShort = errors.New("the message is cut short")

// decoder reads b; every length is checked against what is left, so garbage gives
// an error, never a panic nor a huge allocation.
type decoder struct {
	b   []byte
	off int
}

func (d *decoder) byte() (byte, error) {
	if d.off >= len(d.b) {
		return 0, errShort
	}
	x := d.b[d.off]
	d.off++
	return x, nil
}

func (d *decoder) uvarint() (uint64, error) {
	x, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		return 0, errors.New("a bad number")
	}
	d.off += n
	return x, nil
}

// count reads a number of items each at least one byte long.
func (d *decoder) count() (int, error) {
	n, err := d.uvarint()
	if err != nil {
		return 0, err
	}
	if n > uint64(len(d.b)-d.off) {
		return 0, errShort
	}
	return int(n), nil
}

func (d *decoder) rawBytes() ([]byte, error) {
	n, err := d.count()
	if err != nil {
		return nil, err
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p, nil
}

func (d *decoder) str() (string, error) {
	p, err := d.rawBytes()
	return string(p), err
}

func (d *decoder) bytes() ([]byte, error) {
	p, err := d.rawBytes()
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), p...), nil
}

func (d *decoder) bool() (bool, error) {
	b, err := d.byte()
	if err != nil {
		return false, err
	}
	if b > 1 {
		return false, fmt.Errorf("a bad boolean %d", b)
	}
	return b == 1, nil
}

func (d *decoder) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("a value nested deeper than %d levels", maxDepth)
	}
	tag, err := d.byte()
	if err != nil {
		return nil, err
	}
	switch tag {
	case tagNil:
		return nil, nil
	case tagFalse:
		return false, nil
	case tagTrue:
		return true, nil
	case tagInt:
		x, n := binary.Varint(d.b[d.off:])
		if n <= 0 {
			return nil, errors.New("a bad integer")
		}
		d.off += n
		return x, nil
	case tagUint:
		return d.uvarint()
	case tagFloat:
		if len(d.b)-d.off < 8 {
			return nil, errShort
		}
		x := math.Float64frombits(binary.LittleEndian.Uint64(d.b[d.off:]))
		d.off += 8
		return x, nil
	case tagString:
		return d.str()
	case tagNumber:
		s, err := d.str()
		return json.Number(s), err
	case tagList:
		n, err := d.count()
		if err != nil {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = d.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	case tagMap:
		n, err := d.count()
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, n)
		for range n {
			k, err := d.str()
			if err != nil {
				return nil, err
			}
			if out[k], err = d.value(depth + 1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("an unknown value tag %d", tag)
}

func (d *decoder) mapValue() (map[string]any, error) {
	v, err := d.value(0)
	if err != nil || v == nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a %T where a map belongs", v)
	}
	return m, nil
}

func (d *decoder) files() ([]*chartcommon.File, error) {
	n, err := d.count()
	if err != nil {
		return nil, err
	}
	var out []*chartcommon.File
	for range n {
		name, err := d.str()
		if err != nil {
			return nil, err
		}
		data, err := d.bytes()
		if err != nil {
			return nil, err
		}
		out = append(out, &chartcommon.File{Name: name, Data: data})
	}
	return out, nil
}

func (d *decoder) chart(depth int) (*chart.Chart, error) {
	if depth > 100 {
		return nil, errors.New("charts nested too deep")
	}
	ch := &chart.Chart{}
	for _, into := range []any{&ch.Metadata, &ch.Lock} {
		raw, err := d.rawBytes()
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, into); err != nil {
			return nil, err
		}
	}
	var err error
	if ch.Templates, err = d.files(); err != nil {
		return nil, err
	}
	if ch.Files, err = d.files(); err != nil {
		return nil, err
	}
	if ch.Values, err = d.mapValue(); err != nil {
		return nil, err
	}
	hasSchema, err := d.bool()
	if err != nil {
		return nil, err
	}
	if ch.Schema, err = d.bytes(); err != nil {
		return nil, err
	}
	if !hasSchema {
		ch.Schema = nil
	}
	n, err := d.count()
	if err != nil {
		return nil, err
	}
	for range n {
		sub, err := d.chart(depth + 1)
		if err != nil {
			return nil, err
		}
		ch.AddDependency(sub)
	}
	return ch, nil
}

func (d *decoder) request() (*request, error) {
	r := &request{}
	var err error
	if r.op, err = d.byte(); err != nil {
		return nil, err
	}
	if r.op != opRender && r.op != opSchema && r.op != opRenderFiles {
		return nil, fmt.Errorf("an unknown operation %d", r.op)
	}
	if r.digest, err = d.str(); err != nil {
		return nil, err
	}
	hasChart, err := d.bool()
	if err != nil {
		return nil, err
	}
	if hasChart {
		if r.chart, err = d.chart(0); err != nil {
			return nil, err
		}
	}
	if r.spec, err = d.mapValue(); err != nil {
		return nil, err
	}
	if r.opts.ReleaseName, err = d.str(); err != nil {
		return nil, err
	}
	if r.opts.Namespace, err = d.str(); err != nil {
		return nil, err
	}
	if r.opts.IsUpgrade, err = d.bool(); err != nil {
		return nil, err
	}
	n, err := d.uvarint()
	if err != nil {
		return nil, err
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("a bad bound %d", n)
	}
	r.opts.MaxRenderedBytes = int(n)
	if n, err = d.uvarint(); err != nil {
		return nil, err
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("a bad revision %d", n)
	}
	r.opts.Revision = int(n)
	hasCaps, err := d.bool()
	if err != nil {
		return nil, err
	}
	if hasCaps {
		caps := &chartcommon.Capabilities{HelmVersion: chartcommon.DefaultCapabilities.HelmVersion}
		for _, into := range []*string{&caps.KubeVersion.Version, &caps.KubeVersion.Major, &caps.KubeVersion.Minor} {
			if *into, err = d.str(); err != nil {
				return nil, err
			}
		}
		count, err := d.count()
		if err != nil {
			return nil, err
		}
		caps.APIVersions = make(chartcommon.VersionSet, count)
		for i := range caps.APIVersions {
			if caps.APIVersions[i], err = d.str(); err != nil {
				return nil, err
			}
		}
		r.opts.Capabilities = caps
	}
	lookup, err := d.bool()
	if err != nil {
		return nil, err
	}
	if lookup {
		r.opts.Lookup = unanswered // the worker puts its own in
	}
	return r, d.end()
}

// unanswered marks a decoded request whose render may look objects up: the worker
// replaces it with a Lookup that asks the parent.
func unanswered(string, string, string, string) (map[string]any, error) {
	return nil, errors.New("lookup is not answered here")
}

func (d *decoder) lookupAnswer() (*lookupAnswer, error) {
	op, err := d.byte()
	if err != nil {
		return nil, err
	}
	if op != opLookupAnswer {
		return nil, fmt.Errorf("operation %d where the answer to a lookup belongs", op)
	}
	a := &lookupAnswer{}
	if a.errMsg, err = d.str(); err != nil {
		return nil, err
	}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	if v != nil {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("a %T where a looked-up object belongs", v)
		}
		a.object = m
	}
	return a, d.end()
}

func (d *decoder) response(op byte) (*response, error) {
	r := &response{}
	var err error
	if r.status, err = d.byte(); err != nil {
		return nil, err
	}
	switch r.status {
	case statusNeedChart:
	case statusLookup:
		q := &r.question
		for _, into := range []*string{&q.apiVersion, &q.kind, &q.namespace, &q.name} {
			if *into, err = d.str(); err != nil {
				return nil, err
			}
		}
	case statusError:
		if r.errMsg, err = d.str(); err != nil {
			return nil, err
		}
		if r.errFlags, err = d.uvarint(); err != nil {
			return nil, err
		}
		hasLimit, err := d.bool()
		if err != nil {
			return nil, err
		}
		if hasLimit {
			l := &policies.LimitError{}
			if l.Reason, err = d.str(); err != nil {
				return nil, err
			}
			if l.Field, err = d.str(); err != nil {
				return nil, err
			}
			for _, into := range []*int{&l.Value, &l.Limit} {
				x, n := binary.Varint(d.b[d.off:])
				if n <= 0 {
					return nil, errors.New("a bad integer")
				}
				d.off += n
				*into = int(x)
			}
			r.limit = l
		}
	case statusOK:
		n, err := d.count()
		if err != nil {
			return nil, err
		}
		if op == opRenderFiles {
			r.files = make(map[string]string, n)
			for range n {
				name, err := d.str()
				if err != nil {
					return nil, err
				}
				if r.files[name], err = d.str(); err != nil {
					return nil, err
				}
			}
			break
		}
		if n == 0 {
			break // nil, as Render and ValidateValues give nothing
		}
		if op == opRender {
			r.objects = make([]policies.RenderedObject, n)
			for i := range r.objects {
				if r.objects[i].Template, err = d.str(); err != nil {
					return nil, err
				}
				if r.objects[i].Object, err = d.mapValue(); err != nil {
					return nil, err
				}
			}
		} else {
			r.violations = make([]policies.Violation, n)
			for i := range r.violations {
				v := &r.violations[i]
				var action string
				for _, s := range []*string{&v.Path, &v.Message, &v.Source, &v.Policy, &v.ID, &v.Object, &action} {
					if *s, err = d.str(); err != nil {
						return nil, err
					}
				}
				v.Action = v1alpha1.EnforcementAction(action)
			}
		}
	default:
		return nil, fmt.Errorf("an unknown status %d", r.status)
	}
	return r, d.end()
}

func (d *decoder) end() error {
	if d.off != len(d.b) {
		return fmt.Errorf("%d bytes after the end of the message", len(d.b)-d.off)
	}
	return nil
}
