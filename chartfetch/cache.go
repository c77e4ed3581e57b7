package chartfetch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// diskCache stores archives by digest and small key→digest memos:
//
//	<dir>/blobs/sha256/<hex>   archive bytes
//	<dir>/refs/<sha256(key)>   "sha256:<hex>"
//
// Files are written to a temporary name and renamed into place, so concurrent
// fetches (in this process or another) never see a partial file; two writers of the
// same digest write the same bytes.
type diskCache struct {
	dir string
}

func newDiskCache(dir string) (*diskCache, error) {
	for _, sub := range []string{filepath.Join("blobs", "sha256"), "refs"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("creating chart cache: %w", err)
		}
	}
	return &diskCache{dir: dir}, nil
}

func (c *diskCache) blobPath(digest string) string {
	return filepath.Join(c.dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

// blob returns the archive with this digest, or false. A file whose content no longer
// matches its name is removed and reported missing.
func (c *diskCache) blob(digest string, limit int64) ([]byte, bool) {
	if c == nil || !validDigest(digest) {
		return nil, false
	}
	f, err := os.Open(c.blobPath(digest))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil || int64(len(data)) > limit {
		return nil, false
	}
	if digestOf(data) != digest {
		_ = os.Remove(c.blobPath(digest))
		return nil, false
	}
	return data, true
}

func (c *diskCache) putBlob(digest string, data []byte) error {
	if c == nil {
		return nil
	}
	if !validDigest(digest) {
		return fmt.Errorf("refusing to cache under malformed digest %q", digest)
	}
	return writeAtomic(c.blobPath(digest), data)
}

func (c *diskCache) memoPath(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(c.dir, "refs", hex.EncodeToString(sum[:]))
}

func (c *diskCache) memo(key string) (string, bool) {
	if c == nil {
		return "", false
	}
	b, err := os.ReadFile(c.memoPath(key))
	if err != nil {
		return "", false
	}
	d := strings.TrimSpace(string(b))
	return d, validDigest(d)
}

func (c *diskCache) putMemo(key, digest string) error {
	if c == nil {
		return nil
	}
	return writeAtomic(c.memoPath(key), []byte(digest+"\n"))
}

func writeAtomic(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err = tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// validDigest accepts only "sha256:" and 64 lower-case hex digits, so a digest from a
// remote index can never become a path outside the cache.
func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !('0' <= h[i] && h[i] <= '9' || 'a' <= h[i] && h[i] <= 'f') {
			return false
		}
	}
	return true
}

// normalizeDigest turns an index's digest ("<hex>" or "sha256:<hex>", any case) into
// "sha256:<hex>", or "" when it is not a sha256 digest.
func normalizeDigest(d string) string {
	d = strings.ToLower(strings.TrimSpace(d))
	if !strings.HasPrefix(d, "sha256:") {
		d = "sha256:" + d
	}
	if !validDigest(d) {
		return ""
	}
	return d
}
