package sandbox

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/policies"
)

// EnvWorker, set to "1", makes Main serve as a worker instead of returning.
const EnvWorker = "COMPOSITOR_SANDBOX_WORKER"

// envMemoryLimit carries Options.MemoryLimit to the worker, in bytes.
const envMemoryLimit = "COMPOSITOR_SANDBOX_MEMORY_LIMIT"

// Subcommand is the hidden `compositor` subcommand a Pool starts its workers with.
const Subcommand = "sandbox-worker"

// selfServes is set when Main ran in this process: its executable serves as a worker
// when started with EnvWorker.
var selfServes bool

// Main serves as a worker and exits when the process was started as one (EnvWorker is
// "1"); else it returns, noting that this executable can be a worker. Call it first in
// main and in the TestMain of tests that start a Pool of their own binary.
func Main() {
	if os.Getenv(EnvWorker) != "1" {
		selfServes = true
		return
	}
	os.Exit(RunWorker())
}

// SelfServes reports whether Main ran in this process, so that a Pool started with
// the default command (this executable) gets workers.
func SelfServes() bool { return selfServes }

// answersFD is the worker's descriptor for its answers.
const answersFD = 3

// RunWorker serves requests from stdin, answering on descriptor 3, until stdin ends, and returns the
// exit code. It bounds its own memory first.
func RunWorker() int {
	runtime.GOMAXPROCS(1) // one request at a time: a runaway takes one core at most
	limit := int64(defaultMemoryLimit)
	if v, err := strconv.ParseInt(os.Getenv(envMemoryLimit), 10, 64); err == nil && v > 0 {
		limit = v
	}
	debug.SetMemoryLimit(limit)
	if err := limitData(limit); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox worker: %v\n", err)
	}
	// Answers go to descriptor 3, a pipe of their own: whatever prints to stdout
	// cannot corrupt them.
	out := os.NewFile(answersFD, "sandbox-answers")
	if out == nil {
		fmt.Fprintln(os.Stderr, "sandbox worker: no answers pipe (descriptor 3)")
		return 2
	}
	go exitWithParent()
	if err := Serve(os.Stdin, out); err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintf(os.Stderr, "sandbox worker: %v\n", err)
		return 1
	}
	return 0
}

// exitWithParent ends the worker when its parent is gone (a worker busy with a runaway
// does not read stdin, so it would not see its end).
func exitWithParent() {
	parent := os.Getppid()
	for range time.Tick(500 * time.Millisecond) {
		if os.Getppid() != parent {
			os.Exit(3)
		}
	}
}

// maxCharts is how many charts a worker keeps by digest.
const maxCharts = 32

// worker state: charts by digest, the schema validator with its compiled schemas.
type workerState struct {
	charts  map[string]*chart.Chart
	order   []string // oldest first
	schemas *policies.JSONSchemaValidator
}

// Serve answers the requests read from in, one at a time, on out until in ends. A
// render that looks objects up asks for each on out (statusLookup) and reads the
// answer from in before it goes on.
func Serve(in io.Reader, out io.Writer) error {
	br := bufio.NewReaderSize(in, 64<<10)
	bw := bufio.NewWriterSize(out, 64<<10)
	st := &workerState{charts: map[string]*chart.Chart{}, schemas: policies.NewJSONSchemaValidator(0)}
	var buf []byte
	var e encoder
	for {
		frame, err := readFrame(br, &buf, maxMessage)
		if err != nil {
			return err
		}
		d := decoder{b: frame}
		req, err := d.request()
		if err != nil {
			return fmt.Errorf("reading a request: %w", err)
		}
		var broken error // the pipe to the parent, out of step
		if req.opts.Lookup != nil {
			req.opts.Lookup = askParent(br, bw, &broken)
		}
		resp := st.handle(req)
		if broken != nil {
			// The rest of an answer this worker could not read is in its input: what
			// it would read next is no request of the parent's.
			return broken
		}
		e.b = beginFrame(e.b[:0])
		if err := e.response(req.op, resp); err != nil {
			e.b = beginFrame(e.b[:0])
			_ = e.response(req.op, &response{status: statusError, errMsg: fmt.Sprintf("%s: %v", policies.ErrRender, err), errFlags: flagRender})
		}
		if err := writeFrame(bw, e.b); err != nil {
			return err
		}
		if cap(e.b) > 4<<20 {
			e.b = nil // do not keep one large answer's buffer
		}
		if cap(buf) > 4<<20 {
			buf = nil
		}
	}
}

// askParent is the Lookup of a render in the worker: each lookup is a question on out
// and an answer read from in, on buffers of its own (the request's chart and values
// stay where they were decoded). A question that could not be sent, or an answer
// that could not be read whole, is put in *broken: the render fails, and the worker
// ends, as the pipes are out of step.
func askParent(in *bufio.Reader, out *bufio.Writer, broken *error) policies.Lookup {
	var e encoder
	var buf []byte
	return func(apiVersion, kind, namespace, name string) (map[string]any, error) {
		e.b = beginFrame(e.b[:0])
		q := &response{status: statusLookup, question: lookupQuestion{apiVersion: apiVersion, kind: kind, namespace: namespace, name: name}}
		if err := e.response(opRenderFiles, q); err != nil {
			return nil, err
		}
		if *broken != nil {
			return nil, *broken
		}
		if err := writeFrame(out, e.b); err != nil {
			*broken = fmt.Errorf("lookup %s %s: asking Compositor: %w", apiVersion, kind, err)
			return nil, *broken
		}
		frame, err := readFrame(in, &buf, maxMessage)
		if err != nil {
			*broken = fmt.Errorf("lookup %s %s: reading Compositor's answer: %w", apiVersion, kind, err)
			return nil, *broken
		}
		d := decoder{b: frame}
		a, err := d.lookupAnswer()
		if err != nil {
			return nil, fmt.Errorf("lookup %s %s: reading Compositor's answer: %w", apiVersion, kind, err)
		}
		if a.errMsg != "" {
			return nil, errors.New(a.errMsg)
		}
		return a.object, nil
	}
}

func (st *workerState) handle(req *request) (resp *response) {
	ch := req.chart
	if ch != nil {
		st.keep(req.digest, ch)
	} else if ch = st.charts[req.digest]; ch == nil {
		return &response{status: statusNeedChart}
	}
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("%w: panic: %v", policies.ErrRender, p)
			if req.op == opSchema {
				err = fmt.Errorf("the schema check failed: %v", p)
			}
			resp = errorResponse(err)
		}
	}()
	switch req.op {
	case opRender:
		objs, err := policies.Render(ch, req.spec, req.opts)
		if err != nil {
			return errorResponse(err)
		}
		return &response{status: statusOK, objects: objs}
	case opRenderFiles:
		files, err := policies.RenderFiles(ch, req.spec, req.opts)
		if err != nil {
			return errorResponse(err)
		}
		return &response{status: statusOK, files: files}
	default:
		vs, err := st.schemas.ValidateValues(context.Background(), ch, req.digest, req.spec)
		if err != nil {
			return errorResponse(err)
		}
		return &response{status: statusOK, violations: vs}
	}
}

func errorResponse(err error) *response {
	resp := &response{status: statusError, errMsg: err.Error(), errFlags: errorFlags(err)}
	var limit *policies.LimitError
	if errors.As(err, &limit) {
		resp.limit = limit
	}
	return resp
}

func (st *workerState) keep(digest string, ch *chart.Chart) {
	if _, ok := st.charts[digest]; !ok {
		st.order = append(st.order, digest)
	}
	st.charts[digest] = ch
	for len(st.order) > maxCharts {
		delete(st.charts, st.order[0])
		st.order = st.order[1:]
	}
}

// beginFrame starts a frame in b: room for its length.
func beginFrame(b []byte) []byte { return append(b, 0, 0, 0, 0) }

// writeFrame fills in the length of the frame begun by beginFrame and writes it.
func writeFrame(w *bufio.Writer, frame []byte) error {
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	if _, err := w.Write(frame); err != nil {
		return err
	}
	return w.Flush()
}

// readFrame reads one frame into *buf and returns its content.
func readFrame(r io.Reader, buf *[]byte, limit int) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(head[:]))
	if n > limit {
		return nil, fmt.Errorf("a message of %d bytes, more than the limit of %d", n, limit)
	}
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	p := (*buf)[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return p, nil
}
