// Package sandbox runs chart rendering and JSON Schema checks in worker processes, so
// that work past its deadline stops: the worker is killed (its process group, with
// SIGKILL), reaped, and a fresh one started for the next request. Go templates and the
// JSON Schema validator take no context; in-process, a runaway would keep its core and
// its memory after its deadline.
//
// A Pool re-executes this program as a worker (Main, or the hidden `compositor
// sandbox-worker`); each worker serves one request at a time over a pipe pair, caches
// charts by digest (a chart crosses the pipe once per worker), bounds its Go heap
// (debug.SetMemoryLimit) and its writable memory (RLIMIT_DATA), and uses one core. A
// worker that dies (a panic, out of memory) or says something unreadable gives an error,
// never a hang.
package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/internal/fairshare"
	"github.com/compositor-dev/compositor/policies"
)

// defaultMemoryLimit is a worker's Go memory limit unless Options say otherwise.
const defaultMemoryLimit = 512 << 20

// maxMessage bounds a message on the pipe, either way.
const maxMessage = 256 << 20

// Options configure a Pool.
type Options struct {
	// Command starts a worker: the program and its arguments. Default: this
	// executable with the argument Subcommand (which needs Main called in main or
	// TestMain, or the subcommand registered).
	Command []string
	// Env is added to the worker's environment: of this process's, only what the Go
	// runtime and the system read (GO*, PATH, HOME, TMPDIR, TZ, LANG, LC_*).
	Env []string
	// Workers bounds how many workers run at once; a request waits for one until its
	// deadline. Default max(2, GOMAXPROCS). One lane (policies.WithLane) holds at most
	// half of them, at least one: a namespace that sends runaways without pause leaves
	// the rest to the others.
	Workers int
	// MemoryLimit is a worker's Go memory limit in bytes (debug.SetMemoryLimit); its
	// writable memory (RLIMIT_DATA) is capped at this plus 512 MiB, so that a runaway
	// allocation ends the worker. Default 512 MiB.
	MemoryLimit int64
}

// Pool runs renders and schema checks in worker processes. It implements
// policies.Sandbox and is safe for concurrent use.
type Pool struct {
	command []string
	env     []string
	slots   chan struct{}
	lanes   *fairshare.Lanes

	mu     sync.Mutex
	idle   []*worker
	live   map[*worker]struct{}
	closed bool

	started, killed atomic.Int64
}

var _ policies.Sandbox = (*Pool)(nil)

// NewPool returns a pool; it starts workers when requests come.
func NewPool(opts Options) (*Pool, error) {
	command := opts.Command
	if len(command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this executable to start sandbox workers: %w", err)
		}
		// On Linux the running binary itself, even if its file was replaced since
		// (an upgrade in place): a worker speaks its parent's protocol.
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			exe = "/proc/self/exe"
		}
		command = []string{exe, Subcommand}
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = max(2, runtime.GOMAXPROCS(0))
	}
	limit := opts.MemoryLimit
	if limit <= 0 {
		limit = defaultMemoryLimit
	}
	env := append([]string{EnvWorker + "=1", envMemoryLimit + "=" + strconv.FormatInt(limit, 10)}, opts.Env...)
	return &Pool{command: command, env: env, slots: make(chan struct{}, workers), lanes: fairshare.New(workers / 2), live: map[*worker]struct{}{}}, nil
}

var (
	sharedOnce sync.Once
	shared     *Pool
	sharedErr  error
)

// Shared is the process's pool with default options, made at the first call.
func Shared() (*Pool, error) {
	sharedOnce.Do(func() { shared, sharedErr = NewPool(Options{}) })
	return shared, sharedErr
}

// Stats count a pool's workers.
type Stats struct {
	// Started and Killed count workers over the pool's life; Killed are those
	// stopped at a deadline or after a failure (not those Close ends).
	Started, Killed int64
	// Live are the worker processes running now, Idle those waiting for a request.
	Live, Idle int
}

// Stats returns the pool's counts.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Started: p.started.Load(), Killed: p.killed.Load(), Live: len(p.live), Idle: len(p.idle)}
}

// Close kills every worker; requests running finish with an error.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	all := make([]*worker, 0, len(p.live))
	for w := range p.live {
		all = append(all, w)
	}
	p.idle = nil
	p.mu.Unlock()
	for _, w := range all {
		p.mu.Lock()
		delete(p.live, w)
		p.mu.Unlock()
		w.stop()
	}
}

// Render implements policies.Sandbox.
func (p *Pool) Render(ctx context.Context, what string, ch *chart.Chart, digest string, spec map[string]any, opts policies.RenderOptions) ([]policies.RenderedObject, error) {
	if ch == nil {
		return policies.Render(nil, spec, opts) // the error, without a worker
	}
	resp, err := p.do(ctx, what, &request{op: opRender, digest: digest, chart: ch, spec: spec, opts: opts})
	if err != nil {
		return nil, err
	}
	return resp.objects, nil
}

// RenderFiles implements policies.Sandbox. A lookup of the templates is asked of this
// process, which answers it with opts.Lookup while the worker waits; the deadline
// covers the lookups too.
func (p *Pool) RenderFiles(ctx context.Context, what string, ch *chart.Chart, digest string, spec map[string]any, opts policies.RenderOptions) (map[string]string, error) {
	if ch == nil {
		return policies.RenderFiles(nil, spec, opts) // the error, without a worker
	}
	resp, err := p.do(ctx, what, &request{op: opRenderFiles, digest: digest, chart: ch, spec: spec, opts: opts})
	if err != nil {
		return nil, err
	}
	return resp.files, nil
}

// ValidateValues implements policies.Sandbox.
func (p *Pool) ValidateValues(ctx context.Context, what string, ch *chart.Chart, digest string, spec map[string]any) ([]policies.Violation, error) {
	if ch == nil {
		return nil, policies.ErrNoChart
	}
	resp, err := p.do(ctx, what, &request{op: opSchema, digest: digest, chart: ch, spec: spec})
	if err != nil {
		return nil, err
	}
	return resp.violations, nil
}

// do runs req in a worker until ctx is done. req.chart is always set; it crosses the
// pipe only when the worker does not have req.digest.
func (p *Pool) do(ctx context.Context, what string, req *request) (*response, error) {
	lane := policies.LaneOf(ctx)
	leave, ok := p.lanes.Acquire(ctx, lane, time.Until(deadlineOf(ctx)))
	if !ok {
		return nil, fmt.Errorf("%w: %s could not start before the deadline: the %s already hold %d of the %d sandbox workers, all they may%w",
			policies.ErrDeadline, what, laneName(lane), p.lanes.PerLane(), cap(p.slots), policies.NotStarted)
	}
	defer leave()
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s could not start before the deadline: all %d sandbox workers are busy%w", policies.ErrDeadline, what, cap(p.slots), policies.NotStarted)
	}
	defer func() { <-p.slots }()
	if ctx.Err() != nil {
		// Not a worker killed for a request that was over before it began.
		return nil, fmt.Errorf("%w: %s could not start before the deadline%w", policies.ErrDeadline, what, policies.NotStarted)
	}
	if req.digest == "" {
		digest, err := contentDigest(req.chart)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		req.digest = digest
	}
	w, err := p.get()
	if err != nil {
		return nil, fmt.Errorf("%s: starting a sandbox worker: %w", what, err)
	}
	type result struct {
		resp  *response
		err   error
		fatal bool
	}
	done := make(chan result, 1)
	go func() {
		resp, err, fatal := w.exchange(ctx, req)
		done <- result{resp, err, fatal}
	}()
	var res result
	stopped := func() (*response, error) {
		return nil, fmt.Errorf("%w: %s was stopped at the deadline (a template or value that takes this long is refused; its worker process was killed)", policies.ErrDeadline, what)
	}
	select {
	case res = <-done:
	case <-ctx.Done():
		select {
		case res = <-done: // the answer came with the deadline: it stands
		default:
			p.discard(w)
			<-done // the exchange ends: the worker's pipes are closed, its lookup given up
			return stopped()
		}
	}
	switch {
	case res.err != nil && res.fatal && ctx.Err() != nil:
		p.discard(w) // an exchange given up at the deadline: a lookup was under way
		return stopped()
	case res.err != nil && res.fatal:
		state := p.discard(w)
		return nil, fmt.Errorf("%s: %w (%s): %w%s", what, policies.ErrWorkerFailed, state, res.err, w.log.say())
	case res.err != nil:
		p.put(w)
		return nil, fmt.Errorf("%s: %w", what, res.err)
	}
	p.put(w)
	if res.resp.status == statusError {
		return nil, &workerError{msg: res.resp.errMsg, flags: res.resp.errFlags, limit: res.resp.limit}
	}
	return res.resp, nil
}

// deadlineOf is ctx's deadline; a minute from now without one.
func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Minute)
}

// laneName names a lane in messages.
func laneName(lane string) string {
	if lane == "" {
		return "requests of no lane"
	}
	return lane
}

// get returns an idle worker, or starts one.
func (p *Pool) get() (*worker, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("the sandbox is closed")
	}
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return w, nil
	}
	p.mu.Unlock()
	w, err := startWorker(p.command, p.env)
	if err != nil {
		return nil, err
	}
	p.started.Add(1)
	p.mu.Lock()
	p.live[w] = struct{}{}
	p.mu.Unlock()
	return w, nil
}

// put makes w idle again.
func (p *Pool) put(w *worker) {
	p.mu.Lock()
	if !p.closed {
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.mu.Lock()
	delete(p.live, w)
	p.mu.Unlock()
	w.stop()
}

// discard kills w's process group, reaps it and says how it ended.
func (p *Pool) discard(w *worker) string {
	p.mu.Lock()
	_, live := p.live[w]
	delete(p.live, w)
	p.mu.Unlock()
	if live {
		p.killed.Add(1)
	}
	return w.stop()
}

// worker is one worker process.
type worker struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	answers *os.File
	r       *bufio.Reader
	w       *bufio.Writer
	log     *tail
	known   map[string]bool // chart digests the worker was sent
	// chartsSent counts the charts sent (tests).
	chartsSent int
	enc        encoder
	buf        []byte

	stopOnce sync.Once
	state    string
}

func startWorker(command, env []string) (*worker, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(workerEnviron(), env...)
	answersR, answersW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{answersW} // descriptor 3 in the worker
	stdin, err := cmd.StdinPipe()
	if err != nil {
		answersR.Close()
		answersW.Close()
		return nil, err
	}
	log := &tail{}
	cmd.Stdout = log
	cmd.Stderr = log
	cmd.WaitDelay = time.Second
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		answersR.Close()
		answersW.Close()
		return nil, err
	}
	answersW.Close()
	return &worker{
		cmd: cmd, stdin: stdin, answers: answersR, log: log, known: map[string]bool{},
		r: bufio.NewReaderSize(answersR, 64<<10), w: bufio.NewWriterSize(stdin, 64<<10),
	}, nil
}

// exchange sends req and reads the answer. fatal says the worker cannot be used again.
// ctx bounds the worker's questions: the parent's lookups for it.
func (w *worker) exchange(ctx context.Context, req *request) (_ *response, err error, fatal bool) {
	defer func() {
		if p := recover(); p != nil {
			err, fatal = fmt.Errorf("reading the answer: %v", p), true
		}
	}()
	w.log.reset()
	send := *req
	if w.known[req.digest] {
		send.chart = nil
	}
	resend := true
	asked := 0
	for {
		if resend {
			w.enc.b = beginFrame(w.enc.b[:0])
			if err := w.enc.request(&send); err != nil {
				return nil, err, false
			}
			if err := writeFrame(w.w, w.enc.b); err != nil {
				return nil, fmt.Errorf("sending the request: %w", err), true
			}
			if send.chart != nil {
				w.known[req.digest] = true
				w.chartsSent++
			}
		}
		resend = true
		frame, err := readFrame(w.r, &w.buf, maxMessage)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("it ended without an answer")
			}
			return nil, fmt.Errorf("reading the answer: %w", err), true
		}
		d := decoder{b: frame}
		resp, err := d.response(req.op)
		if err != nil {
			return nil, fmt.Errorf("reading the answer: %w", err), true
		}
		if resp.status == statusLookup {
			if req.opts.Lookup == nil {
				return nil, errors.New("reading the answer: the worker looked an object up for a render that may not"), true
			}
			// The worker keeps to MaxLookups; this process, which sends them to the
			// API server, does too, whatever a worker asks.
			if asked++; asked > policies.MaxLookups {
				return nil, fmt.Errorf("reading the answer: the worker asked for more than %d lookups in one render", policies.MaxLookups), true
			}
			if err := w.answer(ctx, req.opts.Lookup, resp.question); err != nil {
				return nil, err, true
			}
			resend = false // the request stands: what comes next is its answer, or another question
			continue
		}
		if cap(w.buf) > 4<<20 {
			w.buf = nil
		}
		if cap(w.enc.b) > 4<<20 {
			w.enc.b = nil
		}
		if resp.status != statusNeedChart {
			return resp, nil, false
		}
		if send.chart != nil {
			return nil, errors.New("reading the answer: the worker asked again for the chart it was sent"), true
		}
		send.chart = req.chart
	}
}

// answer answers the worker's question with lookup. A lookup's own error goes to the
// worker, whose render fails with it; only a pipe that fails, or ctx done before the
// lookup is (the render's deadline: the worker is being killed), is an error here. A
// lookup that does not return by then is left to end on its own, its answer unsent.
// An answer too large for the worker to read is a lookup error: a frame past
// maxMessage would be left half read in the worker's input.
func (w *worker) answer(ctx context.Context, lookup policies.Lookup, q lookupQuestion) error {
	type found struct {
		obj map[string]any
		err error
	}
	got := make(chan found, 1)
	go func() {
		var f found
		defer func() {
			if p := recover(); p != nil {
				f = found{err: fmt.Errorf("lookup %s %s: %v", q.apiVersion, q.kind, p)}
			}
			got <- f
		}()
		f.obj, f.err = lookup(q.apiVersion, q.kind, q.namespace, q.name)
	}()
	var f found
	select {
	case f = <-got:
	case <-ctx.Done():
		return fmt.Errorf("answering the worker's lookup %s %s: %w", q.apiVersion, q.kind, ctx.Err())
	}
	a := &lookupAnswer{object: f.obj}
	if f.err != nil {
		a = &lookupAnswer{errMsg: f.err.Error()}
	}
	w.enc.b = beginFrame(w.enc.b[:0])
	err := w.enc.lookupAnswer(a)
	if err == nil && len(w.enc.b)-4 > maxMessage {
		err = fmt.Errorf("the answer is %d bytes, more than the limit of %d", len(w.enc.b)-4, maxMessage)
	}
	if err != nil {
		w.enc.b = beginFrame(w.enc.b[:0])
		_ = w.enc.lookupAnswer(&lookupAnswer{errMsg: fmt.Sprintf("lookup %s %s: %v", q.apiVersion, q.kind, err)})
	}
	if err := writeFrame(w.w, w.enc.b); err != nil {
		return fmt.Errorf("answering the worker's lookup: %w", err)
	}
	if cap(w.enc.b) > 4<<20 {
		w.enc.b = nil // do not keep one large answer's buffer
	}
	return nil
}

// stop kills the worker's process group and reaps it; it says how the worker ended.
func (w *worker) stop() string {
	w.stopOnce.Do(func() {
		killGroup(w.cmd)
		w.stdin.Close()
		w.answers.Close()
		err := w.cmd.Wait()
		switch {
		case err == nil:
			w.state = "it exited"
		default:
			w.state = err.Error()
		}
	})
	return w.state
}

// workerEnviron is the part of this process's environment a worker gets: what the Go
// runtime and the system read, not credentials or configuration meant for Compositor
// (a worker runs templates a tenant chose).
func workerEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "GO"), name == "PATH", name == "HOME", name == "TMPDIR", name == "TZ",
			name == "LANG", strings.HasPrefix(name, "LC_"):
			out = append(out, kv)
		}
	}
	return out
}

// contentDigest identifies a chart the caller knows no digest of by its content.
func contentDigest(ch *chart.Chart) (string, error) {
	var e encoder
	if err := e.chart(ch, 0); err != nil {
		return "", err
	}
	sum := sha256.Sum256(e.b)
	return "content:" + hex.EncodeToString(sum[:]), nil
}

// tail keeps the beginning of what a worker printed since its last request began (a
// panic or a fatal error says what it is first), for error messages, and passes all of
// it on to this process's stderr.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 1 << 10

func (t *tail) Write(p []byte) (int, error) {
	_, _ = os.Stderr.Write(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := tailSize - len(t.buf); room > 0 {
		t.buf = append(t.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *tail) reset() {
	t.mu.Lock()
	t.buf = t.buf[:0]
	t.mu.Unlock()
}

// say is the first lines of the output as "; it said: …" for an error message, or ""
// when there is none.
func (t *tail) say() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(bytes.ToValidUTF8(t.buf, nil))), "\n")
	if len(lines) > 3 {
		lines = lines[:3]
	}
	s := strings.TrimSpace(strings.Join(lines, " "))
	if s == "" {
		return ""
	}
	return "; it said: " + s
}
