package chartsource

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"
)

// CheckArchive reads a gzipped tar chart archive from r, to its end, and returns nil
// only if it stays within lim (zero fields take the defaults): compressed and
// uncompressed size, per-file size, entry count, no absolute or ".." paths, and only
// regular files and directories. Sizes are counted from the bytes actually produced
// by decompression, so a header that lies cannot hide a tar bomb. It never reads more
// than lim.MaxArchiveBytes+1 bytes from r nor inflates more than
// lim.MaxUncompressedBytes+1 bytes.
//
// Errors wrap ErrArchiveTooLarge, ErrTooManyFiles or ErrUnsafeArchive.
func CheckArchive(r io.Reader, lim Limits) error {
	lim = lim.withDefaults()
	compressed := &countingReader{r: io.LimitReader(r, lim.MaxArchiveBytes+1)}
	tooBig := func() error {
		if compressed.n > lim.MaxArchiveBytes {
			return fmt.Errorf("%w: compressed size exceeds %d bytes", ErrArchiveTooLarge, lim.MaxArchiveBytes)
		}
		return nil
	}

	zr, err := gzip.NewReader(compressed)
	if err != nil {
		if e := tooBig(); e != nil {
			return e
		}
		return fmt.Errorf("%w: not a gzip stream: %w", ErrUnsafeArchive, err)
	}
	defer zr.Close()

	var (
		entries int
		total   int64 // uncompressed content bytes seen so far
	)
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if e := tooBig(); e != nil {
				return e
			}
			return fmt.Errorf("%w: reading tar: %w", ErrUnsafeArchive, err)
		}
		entries++
		if entries > lim.MaxFiles {
			return fmt.Errorf("%w: more than %d entries", ErrTooManyFiles, lim.MaxFiles)
		}
		if err := checkEntryName(hdr.Name); err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeRegA: // TypeRegA (deprecated) still appears in old archives
		case tar.TypeDir, tar.TypeXGlobalHeader:
			// No content of their own worth counting; a pax global header only
			// carries metadata (git archive writes one).
		default:
			return fmt.Errorf("%w: entry %q has type %q; only regular files and directories are allowed",
				ErrUnsafeArchive, hdr.Name, string(hdr.Typeflag))
		}
		if hdr.Size > lim.MaxFileBytes {
			return fmt.Errorf("%w: entry %q is %d bytes, over the %d-byte limit per file",
				ErrArchiveTooLarge, hdr.Name, hdr.Size, lim.MaxFileBytes)
		}
		n, err := io.Copy(io.Discard, io.LimitReader(tr, lim.MaxUncompressedBytes-total+1))
		total += n
		if total > lim.MaxUncompressedBytes {
			return fmt.Errorf("%w: uncompressed size exceeds %d bytes", ErrArchiveTooLarge, lim.MaxUncompressedBytes)
		}
		if err != nil {
			if e := tooBig(); e != nil {
				return e
			}
			return fmt.Errorf("%w: reading entry %q: %w", ErrUnsafeArchive, hdr.Name, err)
		}
	}

	// Whatever follows the tar end marker still has to be inflated by anyone reading
	// the stream to its end (and verified against the gzip checksum), so it counts.
	n, err := io.Copy(io.Discard, io.LimitReader(zr, lim.MaxUncompressedBytes-total+1))
	if total+n > lim.MaxUncompressedBytes {
		return fmt.Errorf("%w: uncompressed size exceeds %d bytes", ErrArchiveTooLarge, lim.MaxUncompressedBytes)
	}
	if e := tooBig(); e != nil {
		return e
	}
	if err != nil {
		return fmt.Errorf("%w: reading gzip stream: %w", ErrUnsafeArchive, err)
	}
	return nil
}

// checkEntryName refuses names that could escape the directory an archive is
// extracted into. Backslashes count as separators: Helm's loader treats them so.
func checkEntryName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: entry with an empty name", ErrUnsafeArchive)
	}
	if strings.ContainsRune(name, 0) {
		return fmt.Errorf("%w: entry name %q contains NUL", ErrUnsafeArchive, name)
	}
	n := strings.ReplaceAll(name, `\`, "/")
	if strings.HasPrefix(n, "/") || hasDrivePrefix(n) {
		return fmt.Errorf("%w: entry %q has an absolute path", ErrUnsafeArchive, name)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return fmt.Errorf("%w: entry %q climbs out of the chart with ..", ErrUnsafeArchive, name)
		}
		if len(part) == 2 && hasDrivePrefix(part) { // "chart/c:/x" after Helm drops "chart/"
			return fmt.Errorf("%w: entry %q contains a drive path", ErrUnsafeArchive, name)
		}
	}
	return nil
}

func hasDrivePrefix(s string) bool {
	return len(s) >= 2 && s[1] == ':' && ('a' <= s[0]|0x20 && s[0]|0x20 <= 'z')
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
