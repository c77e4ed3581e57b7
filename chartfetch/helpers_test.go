package chartfetch_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// tinyChart packages a minimal valid chart and returns the archive bytes.
func tinyChart(t testing.TB, name, version string) []byte {
	t.Helper()
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: version, Type: "application"},
		Values:   map[string]any{"replicas": 1},
		Templates: []*chartcommon.File{{
			Name: "templates/cm.yaml",
			Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"),
		}},
	}
	path, err := chartutil.Save(ch, t.TempDir())
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// chartsDir writes archives into a fresh directory, named as given.
func chartsDir(t testing.TB, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	return dir
}

// sampleRepoDir packages the fireworks-app sample chart (every version) with its index.
func sampleRepoDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	return dir
}

func fileDigest(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha(b)
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

type entry struct {
	name     string
	typeflag byte
	body     []byte
	size     int64 // of zeros, when body is nil
	linkname string
}

// tarGz builds an archive by hand, so tests can make the ones Helm would never write.
func tarGz(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	require.NoError(t, err)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		tf := e.typeflag
		if tf == 0 {
			tf = tar.TypeReg
		}
		size := int64(len(e.body))
		if e.body == nil {
			size = e.size
		}
		if tf != tar.TypeReg {
			size = 0
		}
		hdr := &tar.Header{Name: e.name, Typeflag: tf, Size: size, Mode: 0o644, Linkname: e.linkname}
		if tf == tar.TypeXGlobalHeader { // what git archive writes
			hdr = &tar.Header{Name: e.name, Typeflag: tf, PAXRecords: map[string]string{"comment": "0123abcd"}}
		}
		require.NoError(t, tw.WriteHeader(hdr))
		if e.body != nil {
			_, err = tw.Write(e.body)
		} else if size > 0 {
			_, err = tw.Write(make([]byte, size))
		}
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

var chartYAML = []byte("apiVersion: v2\nname: evil\nversion: 1.0.0\n")

// recordingGuard wraps loopbackGuard and records what it is asked about: URLs with an
// IP literal are vetted once before any connection, and every dial once more.
type recordingGuard struct {
	mu   sync.Mutex
	seen []string
}

func (g *recordingGuard) guard(network, address string) error {
	g.mu.Lock()
	g.seen = append(g.seen, address)
	g.mu.Unlock()
	return loopbackGuard(network, address)
}

// loopbackGuard is the default dial guard with loopback allowed, as the tests' chart
// servers need.
var loopbackGuard = chartfetch.NewAddressGuard(chartfetch.LoopbackNetworks())

// count returns how often address was vetted; 1 for a refused address means it was
// refused before a dial (a dial would have asked again).
func (g *recordingGuard) count(address string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, a := range g.seen {
		if a == address {
			n++
		}
	}
	return n
}

// newFetcher returns a Fetcher that may reach the loopback chart servers the tests
// start: loopback is refused by default, so the allowance is given here, explicitly,
// unless a test sets its own allow-list or dial guard.
func newFetcher(t testing.TB, opts chartfetch.Options) *chartfetch.Fetcher {
	t.Helper()
	if opts.AllowNetworks == nil && opts.DialGuard == nil {
		opts.AllowNetworks = chartfetch.LoopbackNetworks()
	}
	f, err := chartfetch.New(opts)
	require.NoError(t, err)
	return f
}

// silentListener accepts connections on loopback and never answers.
func silentListener(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() {
		var conns []net.Conn // held open, unread, until the listener closes
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}
