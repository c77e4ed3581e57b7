package chartfetch_test

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/test/chartserver"
)

func TestCheckAddress(t *testing.T) {
	never := []string{
		"169.254.169.254:80", "169.254.0.1:443", "[fe80::1]:443", "[fe80::1%eth0]:443",
		"[::ffff:169.254.169.254]:80", "[64:ff9b::a9fe:a9fe]:80", "[fd00:ec2::254]:80",
		"0.0.0.0:80", "0.1.2.3:80", "[::]:443", "224.0.0.1:80", "[ff02::1]:80", "255.255.255.255:80",
		"[2002:a9fe:a9fe::1]:80", // 6to4 of the metadata address
	}
	private := map[string]string{ // address → the range the refusal names
		"127.0.0.1:8080":            "127.0.0.0/8",
		"[::1]:443":                 "::1/128",
		"10.0.0.7:443":              "10.0.0.0/8",
		"172.16.0.1":                "172.16.0.0/12",
		"192.168.1.2:80":            "192.168.0.0/16",
		"100.64.0.1:443":            "100.64.0.0/10",
		"[fd12:3456::1]:443":        "fc00::/7",
		"[::ffff:10.1.2.3]:443":     "10.0.0.0/8", // IPv4-mapped
		"[::ffff:127.0.0.1]:443":    "127.0.0.0/8",
		"[64:ff9b::a00:1]:443":      "10.0.0.0/8",     // NAT64 of 10.0.0.1
		"[2002:c0a8:0102::1]:443":   "192.168.0.0/16", // 6to4 of 192.168.1.2
		"[2001:0:1:2::f5fe:fefe]:1": "10.0.0.0/8",     // Teredo client 10.1.1.1
		"[::10.0.0.1]:443":          "10.0.0.0/8",     // IPv4-compatible
		"198.18.0.1:443":            "198.18.0.0/15",
	}
	public := []string{"8.8.8.8:443", "[2001:db8::1]:443", "[2606:4700::1111]:443", "[2002:808:808::1]:443"}

	for _, a := range never {
		assert.ErrorIs(t, chartfetch.CheckAddress("tcp", a), chartfetch.ErrBlockedAddress, a)
		err := chartfetch.NewAddressGuard(chartfetch.PrivateNetworks())("tcp", a)
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress, "no allow-list opens %s", a)
		assert.NotContains(t, err.Error(), "--allow-chart-network", a)
	}
	assert.ErrorIs(t, chartfetch.CheckAddress("tcp", "not-an-ip:80"), chartfetch.ErrBlockedAddress)
	for a, prefix := range private {
		err := chartfetch.CheckAddress("tcp", a)
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress, a)
		assert.Contains(t, err.Error(), a, "names the address")
		assert.Contains(t, err.Error(), "in "+prefix, "names the range")
		assert.Contains(t, err.Error(), "allow it with --allow-chart-network "+prefix, "names the flag")
		assert.NoError(t, chartfetch.NewAddressGuard([]netip.Prefix{netip.MustParsePrefix(prefix)})("tcp", a), a)
		assert.NoError(t, chartfetch.NewAddressGuard(chartfetch.PrivateNetworks())("tcp", a), a)
	}
	for _, a := range public {
		assert.NoError(t, chartfetch.CheckAddress("tcp", a), a)
	}

	t.Run("an allow-list opens only what it names", func(t *testing.T) {
		guard := chartfetch.NewAddressGuard([]netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")})
		assert.NoError(t, guard("tcp", "10.1.2.3:443"))
		assert.ErrorIs(t, guard("tcp", "10.2.0.1:443"), chartfetch.ErrBlockedAddress)
		assert.ErrorIs(t, guard("tcp", "127.0.0.1:443"), chartfetch.ErrBlockedAddress)
		assert.ErrorIs(t, guard("tcp", "169.254.169.254:80"), chartfetch.ErrBlockedAddress)
	})
	t.Run("loopback networks", func(t *testing.T) {
		guard := chartfetch.NewAddressGuard(chartfetch.LoopbackNetworks())
		assert.NoError(t, guard("tcp", "127.0.0.1:8879"))
		assert.NoError(t, guard("tcp", "[::1]:8879"))
		assert.ErrorIs(t, guard("tcp", "10.0.0.1:443"), chartfetch.ErrBlockedAddress)
	})
}

// fakeResolver answers every lookup from a table and records what it was asked; no
// name ever reaches real DNS.
type fakeResolver struct {
	mu    sync.Mutex
	hosts map[string][]string
	asked []string
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	var out []netip.Addr
	for _, a := range r.hosts[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// dialRecorder is a dial guard that records every address asked about and refuses
// everything outside loopback by delegating to the default guard with loopback allowed.
type dialRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (d *dialRecorder) guard(network, address string) error {
	d.mu.Lock()
	d.seen = append(d.seen, address)
	d.mu.Unlock()
	return loopbackGuard(network, address)
}

// TestFetchJudgesResolvedAddresses resolves chart hosts through an injected resolver:
// names that resolve to refused ranges are refused at dial time, before any
// connection, and a name resolving to loopback reaches the loopback chart server only
// when loopback is allowed. No connection leaves loopback.
func TestFetchJudgesResolvedAddresses(t *testing.T) {
	resolver := &fakeResolver{hosts: map[string][]string{
		"internal.example.test": {"10.20.30.40"},
		"cgnat.example.test":    {"100.64.1.1"},
		"ula.example.test":      {"fd00::1234"},
		"metadata.example.test": {"169.254.169.254"},
		"mapped.example.test":   {"::ffff:192.168.0.10"},
		"mixed.example.test":    {"10.0.0.1", "fd00::1"},
	}}
	for host, want := range map[string]string{
		"internal.example.test": "10.0.0.0/8",
		"cgnat.example.test":    "100.64.0.0/10",
		"ula.example.test":      "fc00::/7",
		"metadata.example.test": "169.254.0.0/16",
		"mapped.example.test":   "192.168.0.0/16",
		"mixed.example.test":    "fc00::/7",
	} {
		t.Run(host, func(t *testing.T) {
			rec := &dialRecorder{}
			f := newFetcher(t, chartfetch.Options{DialGuard: rec.guard, Resolver: resolver})
			for _, ref := range []chartfetch.Ref{
				{URL: "https://" + host + "/app-1.0.0.tgz"},
				{URL: "https://" + host + "/charts", Repo: "app", Version: "1.0.0"},
				{URL: "oci://" + host + "/charts/app", Version: "1.0.0"},
			} {
				_, err := f.Fetch(ctx(t), ref)
				require.ErrorIs(t, err, chartfetch.ErrBlockedAddress, ref.URL)
				assert.Contains(t, err.Error(), want, ref.URL)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, a := range rec.seen {
				ip, err := netip.ParseAddrPort(a)
				require.NoError(t, err)
				assert.False(t, ip.Addr().Unmap().IsLoopback(), "only the resolved addresses were judged: %s", a)
			}
		})
	}

	t.Run("a name that resolves to loopback", func(t *testing.T) {
		archive := tinyChart(t, "app", "1.0.0")
		srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: chartsDir(t, map[string][]byte{"app-1.0.0.tgz": archive}), TLS: true})
		_, port, err := net.SplitHostPort(srv.Host)
		require.NoError(t, err)
		// example.com is a name in httptest's certificate; it never reaches real DNS.
		resolver := &fakeResolver{hosts: map[string][]string{"example.com": {"127.0.0.1"}}}
		ref := chartfetch.Ref{URL: "https://example.com:" + port + "/app-1.0.0.tgz", CAData: srv.CAPEM}

		_, err = newFetcher(t, chartfetch.Options{AllowNetworks: []netip.Prefix{}, Resolver: resolver}).Fetch(ctx(t), ref)
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress, "loopback is refused by default")
		assert.Contains(t, err.Error(), "127.0.0.1:"+port)
		assert.Contains(t, err.Error(), "--allow-chart-network 127.0.0.0/8")
		assert.Empty(t, srv.Requests(), "refused before any request")

		res, err := newFetcher(t, chartfetch.Options{AllowNetworks: chartfetch.LoopbackNetworks(), Resolver: resolver}).Fetch(ctx(t), ref)
		require.NoError(t, err)
		assert.Equal(t, sha(archive), res.Digest)
		assert.Len(t, srv.Requests(), 1)
	})
}

func TestFetchRefusesLoopbackByDefault(t *testing.T) {
	archive := tinyChart(t, "app", "1.0.0")
	srv := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: chartsDir(t, map[string][]byte{"app-1.0.0.tgz": archive})})
	resolver := &fakeResolver{hosts: map[string][]string{"localhost": {"127.0.0.1", "::1"}}}
	_, port, err := net.SplitHostPort(srv.Host)
	require.NoError(t, err)
	for _, ref := range []chartfetch.Ref{
		{URL: srv.URL + "/app-1.0.0.tgz"},
		{URL: srv.URL, Repo: "app", Version: "1.0.0"},
		{URL: "http://localhost:" + port + "/app-1.0.0.tgz"},
		{URL: "http://[::1]:" + port + "/app-1.0.0.tgz"},
		{URL: "oci://" + srv.Host + "/charts/app", Version: "1.0.0"},
	} {
		f, err := chartfetch.New(chartfetch.Options{Resolver: resolver})
		require.NoError(t, err)
		_, err = f.Fetch(ctx(t), ref)
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress, ref.URL)
		assert.Contains(t, err.Error(), "is loopback", ref.URL)
		assert.Contains(t, err.Error(), "--allow-chart-network", ref.URL)
	}
	assert.Empty(t, srv.Requests())
}

// TestFetchRefusesPrivateRedirects follows a loopback server (allowed) that redirects
// to private addresses, by IP and by a name the injected resolver maps into 10/8:
// every hop is judged, and nothing is dialled outside loopback.
func TestFetchRefusesPrivateRedirects(t *testing.T) {
	front := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: t.TempDir()})
	redirect := func(to string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, http.StatusFound) })
	}
	front.Handle("/ip.tgz", redirect("https://10.0.0.1/x.tgz"))
	front.Handle("/cgnat.tgz", redirect("https://100.64.0.1/x.tgz"))
	front.Handle("/ula.tgz", redirect("https://[fd00::1]/x.tgz"))
	front.Handle("/name.tgz", redirect("https://internal.example.test/x.tgz"))
	resolver := &fakeResolver{hosts: map[string][]string{"internal.example.test": {"10.9.9.9"}}}
	for path, want := range map[string]string{"/ip.tgz": "10.0.0.0/8", "/cgnat.tgz": "100.64.0.0/10", "/ula.tgz": "fc00::/7", "/name.tgz": "10.9.9.9:443"} {
		rec := &dialRecorder{}
		f := newFetcher(t, chartfetch.Options{DialGuard: rec.guard, Resolver: resolver})
		_, err := f.Fetch(ctx(t), chartfetch.Ref{URL: front.URL + path})
		require.ErrorIs(t, err, chartfetch.ErrBlockedAddress, path)
		assert.Contains(t, err.Error(), want, path)
		rec.mu.Lock()
		for _, a := range rec.seen {
			if a != front.Host {
				assert.Error(t, loopbackGuard("tcp", a), "only refused addresses besides the front server: %s", a)
			}
		}
		rec.mu.Unlock()
	}
}

// FuzzCheckAddress checks the default guard against the standard library's own
// classification: whatever it lets through is, as dialled and once unmapped, neither
// loopback, private, link-local, multicast nor unspecified.
func FuzzCheckAddress(f *testing.F) {
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "::ffff:192.168.0.1", "64:ff9b::a00:1", "2002:a00:1::", "fd00::1", "8.8.8.8", "2001:db8::1"} {
		f.Add(netip.MustParseAddr(a).AsSlice())
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ip, ok := netip.AddrFromSlice(raw)
		if !ok {
			return
		}
		if chartfetch.CheckAddress("tcp", netip.AddrPortFrom(ip, 443).String()) != nil {
			return
		}
		for _, a := range []netip.Addr{ip, ip.Unmap()} {
			if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
				a.IsMulticast() || a.IsUnspecified() || a.IsInterfaceLocalMulticast() {
				t.Fatalf("allowed %s", ip)
			}
		}
	})
}
