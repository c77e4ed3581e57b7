package app

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// webhookAddressFile, in dev's data directory, remembers the address dev's webhooks
// listen on. The CRDs generated into that control plane carry it in their conversion
// webhook, so a restart that moved the webhooks would leave them pointing nowhere.
const webhookAddressFile = "compositor-webhook-address"

// webhookAddr is the address dev's webhooks listen on, and how it was chosen.
type webhookAddr struct {
	// Addr is host:port.
	Addr string
	// Taken is the remembered address when another program held it and Addr had to
	// differ; empty otherwise.
	Taken string
}

// stableWebhookAddr resolves addr for dev. A port other than 0 is used as given. Port 0
// means the address remembered in dataDir while its port is free on addr's host, or a
// port that is free now, which is remembered from then on.
func stableWebhookAddr(dataDir, addr string) (webhookAddr, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return webhookAddr{}, err
	}
	if port != "0" {
		return webhookAddr{Addr: addr}, nil
	}
	file := filepath.Join(dataDir, webhookAddressFile)
	remembered, err := readRememberedAddr(file, host)
	if err != nil {
		return webhookAddr{}, err
	}
	var out webhookAddr
	if remembered != "" {
		if portFree(remembered) {
			return webhookAddr{Addr: remembered}, nil
		}
		out.Taken = remembered
	}
	if out.Addr, err = resolvePort(addr); err != nil {
		return webhookAddr{}, err
	}
	if err := os.WriteFile(file, []byte(out.Addr+"\n"), 0o600); err != nil {
		return webhookAddr{}, fmt.Errorf("remembering the webhook address: %w", err)
	}
	return out, nil
}

// readRememberedAddr returns the address remembered in file when it is on host, or "".
func readRememberedAddr(file, host string) (string, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the remembered webhook address: %w", err)
	}
	addr := strings.TrimSpace(string(b))
	h, p, err := net.SplitHostPort(addr)
	if err != nil || h != host || p == "0" || p == "" {
		// Unreadable, or remembered for another --webhook-bind-address: choose anew.
		return "", nil
	}
	return addr, nil
}

// portFree tells whether addr can be listened on now.
func portFree(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// resolvePort replaces port 0 in addr with a port that is free now.
func resolvePort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "0" {
		return addr, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
