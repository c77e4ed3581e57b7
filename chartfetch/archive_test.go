package chartfetch_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/chartfetch"
)

func TestCheckArchive(t *testing.T) {
	ok := tarGz(t,
		entry{name: "pax_global_header", typeflag: tar.TypeXGlobalHeader},
		entry{name: "app/", typeflag: tar.TypeDir},
		entry{name: "app/Chart.yaml", body: chartYAML},
		entry{name: "app/templates/x.yaml", body: []byte("kind: ConfigMap")},
	)
	var defaultBomb []entry
	for i := range 21 { // 21 × 5 MiB: each file within its limit, the sum over 100 MiB
		defaultBomb = append(defaultBomb, entry{name: fmt.Sprintf("app/f%d", i), size: chartfetch.DefaultMaxFileBytes})
	}
	var trailing bytes.Buffer // a valid tar followed by 2 MiB of zeros inside the gzip stream
	{
		zw := gzip.NewWriter(&trailing)
		tw := tar.NewWriter(zw)
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "app/Chart.yaml", Size: int64(len(chartYAML)), Mode: 0o644}))
		_, err := tw.Write(chartYAML)
		require.NoError(t, err)
		require.NoError(t, tw.Close())
		_, err = zw.Write(make([]byte, 2<<20))
		require.NoError(t, err)
		require.NoError(t, zw.Close())
	}

	cases := []struct {
		name    string
		archive []byte
		limits  chartfetch.Limits
		want    error
	}{
		{name: "a real chart", archive: tinyChart(t, "app", "1.0.0")},
		{name: "dirs and a pax global header", archive: ok},
		{name: "compressed size", archive: ok, limits: chartfetch.Limits{MaxArchiveBytes: int64(len(ok) - 1)}, want: chartfetch.ErrArchiveTooLarge},
		{name: "exact compressed size", archive: ok, limits: chartfetch.Limits{MaxArchiveBytes: int64(len(ok))}},
		{name: "bomb under default limits", archive: tarGz(t, defaultBomb...), want: chartfetch.ErrArchiveTooLarge},
		{name: "one file over the per-file limit", archive: tarGz(t, entry{name: "app/big", size: 2048}), limits: chartfetch.Limits{MaxFileBytes: 2047}, want: chartfetch.ErrArchiveTooLarge},
		{name: "data after the tar end counts", archive: trailing.Bytes(), limits: chartfetch.Limits{MaxUncompressedBytes: 1 << 20}, want: chartfetch.ErrArchiveTooLarge},
		{name: "file count", archive: ok, limits: chartfetch.Limits{MaxFiles: 3}, want: chartfetch.ErrTooManyFiles},
		{name: "dot-dot", archive: tarGz(t, entry{name: "app/../x", body: []byte("x")}), want: chartfetch.ErrUnsafeArchive},
		{name: "leading dot-dot", archive: tarGz(t, entry{name: "../x", body: []byte("x")}), want: chartfetch.ErrUnsafeArchive},
		{name: "backslash dot-dot", archive: tarGz(t, entry{name: `app\..\..\x`, body: []byte("x")}), want: chartfetch.ErrUnsafeArchive},
		{name: "absolute", archive: tarGz(t, entry{name: "/app/x", body: []byte("x")}), want: chartfetch.ErrUnsafeArchive},
		{name: "drive letter", archive: tarGz(t, entry{name: "C:/app/x", body: []byte("x")}), want: chartfetch.ErrUnsafeArchive},
		{name: "drive after the chart dir", archive: tarGz(t, entry{name: "app/c:/x", body: []byte("x")}), want: chartfetch.ErrUnsafeArchive},
		{name: "symlink", archive: tarGz(t, entry{name: "app/l", typeflag: tar.TypeSymlink, linkname: "../../x"}), want: chartfetch.ErrUnsafeArchive},
		{name: "hard link", archive: tarGz(t, entry{name: "app/l", typeflag: tar.TypeLink, linkname: "app/Chart.yaml"}), want: chartfetch.ErrUnsafeArchive},
		{name: "fifo", archive: tarGz(t, entry{name: "app/p", typeflag: tar.TypeFifo}), want: chartfetch.ErrUnsafeArchive},
		{name: "char device", archive: tarGz(t, entry{name: "app/d", typeflag: tar.TypeChar}), want: chartfetch.ErrUnsafeArchive},
		{name: "not gzip", archive: []byte("PK\x03\x04 a zip"), want: chartfetch.ErrUnsafeArchive},
		{name: "truncated", archive: ok[:len(ok)/2], want: chartfetch.ErrUnsafeArchive},
		{name: "empty", archive: nil, want: chartfetch.ErrUnsafeArchive},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := chartfetch.CheckArchive(bytes.NewReader(tc.archive), tc.limits)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestCheckArchiveReadsAtMostTheLimit(t *testing.T) {
	r := &countingReader{r: io.MultiReader(bytes.NewReader(tinyChart(t, "app", "1.0.0")), zeros{})}
	err := chartfetch.CheckArchive(r, chartfetch.Limits{MaxArchiveBytes: 64 << 10})
	require.Error(t, err)
	assert.LessOrEqual(t, r.n, int64(64<<10+1))
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// FuzzCheckArchive checks that CheckArchive never panics and that whatever it accepts
// really is within the limits: only regular files and directories, no escaping paths,
// at most MaxFiles entries, and a stream that inflates to at most MaxUncompressedBytes,
// headers included.
func FuzzCheckArchive(f *testing.F) {
	f.Add(tinyChart(f, "app", "1.0.0"))
	f.Add(tarGz(f, entry{name: "app/Chart.yaml", body: chartYAML}, entry{name: "app/../x", body: []byte("x")}))
	f.Add(tarGz(f, entry{name: "app/l", typeflag: tar.TypeSymlink, linkname: "/etc/passwd"}))
	f.Add(tarGz(f, entry{name: "app/big", size: 64 << 10}))
	f.Add(tarGz(f, entry{name: "pax_global_header", typeflag: tar.TypeXGlobalHeader}, entry{name: "app/", typeflag: tar.TypeDir}))
	f.Add(extendedHeaderArchive(f, 2, 20<<10, 0))
	f.Add(extendedHeaderArchive(f, 2, 0, 20<<10))
	f.Add([]byte{0x1f, 0x8b, 0x08, 0x00})
	f.Add([]byte{})

	lim := chartfetch.Limits{MaxArchiveBytes: 1 << 20, MaxUncompressedBytes: 32 << 10, MaxFileBytes: 16 << 10, MaxFiles: 16}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := chartfetch.CheckArchive(bytes.NewReader(data), lim)
		if err != nil {
			if !errors.Is(err, chartfetch.ErrUnsafeArchive) && !errors.Is(err, chartfetch.ErrArchiveTooLarge) &&
				!errors.Is(err, chartfetch.ErrTooManyFiles) {
				t.Fatalf("error matches no sentinel: %v", err)
			}
			return
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("accepted, but not gzip: %v", err)
		}
		stream, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("accepted, but the gzip stream does not read: %v", err)
		}
		if int64(len(stream)) > lim.MaxUncompressedBytes { // headers and padding included
			t.Fatalf("accepted a stream that inflates to %d bytes", len(stream))
		}
		tr := tar.NewReader(bytes.NewReader(stream))
		var entries int
		var total int64
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("accepted, but the tar does not read: %v", err)
			}
			entries++
			switch hdr.Typeflag {
			case tar.TypeReg, tar.TypeDir, tar.TypeXGlobalHeader:
			default:
				t.Fatalf("accepted entry %q of type %q", hdr.Name, hdr.Typeflag)
			}
			name := strings.ReplaceAll(hdr.Name, `\`, "/")
			if strings.HasPrefix(name, "/") || strings.Contains("/"+name+"/", "/../") {
				t.Fatalf("accepted escaping path %q", hdr.Name)
			}
			n, _ := io.Copy(io.Discard, tr)
			total += n
		}
		if entries > lim.MaxFiles || total > lim.MaxUncompressedBytes {
			t.Fatalf("accepted %d entries, %d bytes", entries, total)
		}
	})
}

// extendedHeaderArchive writes entries whose contents are tiny but whose PAX records
// or GNU long names are large: what CheckArchive must count too.
func extendedHeaderArchive(t testing.TB, entries int, pax, longName int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for i := range entries {
		hdr := &tar.Header{Name: fmt.Sprintf("app/f%d", i), Size: 1, Mode: 0o644}
		if pax > 0 {
			hdr.Format = tar.FormatPAX
			hdr.PAXRecords = map[string]string{"comment": strings.Repeat("x", pax)}
		}
		if longName > 0 {
			hdr.Format = tar.FormatGNU
			hdr.Name = "app/" + strings.Repeat("n", longName) + fmt.Sprint(i)
		}
		require.NoError(t, tw.WriteHeader(hdr))
		_, err := tw.Write([]byte("x"))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestCheckArchiveCountsExtendedHeaders(t *testing.T) {
	lim := chartfetch.Limits{MaxUncompressedBytes: 64 << 10}
	cases := map[string][]byte{
		"PAX records":     extendedHeaderArchive(t, 3, 40<<10, 0),
		"one PAX record":  extendedHeaderArchive(t, 1, 100<<10, 0),
		"GNU long names":  extendedHeaderArchive(t, 3, 0, 40<<10),
		"many tiny files": extendedHeaderArchive(t, 200, 0, 0), // 200 × (512 header + 512 block)
	}
	for name, archive := range cases {
		t.Run(name, func(t *testing.T) {
			require.Less(t, len(archive), 8<<10, "the archive itself is small")
			err := chartfetch.CheckArchive(bytes.NewReader(archive), lim)
			require.ErrorIs(t, err, chartfetch.ErrArchiveTooLarge)
			assert.Contains(t, err.Error(), "MaxUncompressedBytes")
			assert.Contains(t, err.Error(), "65536 bytes")
		})
	}
	t.Run("the same headers within the limit", func(t *testing.T) {
		require.NoError(t, chartfetch.CheckArchive(bytes.NewReader(extendedHeaderArchive(t, 1, 40<<10, 0)), lim))
	})
}
