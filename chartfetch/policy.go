package chartfetch

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// addressRange is a range of addresses a chart fetch does not reach by default.
type addressRange struct {
	prefix netip.Prefix
	what   string
}

func ranges(what string, prefixes ...string) []addressRange {
	out := make([]addressRange, 0, len(prefixes))
	for _, p := range prefixes {
		out = append(out, addressRange{prefix: netip.MustParsePrefix(p), what: what})
	}
	return out
}

// neverReached are ranges no allow-list opens: nothing a chart registry lives at,
// and where cloud metadata endpoints do. The AWS IPv6 metadata address sits inside the
// unique-local range, so it is listed here to win over that range's allowance.
var neverReached = concat(
	ranges("unspecified", "0.0.0.0/8", "::/128"),
	ranges("link-local (where cloud metadata endpoints live)", "169.254.0.0/16", "fe80::/10"),
	ranges("a cloud metadata endpoint", "fd00:ec2::254/128"),
	ranges("multicast", "224.0.0.0/4", "ff00::/8"),
	ranges("broadcast", "255.255.255.255/32"),
)

// privateRanges are refused unless Options.AllowNetworks opens them: a chart URL comes
// from a tenant, and Compositor must not become their way into the cluster's own
// network (the API server, kubelets, in-cluster services) or the node's loopback.
var privateRanges = concat(
	ranges("loopback", "127.0.0.0/8", "::1/128"),
	ranges("private (RFC 1918)", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
	ranges("shared address space (CGNAT, RFC 6598)", "100.64.0.0/10"),
	ranges("unique local (ULA, RFC 4193)", "fc00::/7"),
	ranges("site-local (deprecated, RFC 3879)", "fec0::/10"),
	ranges("IETF protocol assignments (RFC 6890)", "192.0.0.0/24"),
	ranges("benchmarking (RFC 2544)", "198.18.0.0/15"),
	ranges("reserved (RFC 1112)", "240.0.0.0/4"),
	ranges("local-use NAT64 (RFC 8215)", "64:ff9b:1::/48"),
)

func concat(lists ...[]addressRange) []addressRange {
	var out []addressRange
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// LoopbackNetworks are 127.0.0.0/8 and ::1: what `compositor dev` and tests with
// charts served on this machine add to Options.AllowNetworks.
func LoopbackNetworks() []netip.Prefix {
	return []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
}

// PrivateNetworks are every range refused by default that an allow-list may open
// (loopback, RFC 1918, CGNAT, ULA, ...): for a person's own command-line tools, which
// fetch what that person names and so cannot be turned against a cluster.
func PrivateNetworks() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(privateRanges))
	for _, r := range privateRanges {
		out = append(out, r.prefix)
	}
	return out
}

// CheckAddress is the default DialGuard: NewAddressGuard with nothing allowed.
func CheckAddress(network, address string) error {
	return checkAddress(address, nil)
}

// NewAddressGuard returns a DialGuard that refuses the addresses a chart fetch must not
// reach: always link-local (with the cloud metadata endpoints), unspecified, multicast
// and broadcast addresses; and, unless one of allow contains them, loopback, RFC 1918,
// CGNAT, unique-local and the other special-purpose ranges. IPv4 addresses embedded in
// IPv6 (IPv4-mapped, IPv4-compatible, NAT64, 6to4 and Teredo) are judged as the IPv4
// address they reach. address is "ip:port" or a bare IP; anything else is refused.
// Errors wrap ErrBlockedAddress and say which address, which range, and which
// --allow-chart-network value would allow it.
func NewAddressGuard(allow []netip.Prefix) DialGuard {
	allow = append([]netip.Prefix(nil), allow...)
	return func(_, address string) error { return checkAddress(address, allow) }
}

func checkAddress(address string, allow []netip.Prefix) error {
	host := address
	if h, _, err := net.SplitHostPort(address); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %q is not an IP address", ErrBlockedAddress, address)
	}
	ip = ip.WithZone("").Unmap()
	for _, candidate := range reachedAddresses(ip) {
		if err := judge(address, ip, candidate, allow); err != nil {
			return err
		}
	}
	return nil
}

// judge refuses candidate, one address that dialling ip reaches, when it lies in a
// range that is never reached, or in a private range that allow does not open.
func judge(address string, ip, candidate netip.Addr, allow []netip.Prefix) error {
	via := ""
	if candidate != ip {
		via = fmt.Sprintf(" (it reaches %s)", candidate)
	}
	for _, r := range neverReached {
		if r.prefix.Contains(candidate) {
			return fmt.Errorf("%w: %s%s is %s, in %s, which chart sources never reach",
				ErrBlockedAddress, address, via, r.what, r.prefix)
		}
	}
	for _, r := range privateRanges {
		if !r.prefix.Contains(candidate) || allowed(allow, ip, candidate) {
			continue
		}
		return fmt.Errorf("%w: %s%s is %s, in %s, refused by default; allow it with --allow-chart-network %s",
			ErrBlockedAddress, address, via, r.what, r.prefix, r.prefix)
	}
	return nil
}

func allowed(allow []netip.Prefix, addrs ...netip.Addr) bool {
	for _, p := range allow {
		for _, a := range addrs {
			if p.Contains(a) {
				return true
			}
		}
	}
	return false
}

var (
	ipv4Compatible = netip.MustParsePrefix("::/96")
	nat64          = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour      = netip.MustParsePrefix("2002::/16")
	teredo         = netip.MustParsePrefix("2001::/32")
)

// reachedAddresses returns ip and, for an IPv6 address that carries an IPv4 address a
// translator or tunnel would deliver to, that IPv4 address too.
func reachedAddresses(ip netip.Addr) []netip.Addr {
	if !ip.Is6() {
		return []netip.Addr{ip}
	}
	b := ip.As16()
	var v4 [4]byte
	switch {
	case nat64.Contains(ip), ipv4Compatible.Contains(ip) && ip != netip.IPv6Unspecified() && ip != netip.IPv6Loopback():
		copy(v4[:], b[12:])
	case sixToFour.Contains(ip):
		copy(v4[:], b[2:6])
	case teredo.Contains(ip): // the client's address, inverted (RFC 4380)
		for i := range v4 {
			v4[i] = b[12+i] ^ 0xff
		}
	default:
		return []netip.Addr{ip}
	}
	return []netip.Addr{ip, netip.AddrFrom4(v4)}
}

// isLoopbackHost reports whether a URL host (no port) names the local machine.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.WithZone("").Unmap().IsLoopback()
}

// checkURL applies the scheme rules and, for IP literals, the dial guard to a URL
// about to be requested. It runs for the chart URL, for archive URLs named by an
// index, for every redirect and for every request a library makes on our behalf, so
// a refusal happens before any connection.
func checkURL(u *url.URL, guard DialGuard) error {
	if u.User != nil {
		return fmt.Errorf("%w: %s: credentials in the URL are not accepted; use spec.chart.credentials",
			ErrUnsupportedURL, u.Redacted())
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("%w: %s has no host", ErrUnsupportedURL, u.Redacted())
	}
	if _, err := netip.ParseAddr(host); err == nil {
		port := u.Port()
		if port == "" {
			port = "443"
			if strings.EqualFold(u.Scheme, "http") {
				port = "80"
			}
		}
		if err := guardErr(guard("tcp", net.JoinHostPort(host, port))); err != nil {
			return err
		}
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return nil
	case "http":
		if isLoopbackHost(host) {
			return nil
		}
		return fmt.Errorf("%w: %s: plain http is only allowed to loopback; use https",
			ErrUnsupportedURL, u.Redacted())
	default:
		return fmt.Errorf("%w: %s: scheme %q is not allowed (https, oci, or http to loopback)",
			ErrUnsupportedURL, u.Redacted(), u.Scheme)
	}
}

// guardErr makes any refusal from a custom DialGuard match ErrBlockedAddress.
func guardErr(err error) error {
	if err == nil || errors.Is(err, ErrBlockedAddress) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrBlockedAddress, err)
}
