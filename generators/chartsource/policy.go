package chartsource

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	broadcast   = netip.MustParseAddr("255.255.255.255")
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	// AWS serves instance metadata on this unique-local address as well as on
	// 169.254.169.254.
	awsMetadataV6 = netip.MustParseAddr("fd00:ec2::254")
)

// CheckAddress is the default DialGuard. It refuses link-local addresses (which
// include the cloud metadata endpoint 169.254.169.254), unspecified, 0.0.0.0/8,
// broadcast and multicast addresses, the IPv4-mapped and NAT64 forms of those, and the
// AWS IPv6 metadata address. address is "ip:port" or a bare IP; anything else is
// refused. Errors wrap ErrBlockedAddress.
func CheckAddress(network, address string) error {
	host := address
	if h, _, err := net.SplitHostPort(address); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %q is not an IP address", ErrBlockedAddress, address)
	}
	if reason := blockedReason(ip); reason != "" {
		return fmt.Errorf("%w: %s is %s", ErrBlockedAddress, address, reason)
	}
	return nil
}

func blockedReason(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	if nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte(b[12:]))
	}
	switch {
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLinkLocalUnicast():
		return "link-local (where cloud metadata endpoints live)"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip.Is4() && thisNetwork.Contains(ip):
		return "in 0.0.0.0/8"
	case ip == broadcast:
		return "broadcast"
	case ip == awsMetadataV6:
		return "a cloud metadata endpoint"
	}
	return ""
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
