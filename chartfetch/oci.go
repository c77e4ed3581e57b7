package chartfetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v4/pkg/registry"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// fetchOCI pulls oci://host/path/name at ref.Version through Helm's registry client.
// The manifest is resolved on every call, with the caller's credentials; the archive
// is pulled (by manifest digest, so a moving tag cannot race us) unless this
// repository served that manifest's archive to a caller with the same credentials
// before and the cache still holds it.
func (f *Fetcher) fetchOCI(ctx context.Context, ref Ref, u *url.URL) (*Result, error) {
	repository, err := ociRepository(u, ref.Version, f.opts.DialGuard)
	if err != nil {
		return nil, err
	}
	host := u.Host
	// OCI tags cannot hold "+"; Helm pushes build metadata with "_" instead.
	taggedRef := repository + ":" + strings.ReplaceAll(ref.Version, "+", "_")
	packageURL := "oci://" + repository + ":" + ref.Version
	// The chart inside must be named like the repository's last path element (Helm
	// refuses to push it otherwise). want keeps ref's credentials.
	want := ref
	want.Repo = path.Base(repository)

	s, client, desc, err := f.resolveOCI(ctx, ref, host, taggedRef)
	if err != nil {
		if s == nil {
			return nil, err
		}
		defer s.close()
		if isNotFound(err) {
			return nil, f.ociNotFound(client, ref, repository)
		}
		return nil, s.ociError(host, ref, err)
	}
	defer s.close()

	// Resolving a tag is a HEAD request whose Docker-Content-Digest header the client
	// cannot check, so the manifest digest is whatever the registry says, and another
	// registry can name this one's. The memo records what this repository, asked for
	// this manifest by a caller with these credentials, served (on disk when anonymous,
	// in memory otherwise); another registry or repository, or a caller with other
	// credentials, pulls, and the registry decides.
	manifestDigest := desc.Digest.String()
	memoKey := memoKey("oci", repository, want.Repo, ref.Version, manifestDigest)
	if validDigest(manifestDigest) {
		if res, ok := f.cachedFor(memoKey, want, "", packageURL); ok {
			return res, nil
		}
	}

	pulled, err := client.Pull(repository + "@" + manifestDigest)
	if err != nil {
		return nil, s.ociError(host, ref, err)
	}
	res, err := f.store(ctx, want, pulled.Chart.Data, normalizeDigest(pulled.Chart.Digest), packageURL)
	if err != nil {
		return nil, err
	}
	if validDigest(manifestDigest) {
		f.storeMemo(ctx, memoKey, ref, res.Digest)
	}
	return res, nil
}

// resolveOCI resolves the tag. A registry on loopback may speak plain HTTP: when it
// answers the TLS handshake in HTTP, the resolution is retried over plain HTTP (never
// for other hosts).
func (f *Fetcher) resolveOCI(ctx context.Context, ref Ref, host, taggedRef string) (*session, *registry.Client, ocispec.Descriptor, error) {
	for plain := false; ; plain = true {
		s, err := f.newSession(ctx, ref, f.opts.Limits.MaxArchiveBytes)
		if err != nil {
			return nil, nil, ocispec.Descriptor{}, err
		}
		client, err := f.registryClient(s, ref, host, plain)
		if err != nil {
			s.close()
			return nil, nil, ocispec.Descriptor{}, fmt.Errorf("creating registry client: %w", err)
		}
		desc, err := client.Resolve(taggedRef)
		if err != nil && !plain && s.sawPlainHTTP() {
			s.close()
			continue
		}
		return s, client, desc, err
	}
}

func (f *Fetcher) registryClient(s *session, ref Ref, host string, plain bool) (*registry.Client, error) {
	opts := []registry.ClientOption{
		registry.ClientOptHTTPClient(s.client),
		registry.ClientOptWriter(io.Discard),
	}
	if plain {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	switch {
	case ref.Username != "" || ref.Password != "":
		// Scoped to the chart's registry: a token endpoint or blob store on another
		// host never sees these credentials.
		opts = append(opts, registry.ClientOptAuthorizer(auth.Client{
			Client:     s.client,
			Credential: auth.StaticCredential(host, auth.Credential{Username: ref.Username, Password: ref.Password}),
			Cache:      auth.NewCache(),
		}))
	case f.opts.RegistryConfigPath != "":
		opts = append(opts, registry.ClientOptCredentialsFile(f.opts.RegistryConfigPath))
	}
	return registry.NewClient(opts...)
}

// ociRepository validates an oci:// URL and returns "host/path/name". A tag in the
// URL is accepted only when it equals version; digests are not accepted.
func ociRepository(u *url.URL, version string, guard DialGuard) (string, error) {
	if version == "" {
		return "", fmt.Errorf("%w: an OCI chart needs an exact version", ErrInvalidRef)
	}
	if u.User != nil {
		return "", fmt.Errorf("%w: %s: credentials in the URL are not accepted; use spec.chart.credentials",
			ErrUnsupportedURL, u.Redacted())
	}
	if u.Hostname() == "" || u.RawQuery != "" || u.Fragment != "" || strings.Contains(u.Path, "@") {
		return "", fmt.Errorf("%w: %s is not oci://host/path/name", ErrUnsupportedURL, u.Redacted())
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		port := u.Port()
		if port == "" {
			port = "443"
		}
		if err := guardErr(guard("tcp", net.JoinHostPort(ip.String(), port))); err != nil {
			return "", err
		}
	}
	repoPath := strings.Trim(u.Path, "/")
	if i := strings.LastIndex(repoPath, ":"); i >= 0 {
		if tag := repoPath[i+1:]; tag != version && tag != strings.ReplaceAll(version, "+", "_") {
			return "", fmt.Errorf("%w: tag %q in the URL differs from version %q", ErrInvalidRef, tag, version)
		}
		repoPath = repoPath[:i]
	}
	if repoPath == "" {
		return "", fmt.Errorf("%w: %s names no chart", ErrUnsupportedURL, u.Redacted())
	}
	return u.Host + "/" + repoPath, nil
}

// ociNotFound tells a missing version (listing nearby ones) from a missing chart.
func (f *Fetcher) ociNotFound(client *registry.Client, ref Ref, repository string) error {
	tags, err := client.Tags(repository)
	if err != nil || len(tags) == 0 {
		return fmt.Errorf("%w: no chart at oci://%s", ErrNotFound, repository)
	}
	return versionNotFound(path.Base(repository), ref.Version, "oci://"+repository, tags)
}

func isNotFound(err error) bool {
	var er *errcode.ErrorResponse
	return errors.Is(err, errdef.ErrNotFound) || errors.As(err, &er) && er.StatusCode == http.StatusNotFound
}

// ociError maps registry errors onto the sentinels without echoing what oras says
// about authentication (it never holds the password, but keeps the message short).
func (s *session) ociError(host string, ref Ref, err error) error {
	var er *errcode.ErrorResponse
	if errors.As(err, &er) {
		switch er.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return unauthorized(host, ref.Username, fmt.Sprintf("%d %s", er.StatusCode, http.StatusText(er.StatusCode)))
		case http.StatusNotFound:
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		}
	}
	if errors.Is(err, errdef.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if errors.Is(err, auth.ErrBasicCredentialNotFound) {
		return unauthorized(host, "", "401 Unauthorized")
	}
	return s.classify(host, err)
}
