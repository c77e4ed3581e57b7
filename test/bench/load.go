package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/net/http2"
)

// call is one request the load generator sends again and again: a body for a path, and
// what a correct answer says.
type call struct {
	path string
	body []byte
	// check reads the answer's body and says what is wrong with it, nil when it is the
	// expected verdict.
	check func(body []byte) error
	// floorCheck, when set, checks the floor's answer instead of check: the floor
	// answers reviews in shape only.
	floorCheck func(body []byte) error
	// then, when set, is sent right after on the same connection, as the next step of
	// the same request (/validate after /mutate); the call's latency covers both.
	then *call
}

// endpoint is a webhook server under load: where it listens, the CA its certificate
// chains to, and the process serving it (for its CPU time).
type endpoint struct {
	name   string
	url    string // https://host:port, without a path
	caPEM  []byte
	pid    int
	client *http.Client
}

// newEndpoint returns an endpoint with a client that speaks to it as the API server
// does: TLS, verified against caPEM, HTTP/2 when the server offers it (both servers
// here do), one client shared by every worker.
func newEndpoint(name, url string, caPEM []byte, pid int) (*endpoint, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no certificate in its CA bundle", name)
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 64,
		ForceAttemptHTTP2:   true,
	}
	if err := http2.ConfigureTransport(transport); err != nil {
		return nil, err
	}
	return &endpoint{name: name, url: url, caPEM: caPEM, pid: pid, client: &http.Client{Transport: transport, Timeout: 30 * time.Second}}, nil
}

// presentCertificate makes e's client present the client certificate in dir
// (client.crt, client.key), as the API server presents its own to the webhooks.
func (e *endpoint) presentCertificate(dir string) error {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
	if err != nil {
		return fmt.Errorf("the API server's webhook client certificate: %w", err)
	}
	e.client.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
	return nil
}

// result is what one load run measured.
type result struct {
	Server      string  `json:"server"`
	Workload    string  `json:"workload"`
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"firstError,omitempty"`
	Seconds     float64 `json:"seconds"`
	P50         float64 `json:"p50Ms"`
	P95         float64 `json:"p95Ms"`
	P99         float64 `json:"p99Ms"`
	Max         float64 `json:"maxMs"`
	Throughput  float64 `json:"perSecond"`
	// CPUSeconds is the CPU time the server process used during the run.
	CPUSeconds float64 `json:"cpuSeconds"`
}

// CPUPerRequest is the server's CPU time per request, in milliseconds.
func (r result) CPUPerRequest() float64 {
	if r.Requests == 0 {
		return 0
	}
	return r.CPUSeconds * 1000 / float64(r.Requests)
}

// drive sends calls to e from concurrency workers, each waiting for its answer before
// sending the next, for warmup (unmeasured) and then d. Each worker cycles through
// calls from its own starting point, so that concurrent requests differ.
func drive(ctx context.Context, e *endpoint, workload string, calls []call, concurrency int, warmup, d time.Duration) (result, error) {
	if _, err := run(ctx, e, calls, concurrency, warmup); err != nil {
		return result{}, err
	}
	before, err := cpuSeconds(e.pid)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	stats, err := run(ctx, e, calls, concurrency, d)
	if err != nil {
		return result{}, err
	}
	elapsed := time.Since(start)
	after, err := cpuSeconds(e.pid)
	if err != nil {
		return result{}, err
	}
	r := result{
		Server:      e.name,
		Workload:    workload,
		Concurrency: concurrency,
		Requests:    len(stats.latencies),
		Errors:      stats.errors,
		FirstError:  stats.firstError,
		Seconds:     elapsed.Seconds(),
		CPUSeconds:  after - before,
	}
	if len(stats.latencies) > 0 {
		slices.Sort(stats.latencies)
		r.P50 = millis(percentile(stats.latencies, 0.50))
		r.P95 = millis(percentile(stats.latencies, 0.95))
		r.P99 = millis(percentile(stats.latencies, 0.99))
		r.Max = millis(stats.latencies[len(stats.latencies)-1])
		r.Throughput = float64(len(stats.latencies)) / elapsed.Seconds()
	}
	return r, nil
}

type runStats struct {
	latencies  []time.Duration
	errors     int
	firstError string
}

// run is one timed stretch of drive. A request that fails or gets the wrong verdict is
// counted as an error and its latency is still recorded.
func run(ctx context.Context, e *endpoint, calls []call, concurrency int, d time.Duration) (runStats, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu  sync.Mutex
		all runStats
		wg  sync.WaitGroup
	)
	for w := range concurrency {
		wg.Go(func() {
			var mine runStats
			for i := w; ctx.Err() == nil; i++ {
				c := calls[i%len(calls)]
				start := time.Now()
				err := send(ctx, e, c)
				if ctx.Err() != nil {
					break // cut off by the end of the run, not an answer
				}
				mine.latencies = append(mine.latencies, time.Since(start))
				if err != nil {
					mine.errors++
					if mine.firstError == "" {
						mine.firstError = err.Error()
					}
				}
			}
			mu.Lock()
			all.latencies = append(all.latencies, mine.latencies...)
			all.errors += mine.errors
			if all.firstError == "" {
				all.firstError = mine.firstError
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(all.latencies) == 0 {
		return all, fmt.Errorf("%s answered no request in %s", e.name, d)
	}
	return all, nil
}

// send posts one call and checks its answer.
func send(ctx context.Context, e *endpoint, c call) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+c.path, bytes.NewReader(c.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, truncate(body))
	}
	if err := c.check(body); err != nil {
		return err
	}
	if c.then != nil {
		return send(ctx, e, *c.then)
	}
	return nil
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// percentile returns the q-quantile of sorted latencies (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuSeconds is the user and system CPU time process pid has used so far.
func cpuSeconds(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	stat, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	return stat.CPUTime(), nil
}

// expectAdmission returns a check that the answer is an AdmissionReview whose response
// allows the request (allowed) or refuses it (not allowed).
func expectAdmission(allowed bool) func([]byte) error {
	return func(body []byte) error {
		var review struct {
			Response *struct {
				Allowed bool `json:"allowed"`
				Result  *struct {
					Message string `json:"message"`
				} `json:"status"`
			} `json:"response"`
		}
		if err := json.Unmarshal(body, &review); err != nil || review.Response == nil {
			return fmt.Errorf("the answer is not an AdmissionReview with a response: %s", truncate(body))
		}
		if review.Response.Allowed != allowed {
			msg := ""
			if review.Response.Result != nil {
				msg = review.Response.Result.Message
			}
			return fmt.Errorf("expected allowed=%t, got allowed=%t: %s", allowed, review.Response.Allowed, msg)
		}
		return nil
	}
}
