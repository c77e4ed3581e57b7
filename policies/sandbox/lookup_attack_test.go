package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/policies"
)

func lookupChart(tpl string) *chart.Chart {
	return &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "asks", Version: "0.1.0"},
		Templates: []*chartcommon.File{{Name: "templates/x.yaml", Data: []byte(tpl)}},
	}
}

// A lookup the parent cannot answer in time (an API server, or an aggregated API, that
// is slow to answer) does not hold the render past its deadline: the worker is killed
// and the render ends with ErrDeadline when the deadline comes, not when the lookup
// does.
func TestAStuckLookupEndsAtTheDeadline(t *testing.T) {
	p := newPool(t, Options{Workers: 1})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var asked atomic.Int32
	asking := make(chan struct{})
	stuck := func(string, string, string, string) (map[string]any, error) {
		if asked.Add(1) == 1 {
			close(asking)
		}
		<-release
		return nil, nil
	}
	// The deadline comes while the lookup is stuck, however long the worker took to
	// start and ask.
	ctx, deadline := context.WithCancel(context.Background())
	defer deadline()
	type result struct{ err error }
	done := make(chan result, 1)
	go func() {
		_, err := p.RenderFiles(ctx, "rendering chart asks", lookupChart(`{{ lookup "v1" "ConfigMap" "a" "slow" }}`), "", nil, policies.RenderOptions{Lookup: stuck})
		done <- result{err}
	}()
	select {
	case <-asking:
	case <-time.After(time.Minute):
		t.Fatal("the worker never asked its lookup")
	}
	deadline()
	select {
	case res := <-done:
		require.ErrorIs(t, res.err, policies.ErrDeadline)
		assert.EqualValues(t, 1, asked.Load())
		assert.Equal(t, 0, p.Stats().Live, "the worker was killed")
	case <-time.After(time.Minute):
		t.Fatal("the render waited for the lookup, past its deadline")
	}
}

// fakeLookupWorker is a worker (a shell) that answers any request with the frames in
// stream and then reads its input until it ends, without a word more.
func fakeLookupWorker(t *testing.T, stream []byte) []string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "answers")
	require.NoError(t, os.WriteFile(file, stream, 0o600))
	return []string{"/bin/sh", "-c", `cat "$0" >&3; exec cat >/dev/null`, file}
}

func questionFrame(t *testing.T, name string) []byte {
	t.Helper()
	var e encoder
	e.b = beginFrame(nil)
	require.NoError(t, e.response(opRenderFiles, &response{status: statusLookup, question: lookupQuestion{apiVersion: "v1", kind: "ConfigMap", namespace: "a", name: name}}))
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)-4))
	return e.b
}

// The parent answers at most MaxLookups questions for one render, whatever the worker
// asks: the bound holds in the process that makes the requests to the API server,
// not only in the worker that the templates run in.
func TestTheParentAnswersAtMostMaxLookups(t *testing.T) {
	var stream []byte
	for i := range policies.MaxLookups + 20 {
		stream = append(stream, questionFrame(t, string(rune('a'+i%26)))...)
	}
	p := newPool(t, Options{Workers: 1, Command: fakeLookupWorker(t, stream)})
	var asked atomic.Int32
	count := func(string, string, string, string) (map[string]any, error) { asked.Add(1); return nil, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := p.RenderFiles(ctx, "rendering chart asks", lookupChart("x: y"), "", nil, policies.RenderOptions{Lookup: count})
	require.Error(t, err)
	assert.LessOrEqual(t, asked.Load(), int32(policies.MaxLookups), "lookups the parent made")
	assert.ErrorIs(t, err, policies.ErrWorkerFailed)
	assert.NotErrorIs(t, err, policies.ErrDeadline, "the worker is stopped at the question past the bound")
}

// An answer the worker cannot read (its frame is past the bound of a message) leaves
// the rest of that frame in the worker's input: the worker must stop rather than read
// on, or the bytes of the answer (a looked-up object, which a tenant may write) would
// be taken for the next requests, and what the worker answers to them for the answers
// to the parent's next requests.
func TestAWorkerStopsAtAnAnswerItCannotRead(t *testing.T) {
	var e encoder
	e.b = beginFrame(nil)
	require.NoError(t, e.request(&request{op: opRenderFiles, digest: "d1", chart: lookupChart(`{{ lookup "v1" "ConfigMap" "a" "big" }}`), opts: policies.RenderOptions{Lookup: unanswered}}))
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)-4))
	in := append([]byte(nil), e.b...)
	// The answer: a frame longer than maxMessage; only its head is read before the
	// worker gives up on it. What follows stands for the rest of its bytes: here, a
	// request that the answer's content was made to look like.
	in = binary.BigEndian.AppendUint32(in, maxMessage+1)
	e.b = beginFrame(nil)
	require.NoError(t, e.request(&request{op: opRenderFiles, digest: "d2", chart: lookupChart("smuggled: true\n")}))
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)-4))
	in = append(in, e.b...)

	var out bytes.Buffer
	err := Serve(bytes.NewReader(in), &out)
	require.Error(t, err)

	r := bufio.NewReader(&out)
	var buf []byte
	var statuses []byte
	for {
		frame, err := readFrame(r, &buf, maxMessage)
		if err != nil {
			break
		}
		d := decoder{b: frame}
		resp, err := d.response(opRenderFiles)
		require.NoError(t, err)
		statuses = append(statuses, resp.status)
		assert.NotContains(t, resp.files, "asks/templates/x.yaml", "the smuggled request was answered")
	}
	assert.NotContains(t, statuses, statusOK, "the worker answered what followed an answer it could not read")
}
