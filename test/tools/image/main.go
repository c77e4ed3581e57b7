// Command image builds a single-binary OCI image without a container engine and writes
// it as an OCI archive (a tar of an OCI image layout) that `ctr images import` loads
// into containerd; it also pushes such an archive to a registry.
//
//	image build -binary bin/compositor -ref ghcr.io/compositor-dev/compositor:0.1.0 -o bin/images/compositor.tar
//	image push -archive bin/images/compositor.tar -ref registry.example.com/compositor:0.1.0
//
// The image is one layer on an empty base: the binary at /<name>, a CA bundle at
// /etc/ssl/certs/ca-certificates.crt (Mozilla's roots as pinned by
// golang.org/x/crypto/x509roots/fallback in this module's go.sum) and an empty /tmp.
// Every timestamp is SOURCE_DATE_EPOCH (0 by default), so the same binary always gives
// the same digest.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

const usage = `usage:
  image build -binary FILE -ref REF -o ARCHIVE [-user UID:GID] [-arg ARG]...
  image push -archive ARCHIVE -ref REF [-insecure]`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = buildCommand(os.Args[2:])
	case "push":
		err = pushCommand(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

type argList []string

func (a *argList) String() string     { return strings.Join(*a, " ") }
func (a *argList) Set(v string) error { *a = append(*a, v); return nil }

func buildCommand(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	binary := fs.String("binary", "", "static binary to put at /<its name>, the entrypoint")
	ref := fs.String("ref", "", "the image's name, recorded in the archive for containerd")
	out := fs.String("o", "", "OCI archive to write")
	user := fs.String("user", "65532:65532", "user the container runs as")
	var cmdArgs argList
	fs.Var(&cmdArgs, "arg", "default argument (the image's Cmd); repeatable")
	_ = fs.Parse(args)
	if *binary == "" || *ref == "" || *out == "" {
		return errors.New("build needs -binary, -ref and -o")
	}
	if _, err := name.ParseReference(*ref, name.StrictValidation); err != nil {
		return fmt.Errorf("-ref: %w", err)
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	img, err := buildImage(*binary, *user, cmdArgs, epoch)
	if err != nil {
		return err
	}
	if err := writeArchive(img, *ref, *out, epoch); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s@%s\n", *out, *ref, digest)
	return nil
}

func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// buildImage puts the binary, the CA bundle and /tmp into one layer on an empty base.
func buildImage(binary, user string, cmdArgs []string, epoch time.Time) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	entry := "/" + filepath.Base(binary)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, step := range []func() error{
		func() error { return dir("etc/", 0o755) },
		func() error { return dir("etc/ssl/", 0o755) },
		func() error { return dir("etc/ssl/certs/", 0o755) },
		func() error { return file("etc/ssl/certs/ca-certificates.crt", 0o644, caBundle()) },
		func() error { return dir("tmp/", 0o1777) },
		func() error { return file(entry[1:], 0o755, bin) },
		tw.Close,
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "test/tools/image: " + entry},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: epoch}
	cfg.OS = "linux"
	cfg.Architecture = runtime.GOARCH
	cfg.Config = v1.Config{
		Entrypoint: []string{entry},
		Cmd:        cmdArgs,
		User:       user,
		WorkingDir: "/",
		Env:        []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
	}
	return mutate.ConfigFile(img, cfg)
}

// caBundle is Mozilla's root store as PEM, from the pinned x509roots module; roots that
// carry extra constraints there (distrust dates) are left out.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// writeArchive writes img as an OCI image layout in a tar at out. The index annotates
// the manifest with ref, which is the name containerd gives the image on import.
func writeArchive(img v1.Image, ref, out string, epoch time.Time) error {
	tmp, err := os.MkdirTemp("", "oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
		"io.containerd.image.name":          ref,
	})); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(out), ".image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := tarDir(f, tmp, epoch); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}

// tarDir writes the files under root in lexical order with fixed owners and times.
func tarDir(w io.Writer, root string, epoch time.Time) error {
	var paths []string
	if err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		paths = append(paths, p)
		return nil
	}); err != nil {
		return err
	}
	slices.Sort(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if info.IsDir() {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return err
			}
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: info.Size(), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

func pushCommand(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	archive := fs.String("archive", "", "OCI archive written by image build")
	ref := fs.String("ref", "", "where to push, e.g. registry.example.com/compositor:0.1.0")
	insecure := fs.Bool("insecure", false, "allow plain HTTP (a registry on localhost)")
	_ = fs.Parse(args)
	if *archive == "" || *ref == "" {
		return errors.New("push needs -archive and -ref")
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	dst, err := name.ParseReference(*ref, opts...)
	if err != nil {
		return fmt.Errorf("-ref: %w", err)
	}
	tmp, err := os.MkdirTemp("", "oci-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := untar(*archive, tmp); err != nil {
		return err
	}
	idx, err := layout.ImageIndexFromPath(tmp)
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(m.Manifests) != 1 {
		return fmt.Errorf("%s holds %d manifests, want 1", *archive, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		return err
	}
	// Credentials come from ~/.docker/config.json (or $DOCKER_CONFIG), as `docker
	// login`, `crane auth login` or `skopeo login --authfile` write them.
	if err := remote.Write(dst, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return err
	}
	fmt.Printf("pushed %s@%s\n", dst, m.Manifests[0].Digest)
	return nil
}

func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		clean := path.Clean(h.Name)
		if strings.HasPrefix(clean, "../") || path.IsAbs(clean) {
			return fmt.Errorf("%s: bad path %q", archive, h.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(clean))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			out, err := os.Create(dst)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			out.Close()
			if err != nil {
				return err
			}
		}
	}
}
