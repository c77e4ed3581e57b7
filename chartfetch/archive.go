package chartfetch

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
// regular files and directories.
//
// The uncompressed size is every byte the gzip stream inflates to, counted where the
// tar reader reads them: file contents, but also tar headers, PAX and GNU extended
// headers, long names and padding, and whatever follows the tar end marker. Counting
// entry contents alone would let an archive of a few kilobytes carry gigabytes of
// extended headers past the limit. It never reads more than lim.MaxArchiveBytes+1
// bytes from r nor inflates more than lim.MaxUncompressedBytes+1 bytes.
//
// Errors wrap ErrArchiveTooLarge, ErrTooManyFiles or ErrUnsafeArchive.
func CheckArchive(r io.Reader, lim Limits) error {
	lim = lim.withDefaults()
	compressed := &countingReader{r: io.LimitReader(r, lim.MaxArchiveBytes+1)}
	zr, err := gzip.NewReader(compressed)
	if err != nil {
		if compressed.n > lim.MaxArchiveBytes {
			return compressedTooLarge(lim)
		}
		return fmt.Errorf("%w: not a gzip stream: %w", ErrUnsafeArchive, err)
	}
	defer zr.Close()
	inflated := &countingReader{r: io.LimitReader(zr, lim.MaxUncompressedBytes+1)}
	// overLimit names the limit a failed read ran into, if it ran into one: a read
	// cut short by a limit looks like a truncated stream to gzip and tar.
	overLimit := func() error {
		switch {
		case compressed.n > lim.MaxArchiveBytes:
			return compressedTooLarge(lim)
		case inflated.n > lim.MaxUncompressedBytes:
			return fmt.Errorf("%w: uncompressed size (tar headers included) exceeds the limit of %d bytes (MaxUncompressedBytes)",
				ErrArchiveTooLarge, lim.MaxUncompressedBytes)
		}
		return nil
	}

	if err := checkEntries(tar.NewReader(inflated), lim, overLimit); err != nil {
		return err
	}
	// Whatever follows the tar end marker still has to be inflated by anyone reading
	// the stream to its end (and verified against the gzip checksum), so it counts.
	_, err = io.Copy(io.Discard, inflated)
	if e := overLimit(); e != nil {
		return e
	}
	if err != nil {
		return fmt.Errorf("%w: reading gzip stream: %w", ErrUnsafeArchive, err)
	}
	return nil
}

// checkEntries reads every entry of tr and checks its name, type, size and count.
// overLimit reports whether a size limit was reached; it is asked after every read, so
// a refusal names the limit rather than the truncation the limit caused.
func checkEntries(tr *tar.Reader, lim Limits, overLimit func() error) error {
	for entries := 1; ; entries++ {
		hdr, err := tr.Next()
		if e := overLimit(); e != nil {
			return e
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: reading tar: %w", ErrUnsafeArchive, err)
		}
		if entries > lim.MaxFiles {
			return fmt.Errorf("%w: more than %d entries (MaxFiles)", ErrTooManyFiles, lim.MaxFiles)
		}
		if err := checkEntry(hdr, lim); err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, tr)
		if e := overLimit(); e != nil {
			return e
		}
		if err != nil {
			return fmt.Errorf("%w: reading entry %q: %w", ErrUnsafeArchive, hdr.Name, err)
		}
	}
}

// checkEntry checks one entry's header: its name, its type and its announced size.
func checkEntry(hdr *tar.Header, lim Limits) error {
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
		return fmt.Errorf("%w: entry %q is %d bytes, over the %d-byte limit per file (MaxFileBytes)",
			ErrArchiveTooLarge, hdr.Name, hdr.Size, lim.MaxFileBytes)
	}
	return nil
}

func compressedTooLarge(lim Limits) error {
	return fmt.Errorf("%w: compressed size exceeds the limit of %d bytes (MaxArchiveBytes)", ErrArchiveTooLarge, lim.MaxArchiveBytes)
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
