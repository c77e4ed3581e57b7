package app

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A restart with the same data directory listens where the last one did.
func TestStableWebhookAddrRemembered(t *testing.T) {
	dir := t.TempDir()
	first, err := stableWebhookAddr(dir, "127.0.0.1:0")
	require.NoError(t, err)
	assert.Empty(t, first.Taken)
	_, port, err := net.SplitHostPort(first.Addr)
	require.NoError(t, err)
	assert.NotEqual(t, "0", port)

	b, err := os.ReadFile(filepath.Join(dir, webhookAddressFile))
	require.NoError(t, err)
	assert.Equal(t, first.Addr, strings.TrimSpace(string(b)))

	again, err := stableWebhookAddr(dir, "127.0.0.1:0")
	require.NoError(t, err)
	assert.Equal(t, webhookAddr{Addr: first.Addr}, again)
}

// When another program holds the remembered port, dev says so and moves, and the new
// address is the one remembered.
func TestStableWebhookAddrTaken(t *testing.T) {
	dir := t.TempDir()
	first, err := stableWebhookAddr(dir, "127.0.0.1:0")
	require.NoError(t, err)

	l, err := net.Listen("tcp", first.Addr)
	require.NoError(t, err)
	moved, err := stableWebhookAddr(dir, "127.0.0.1:0")
	require.NoError(t, l.Close())
	require.NoError(t, err)
	assert.Equal(t, first.Addr, moved.Taken)
	assert.NotEqual(t, first.Addr, moved.Addr)

	again, err := stableWebhookAddr(dir, "127.0.0.1:0")
	require.NoError(t, err)
	assert.Equal(t, webhookAddr{Addr: moved.Addr}, again, "the new address is remembered")
}

func TestStableWebhookAddrExplicitOrUnusable(t *testing.T) {
	dir := t.TempDir()
	// An explicit port is the user's choice: used as given, not remembered.
	got, err := stableWebhookAddr(dir, "127.0.0.1:9443")
	require.NoError(t, err)
	assert.Equal(t, webhookAddr{Addr: "127.0.0.1:9443"}, got)
	assert.NoFileExists(t, filepath.Join(dir, webhookAddressFile))

	// A remembered address for another host, or an unreadable one, is replaced.
	for _, content := range []string{"192.0.2.1:4444\n", "not an address", "127.0.0.1:0"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, webhookAddressFile), []byte(content), 0o600))
		got, err := stableWebhookAddr(dir, "127.0.0.1:0")
		require.NoError(t, err, content)
		assert.Empty(t, got.Taken, content)
		host, port, err := net.SplitHostPort(got.Addr)
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", host, content)
		assert.NotEqual(t, "0", port, content)
		b, err := os.ReadFile(filepath.Join(dir, webhookAddressFile))
		require.NoError(t, err)
		assert.Equal(t, got.Addr+"\n", string(b), content)
	}

	_, err = stableWebhookAddr(dir, "no-port")
	assert.Error(t, err)
}
