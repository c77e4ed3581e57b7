package chartfetch

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

const userAgent = "compositor-chartfetch"

// session is the network side of one Fetch: an http.Client whose every request and
// every connection passes the policy, bound to the Fetch's context (Helm's registry
// client starts its requests with context.Background), and closed when the Fetch ends.
type session struct {
	ctx     context.Context
	timeout time.Duration
	guard   DialGuard
	// resolver and dialer make every connection: the guard judges each resolved
	// address before it is dialled, and again in the dialer's Control hook.
	resolver Resolver
	dialer   *net.Dialer
	base     *http.Transport
	client   *http.Client
	// maxBody bounds every response body; libraries read through it unaware.
	maxBody int64

	mu sync.Mutex
	// refusal remembers the first policy or size refusal, so it still reaches the
	// caller when a library flattens the error chain on its way up.
	refusal error
	// plainHTTP records that a loopback server answered a TLS handshake in plain HTTP.
	plainHTTP bool
}

func (f *Fetcher) newSession(ctx context.Context, ref Ref, maxBody int64) (*session, error) {
	tlsConf, err := tlsConfig(ref)
	if err != nil {
		return nil, err
	}
	s := &session{ctx: ctx, timeout: f.opts.Timeout, guard: f.opts.DialGuard, resolver: f.opts.Resolver, maxBody: maxBody}
	s.dialer = &net.Dialer{
		Timeout:   f.opts.Timeout,
		KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			if err := guardErr(s.guard(network, address)); err != nil {
				s.refuse(err)
				return err
			}
			return nil
		},
	}
	s.base = &http.Transport{
		Proxy:                  nil, // a proxy would hide the destination from the dial guard
		DialContext:            s.dial,
		TLSClientConfig:        tlsConf,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    f.opts.Timeout,
		ResponseHeaderTimeout:  f.opts.Timeout,
		MaxResponseHeaderBytes: 1 << 20,
		// A .tgz served with Content-Encoding: gzip must reach us as stored, or its
		// digest would not match.
		DisableCompression: true,
		IdleConnTimeout:    30 * time.Second,
	}
	maxRedirects := f.opts.MaxRedirects
	s.client = &http.Client{
		Transport: s,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects {
				return fmt.Errorf("%w: more than %d after %s", ErrTooManyRedirects, maxRedirects, via[0].URL.Redacted())
			}
			if err := checkURL(req.URL, s.guard); err != nil {
				return err
			}
			// net/http copies headers from the first request; credentials stay with
			// its exact origin.
			if !sameOrigin(req.URL, via[0].URL) {
				req.Header.Del("Authorization")
			}
			return nil
		},
	}
	return s, nil
}

func (s *session) close() { s.base.CloseIdleConnections() }

// dial resolves address itself, so that the dial guard judges the very IP that is
// dialled (a name that resolves to another address on a second lookup, DNS rebinding,
// gains nothing), and dials the allowed addresses in turn.
func (s *session) dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = s.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	var errs []error
	var refused error
	for _, ip := range ips {
		target := net.JoinHostPort(ip.String(), port)
		if err := guardErr(s.guard(network, target)); err != nil {
			refused = cmp.Or(refused, fmt.Errorf("%s: %w", host, err))
			errs = append(errs, err)
			continue
		}
		conn, err := s.dialer.DialContext(ctx, network, target)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	if refused != nil {
		s.refuse(refused) // only once no address of host could be reached
	}
	if len(errs) == 0 {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}}
	}
	return nil, errors.Join(errs...)
}

func (s *session) refuse(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refusal == nil {
		s.refusal = err
	}
}

func (s *session) sawPlainHTTP() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plainHTTP
}

// RoundTrip applies the URL policy to every request (redirects, registry token
// endpoints, blob URLs), ties it to the Fetch's context and bounds its body.
func (s *session) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := checkURL(req.URL, s.guard); err != nil {
		s.refuse(err)
		return nil, err
	}
	ctx, cancel := context.WithCancel(req.Context())
	stop := context.AfterFunc(s.ctx, cancel)
	done := func() { stop(); cancel() }

	resp, err := s.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		done()
		var rhe tls.RecordHeaderError
		if errors.As(err, &rhe) && string(rhe.RecordHeader[:]) == "HTTP/" && isLoopbackHost(req.URL.Hostname()) {
			s.mu.Lock()
			s.plainHTTP = true
			s.mu.Unlock()
		}
		return nil, err
	}
	if s.maxBody > 0 && resp.ContentLength > s.maxBody {
		resp.Body.Close()
		done()
		err := fmt.Errorf("%w: %s announces %d bytes, over the %d-byte limit",
			ErrArchiveTooLarge, req.URL.Redacted(), resp.ContentLength, s.maxBody)
		s.refuse(err)
		return nil, err
	}
	resp.Body = &boundedBody{rc: resp.Body, left: s.maxBody, url: req.URL, s: s, done: done}
	return resp, nil
}

// boundedBody fails a read past the session's body limit and releases the request's
// context when closed.
type boundedBody struct {
	rc   io.ReadCloser
	left int64 // bytes still allowed; unlimited when the session has no limit
	url  *url.URL
	s    *session
	once sync.Once
	done func()
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.s.maxBody <= 0 {
		return b.rc.Read(p)
	}
	if b.left <= 0 {
		// One more byte tells an exact fit from an overflow.
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 {
			return 0, err
		}
		err := fmt.Errorf("%w: %s sent more than %d bytes", ErrArchiveTooLarge, b.url.Redacted(), b.s.maxBody)
		b.s.refuse(err)
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error {
	err := b.rc.Close()
	b.once.Do(b.done)
	return err
}

// get downloads u and returns at most limit bytes, or an error wrapping tooLarge.
// Basic auth goes only to the origin of authOrigin.
func (s *session) get(u, authOrigin *url.URL, ref Ref, limit int64, tooLarge error) ([]byte, error) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRef, err)
	}
	req.Header.Set("User-Agent", userAgent)
	if ref.Username != "" && sameOrigin(u, authOrigin) {
		req.SetBasicAuth(ref.Username, ref.Password)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, s.classify(u.Host, err)
	}
	defer resp.Body.Close()

	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, unauthorized(u.Host, ref.Username, resp.Status)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: %s answered %s", ErrNotFound, u.Redacted(), resp.Status)
	default:
		return nil, fmt.Errorf("GET %s: unexpected status %s", u.Redacted(), resp.Status)
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes, over the %d-byte limit", tooLarge, u.Redacted(), resp.ContentLength, limit)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, s.classify(u.Host, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: %s is over the %d-byte limit", tooLarge, u.Redacted(), limit)
	}
	return data, nil
}

// classify turns a transport error into one that matches a sentinel and names host.
func (s *session) classify(host string, err error) error {
	redactURLError(err)
	for _, sentinel := range []error{ErrBlockedAddress, ErrUnsupportedURL, ErrTooManyRedirects, ErrArchiveTooLarge} {
		if errors.Is(err, sentinel) {
			return err
		}
	}
	s.mu.Lock()
	refusal := s.refusal
	s.mu.Unlock()
	if refusal != nil {
		return fmt.Errorf("%w (%v)", refusal, err)
	}
	var nerr net.Error
	switch {
	case errors.Is(s.ctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &nerr) && nerr.Timeout():
		return fmt.Errorf("%w: %s did not answer within %s: %w", ErrTimeout, host, s.timeout, err)
	case s.ctx.Err() != nil:
		return fmt.Errorf("fetch from %s canceled: %w", host, s.ctx.Err())
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return fmt.Errorf("%w: %s: %w", ErrTLSVerification, host, certErr.Err)
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if (errors.As(err, &opErr) && opErr.Op == "dial") || errors.As(err, &dnsErr) {
		return fmt.Errorf("%w: cannot connect to %s: %w", ErrUnreachable, host, err)
	}
	return err
}

// redactURLError hides what the URL of a *url.Error in err's chain may hold that is
// not for everyone who reads the error (it ends up in a definition's status): net/http
// puts a redirect's Location there as the server sent it, password and signed query
// included. The password becomes xxxxx, a query "?…".
func redactURLError(err error) {
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		return
	}
	u, perr := url.Parse(uerr.URL)
	if perr != nil {
		uerr.URL = "(unparsable URL)"
		return
	}
	query := ""
	if u.RawQuery != "" || u.ForceQuery {
		query = "?…"
	}
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	uerr.URL = u.Redacted() + query
}

func unauthorized(host, username, status string) error {
	if username == "" {
		return fmt.Errorf("%w: %s requires credentials (%s)", ErrUnauthorized, host, status)
	}
	return fmt.Errorf("%w: %s rejected the credentials of user %q (%s)", ErrUnauthorized, host, username, status)
}

func sameOrigin(a, b *url.URL) bool {
	return b != nil && strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}

func tlsConfig(ref Ref) (*tls.Config, error) {
	conf := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: ref.InsecureSkipVerifyTLS, // asked for in spec.chart; a built-in policy can deny it
	}
	if len(ref.CAData) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(ref.CAData) {
			return nil, fmt.Errorf("%w: CA data holds no PEM certificate", ErrInvalidRef)
		}
		conf.RootCAs = pool
	}
	return conf, nil
}
