package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// Markers of the flood section of BENCHMARKS.md, which -flood writes between them.
const (
	floodBegin = "<!-- bench-flood -->"
	floodEnd   = "<!-- /bench-flood -->"
)

// floodRounds is how many times the quiet and the flooded creates are measured.
const floodRounds = 5

// floodLimit stops a flood that its measurement somehow outlives.
const floodLimit = 10 * time.Minute

// floodResult is what one round of the flood measured: the creates through the API
// server while quiet and while callers without a client certificate hammer the
// webhook port.
type floodResult struct {
	Quiet, Flooded result
	// Sent and Refused count the flood's requests, and the 403s among them.
	Sent, Refused int64
	// Other is the first answer that was not a 403, if any.
	Other string
}

// runFlood measures issue 46's item 3: the p99 of real creates
// through the API server, quiet and with that many unauthenticated callers on the
// webhook port, each sending a composition's AdmissionReview to /validate again as soon
// as it is answered, over loopback, until the creates are done.
func runFlood(ctx context.Context, o options, callers int) error {
	dir, err := os.MkdirTemp("", "compositor-bench-flood-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	logf("starting compositor dev")
	d, err := startDev(ctx, o.compositor, o.controlPlaneDir, dir)
	if err != nil {
		return err
	}
	defer d.stop()
	w, err := setUp(ctx, d, o.policyDir)
	if err != nil {
		return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
	}
	// The first creates after the definitions are Ready pay for warming caches: not
	// measured.
	if err := d.createNamespace(ctx, "flood-warmup", map[string]string{"team": "a"}); err != nil {
		return err
	}
	logf("warming up: %d creates through the API server", o.e2eCreates)
	if _, err := createThroughAPIServer(ctx, d, "flood-warmup", w.spec, o.e2eCreates, o.e2eConcurrency); err != nil {
		return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
	}
	var rounds []floodResult
	for round := range floodRounds {
		var fr floodResult
		for _, flooded := range []bool{false, true} {
			namespace := fmt.Sprintf("flood-%d-%t", round, flooded)
			if err := d.createNamespace(ctx, namespace, map[string]string{"team": "a"}); err != nil {
				return err
			}
			stop := func() {}
			if flooded {
				stop = flood(ctx, d, callers, w.spec, &fr)
			}
			logf("round %d: %d creates through the API server at concurrency %d, %d unauthenticated callers", round+1, o.e2eCreates, o.e2eConcurrency, map[bool]int{true: callers}[flooded])
			r, err := createThroughAPIServer(ctx, d, namespace, w.spec, o.e2eCreates, o.e2eConcurrency)
			stop()
			if err != nil {
				return fmt.Errorf("%w (compositor's log: %s)", err, d.log)
			}
			if flooded {
				fr.Flooded = r
			} else {
				fr.Quiet = r
			}
		}
		rounds = append(rounds, fr)
	}
	text := floodMarkdown(callers, o, rounds)
	if o.out == "" {
		fmt.Print(text)
		return nil
	}
	old, err := os.ReadFile(o.out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(o.out, []byte(replaceSection(string(old), text, floodBegin, floodEnd)), 0o644)
}

// flood starts callers that post to d's /validate without a client certificate,
// counting into fr, until the returned stop is called (or floodLimit passes).
func flood(ctx context.Context, d *dev, callers int, spec map[string]any, fr *floodResult) (stop func()) {
	ctx, cancel := context.WithTimeout(ctx, floodLimit)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(d.caPEM)
	// Keep-alive connections, as a caller who wants the most requests from its CPU does.
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: callers,
	}
	caller := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	body := admissionReview(admissionv1.Create, fireworksGVK, "fireworksapps", benchNamespace, "bench-0", composition(benchNamespace, 0, spec), nil)
	var (
		wg      sync.WaitGroup
		sent    atomic.Int64
		refused atomic.Int64
		once    sync.Once
	)
	for range callers {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/validate", bytes.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := caller.Do(req)
				sent.Add(1)
				if err != nil {
					if ctx.Err() == nil {
						once.Do(func() { fr.Other = err.Error() })
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusForbidden {
					refused.Add(1)
				} else {
					once.Do(func() { fr.Other = resp.Status })
				}
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
		transport.CloseIdleConnections()
		fr.Sent, fr.Refused = sent.Load(), refused.Load()
	}
}

func floodMarkdown(callers int, o options, rounds []floodResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n## Unauthenticated callers on the webhook port (issue 46)\n\n", floodBegin)
	fmt.Fprintf(&b, "`go run ./test/bench -flood %d`, %s: %d creates of a FireworksApp through the API server at concurrency %d, "+
		"quiet and while %d callers without a client certificate post a composition's AdmissionReview to `/validate` over loopback, each again as soon as it is answered "+
		"(keep-alive connections), after %d unmeasured creates; `compositor dev` requires the API server's client certificate (`--webhook-client-ca`).\n\n",
		callers, time.Now().UTC().Format("2006-01-02"), o.e2eCreates, o.e2eConcurrency, callers, o.e2eCreates)
	b.WriteString("| round | quiet p50 | quiet p99 | flooded p50 | flooded p99 | p99 ratio | flood requests | answered 403 | other answer |\n|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range rounds {
		ratio := 0.0
		if r.Quiet.P99 > 0 {
			ratio = r.Flooded.P99 / r.Quiet.P99
		}
		other := r.Other
		if other == "" {
			other = "none"
		}
		fmt.Fprintf(&b, "| %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.2f× | %d | %d | %s |\n",
			i+1, r.Quiet.P50, r.Quiet.P99, r.Flooded.P50, r.Flooded.P99, ratio, r.Sent, r.Refused, other)
		if r.Quiet.Errors+r.Flooded.Errors > 0 {
			fmt.Fprintf(&b, "\nRound %d: %d quiet and %d flooded creates failed; the first: %s %s\n\n", i+1, r.Quiet.Errors, r.Flooded.Errors, r.Quiet.FirstError, r.Flooded.FirstError)
		}
	}
	quiet, flooded := medianP99(rounds, func(r floodResult) result { return r.Quiet }), medianP99(rounds, func(r floodResult) result { return r.Flooded })
	fmt.Fprintf(&b, "| median of the rounds | | %.1f ms | | %.1f ms | **%.2f×** | | | |\n", quiet, flooded, flooded/quiet)
	fmt.Fprintf(&b, "\nA caller without a certificate is answered 403 after %s (`refusalDelay` in `webhooks/clientauth.go`; at most %d wait at once), before its body is read, "+
		"so each of its connections asks about once a second; a certificate of another CA fails the TLS handshake. "+
		"The flood's callers run in the harness, on the same %d CPUs as the API server, etcd and Compositor (load average %s when the report was written).\n",
		"1s", 512, runtime.NumCPU(), loadAverage())
	b.WriteString("\n" + floodEnd + "\n")
	return b.String()
}

// medianP99 is the median over rounds of the p99 of the run of each that of picks.
func medianP99(rounds []floodResult, of func(floodResult) result) float64 {
	p99s := make([]float64, 0, len(rounds))
	for _, r := range rounds {
		p99s = append(p99s, of(r).P99)
	}
	slices.Sort(p99s)
	return p99s[len(p99s)/2]
}

// loadAverage is the machine's 1-, 5- and 15-minute load average, as /proc/loadavg has
// it.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fields := strings.Fields(string(data))
	if len(fields) < 3 {
		return "unknown"
	}
	return strings.Join(fields[:3], " ")
}

// carryFloodSection keeps old's flood section in fresh, as make bench rewrites the
// file.
func carryFloodSection(old, fresh string) string {
	return carrySection(old, fresh, floodBegin, floodEnd)
}
