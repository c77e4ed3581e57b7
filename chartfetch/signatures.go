package chartfetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v4/pkg/helmpath"
	"helm.sh/helm/v4/pkg/registry"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
)

// Signatures is the signature material published beside a chart, as fetched; nothing
// in it is verified yet (package chartverify does that, offline). Empty fields mean
// the material was not found, which is not an error here: whether an unsigned chart
// is acceptable is the verifier's decision.
type Signatures struct {
	// ManifestDigest is the digest the registry gave for the chart's tag, and Manifest
	// the raw OCI manifest it served under that tag: a cosign signature names the
	// manifest, whose chart layer is the archive. Empty for non-OCI charts.
	ManifestDigest string
	Manifest       []byte
	// Bundles are Sigstore bundles (JSON) found among the OCI referrers of the manifest
	// (what `cosign sign` attaches since cosign v3).
	Bundles [][]byte
	// Legacy are the layers of the manifest cosign's older scheme tags
	// sha256-<hex>.sig.
	Legacy []LegacySignature
	// Provenance is the chart's Helm provenance file: <archive URL>.prov for a
	// repository or direct chart, the manifest's provenance layer for an OCI chart
	// pushed with one.
	Provenance []byte
}

// LegacySignature is one layer of a cosign `sha256-<hex>.sig` signature manifest.
type LegacySignature struct {
	// Payload is the signed simplesigning JSON naming the manifest digest.
	Payload []byte
	// Signature is the base64 signature of Payload (annotation
	// dev.cosignproject.cosign/signature).
	Signature string
	// Certificate and Chain are the PEM signing certificate and its chain of a keyless
	// signature (dev.sigstore.cosign/certificate, dev.sigstore.cosign/chain).
	Certificate, Chain []byte
	// RekorBundle is the transparency log's signed entry timestamp
	// (dev.sigstore.cosign/bundle), JSON.
	RekorBundle []byte
}

// Bounds on signature material: a signature is small, and a registry (or whoever can
// push to the chart's repository) must not make a verification download without end.
const (
	// MaxSignatureBytes bounds each manifest, bundle, signature layer and .prov.
	MaxSignatureBytes = 1 << 20
	// MaxSignatureArtifacts bounds how many bundles and legacy signature layers are
	// kept, together. Any beyond are ignored: that can only make verification refuse
	// the chart, never accept it.
	MaxSignatureArtifacts = 16
	// maxReferrerPages bounds the pages of the referrers API walked.
	maxReferrerPages = 8
)

// Media types of cosign's signature material.
const (
	mediaTypeHelmProvenance = "application/vnd.cncf.helm.chart.provenance.v1.prov"
	mediaTypeSimpleSigning  = "application/vnd.dev.cosign.simplesigning.v1+json"

	annotationCosignSignature   = "dev.cosignproject.cosign/signature"
	annotationCosignCertificate = "dev.sigstore.cosign/certificate"
	annotationCosignChain       = "dev.sigstore.cosign/chain"
	annotationCosignBundle      = "dev.sigstore.cosign/bundle"
)

// isSigstoreBundleMediaType reports whether t is the media type (or artifact type) of a
// Sigstore bundle, in any of the spellings its versions used.
func isSigstoreBundleMediaType(t string) bool {
	switch t {
	case "application/vnd.dev.sigstore.bundle.v0.3+json",
		"application/vnd.dev.sigstore.bundle.v0.2+json",
		"application/vnd.dev.sigstore.bundle.v0.1+json",
		"application/vnd.dev.sigstore.bundle+json;version=0.3",
		"application/vnd.dev.sigstore.bundle+json;version=0.2",
		"application/vnd.dev.sigstore.bundle+json;version=0.1":
		return true
	}
	return false
}

// FetchSignatures fetches the signature material of a chart Fetch returned (res):
// for an OCI chart the manifest its tag names, the Sigstore bundles among the
// manifest's referrers and cosign's legacy sha256-<hex>.sig signatures; for a
// repository or direct chart its .prov file. Every request goes through the same
// network policy, credentials and plain-HTTP-on-loopback rule as Fetch, and every
// body is bounded by MaxSignatureBytes.
//
// Material that does not exist is left empty, without error. Network, policy and
// authentication failures are errors matching the package's sentinels, like Fetch's:
// a signature that could not be fetched must not look like a chart that has none.
func (f *Fetcher) FetchSignatures(ctx context.Context, ref Ref, res *Result) (*Signatures, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()

	sigs, err := f.fetchSignatures(ctx, ref, res)
	if err != nil {
		return nil, fmt.Errorf("fetching signatures of chart %s: %w", ref, err)
	}
	return sigs, nil
}

func (f *Fetcher) fetchSignatures(ctx context.Context, ref Ref, res *Result) (*Signatures, error) {
	u, err := parseRefURL(ref)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(u.Scheme, "oci") {
		return f.fetchOCISignatures(ctx, ref, u)
	}
	if err := checkURL(u, f.opts.DialGuard); err != nil {
		return nil, err
	}
	if res == nil || res.PackageURL == "" {
		return nil, fmt.Errorf("%w: the chart's fetch result (its package URL) is needed to find its .prov", ErrInvalidRef)
	}
	return f.fetchProvenance(ctx, ref, u, res.PackageURL)
}

// fetchProvenance downloads <package URL>.prov. Basic auth goes where it went for the
// archive: only to the origin of the chart URL.
func (f *Fetcher) fetchProvenance(ctx context.Context, ref Ref, chartURL *url.URL, packageURL string) (*Signatures, error) {
	pkg, err := url.Parse(packageURL)
	if err != nil {
		return nil, fmt.Errorf("%w: package URL: %w", ErrUnsupportedURL, err)
	}
	prov := *pkg
	prov.Path += ".prov"
	if prov.RawPath != "" {
		prov.RawPath += ".prov"
	}
	if err := checkURL(&prov, f.opts.DialGuard); err != nil {
		return nil, err
	}
	s, err := f.newSession(ctx, ref, MaxSignatureBytes)
	if err != nil {
		return nil, err
	}
	defer s.close()
	data, err := s.get(&prov, chartURL, ref, MaxSignatureBytes, ErrArchiveTooLarge)
	switch {
	case errors.Is(err, ErrNotFound):
		return &Signatures{}, nil
	case err != nil:
		return nil, err
	}
	return &Signatures{Provenance: data}, nil
}

// fetchOCISignatures resolves the chart's tag as Fetch does and gathers what signs the
// manifest it names.
func (f *Fetcher) fetchOCISignatures(ctx context.Context, ref Ref, u *url.URL) (*Signatures, error) {
	repository, err := ociRepository(u, ref.Version, f.opts.DialGuard)
	if err != nil {
		return nil, err
	}
	host := u.Host
	tag := strings.ReplaceAll(ref.Version, "+", "_")

	s, repo, desc, manifest, err := f.resolveSignedManifest(ctx, ref, host, repository, tag)
	if s == nil {
		return nil, err
	}
	defer s.close()
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("%w: no tag %s in oci://%s", ErrNotFound, tag, repository)
		}
		return nil, s.ociError(host, ref, err)
	}
	sigs := &Signatures{ManifestDigest: desc.Digest.String(), Manifest: manifest}
	if err := collectOCISignatures(ctx, repo, desc, sigs); err != nil {
		return nil, s.ociError(host, ref, err)
	}
	return sigs, nil
}

// resolveSignedManifest fetches the manifest tag names. Like resolveOCI, it retries in
// plain HTTP only when a loopback registry answered the TLS handshake in HTTP. A nil
// session comes with an error that needs no mapping.
func (f *Fetcher) resolveSignedManifest(ctx context.Context, ref Ref, host, repository, tag string) (*session, *remote.Repository, ocispec.Descriptor, []byte, error) {
	for plain := false; ; plain = true {
		s, err := f.newSession(ctx, ref, MaxSignatureBytes)
		if err != nil {
			return nil, nil, ocispec.Descriptor{}, nil, err
		}
		repo, err := f.signatureRepository(s, ref, host, repository, plain)
		if err != nil {
			s.close()
			return nil, nil, ocispec.Descriptor{}, nil, err
		}
		desc, manifest, err := fetchTagged(ctx, repo, tag)
		if err != nil && !plain && s.sawPlainHTTP() {
			s.close()
			continue
		}
		return s, repo, desc, manifest, err
	}
}

// signatureRepository is an oras repository client over the session: the dial guard
// judges its every connection, and credentials (the Ref's, or Helm's registry
// configuration as Fetch uses it) are only ever given to the chart's registry host.
func (f *Fetcher) signatureRepository(s *session, ref Ref, host, repository string, plain bool) (*remote.Repository, error) {
	repo, err := remote.NewRepository(repository)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupportedURL, err)
	}
	var cred auth.CredentialFunc
	if ref.Username != "" || ref.Password != "" {
		cred = auth.StaticCredential(host, auth.Credential{Username: ref.Username, Password: ref.Password})
	} else {
		store, err := f.registryCredentials()
		if err != nil {
			return nil, fmt.Errorf("reading registry credentials: %w", err)
		}
		fromStore := credentials.Credential(store)
		cred = func(ctx context.Context, hostport string) (auth.Credential, error) {
			if hostport != host {
				return auth.EmptyCredential, nil
			}
			return fromStore(ctx, hostport)
		}
	}
	client := &auth.Client{Client: s.client, Credential: cred, Cache: auth.NewCache()}
	client.SetUserAgent(userAgent)
	repo.Client = client
	repo.PlainHTTP = plain
	repo.MaxMetadataBytes = MaxSignatureBytes
	repo.ReferrerListMaxPages = maxReferrerPages
	return repo, nil
}

// registryCredentials opens the credentials Helm's registry client reads for Fetch:
// RegistryConfigPath (Helm's default when empty), falling back to Docker's.
func (f *Fetcher) registryCredentials() (credentials.Store, error) {
	path := f.opts.RegistryConfigPath
	if path == "" {
		path = helmpath.ConfigPath(registry.CredentialsFileBasename)
	}
	opts := credentials.StoreOptions{AllowPlaintextPut: true, DetectDefaultNativeStore: true}
	store, err := credentials.NewStore(path, opts)
	if err != nil {
		return nil, err
	}
	docker, err := credentials.NewStoreFromDocker(opts)
	if err != nil {
		return store, nil // no home directory: Helm then reads its own file only
	}
	return credentials.NewStoreWithFallbacks(store, docker), nil
}

// fetchTagged fetches the manifest a tag names, with the digest the registry gives it;
// content.ReadAll checks the bytes against that digest and size.
func fetchTagged(ctx context.Context, repo *remote.Repository, tag string) (ocispec.Descriptor, []byte, error) {
	desc, rc, err := repo.FetchReference(ctx, tag)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	defer rc.Close()
	raw, err := content.ReadAll(rc, desc)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	return desc, raw, nil
}

// collectOCISignatures adds the referrer bundles, the legacy signatures and the
// provenance layer of the chart manifest desc to sigs.
func collectOCISignatures(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, sigs *Signatures) error {
	if err := collectReferrerBundles(ctx, repo, desc, sigs); err != nil {
		return err
	}
	if err := collectLegacySignatures(ctx, repo, desc, sigs); err != nil {
		return err
	}
	return collectProvenanceLayer(ctx, repo, sigs)
}

// errEnoughArtifacts stops a referrers walk once MaxSignatureArtifacts are listed.
var errEnoughArtifacts = errors.New("enough signature artifacts")

// collectReferrerBundles lists the manifest's referrers (the referrers API, or the
// referrers tag schema where a registry has no such API) and fetches the Sigstore
// bundle each bundle artifact carries.
func collectReferrerBundles(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, sigs *Signatures) error {
	var found []ocispec.Descriptor
	err := repo.Referrers(ctx, desc, "", func(referrers []ocispec.Descriptor) error {
		for _, r := range referrers {
			if !isSigstoreBundleMediaType(r.ArtifactType) {
				continue
			}
			found = append(found, r)
			if len(found) >= MaxSignatureArtifacts {
				return errEnoughArtifacts
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnoughArtifacts) && !isNotFound(err) {
		return fmt.Errorf("listing referrers of %s: %w", desc.Digest, err)
	}
	for _, r := range found {
		raw, err := fetchBounded(ctx, repo, r)
		if isNotFound(err) {
			continue // listed but gone: nothing to verify
		}
		if err != nil {
			return fmt.Errorf("fetching referrer %s: %w", r.Digest, err)
		}
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			continue // not a manifest: no bundle to offer
		}
		for _, layer := range m.Layers {
			if !isSigstoreBundleMediaType(layer.MediaType) {
				continue
			}
			b, err := fetchBounded(ctx, repo.Blobs(), layer)
			if isNotFound(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("fetching the bundle of referrer %s: %w", r.Digest, err)
			}
			sigs.Bundles = append(sigs.Bundles, b)
			break // one bundle per artifact (cosign's bundle specification)
		}
	}
	return nil
}

// collectLegacySignatures reads cosign's sha256-<hex>.sig manifest, if there is one,
// and the simplesigning payload of each of its layers with their annotations.
func collectLegacySignatures(ctx context.Context, repo *remote.Repository, desc ocispec.Descriptor, sigs *Signatures) error {
	if desc.Digest.Algorithm() != digest.SHA256 {
		return nil // cosign names only sha256 manifests this way
	}
	tag := "sha256-" + desc.Digest.Encoded() + ".sig"
	_, raw, err := fetchTagged(ctx, repo, tag)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fetching %s: %w", tag, err)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil // unreadable: no signature to offer; verification refuses the chart
	}
	for _, layer := range m.Layers {
		if len(sigs.Bundles)+len(sigs.Legacy) >= MaxSignatureArtifacts {
			break
		}
		if layer.MediaType != mediaTypeSimpleSigning {
			continue
		}
		payload, err := fetchBounded(ctx, repo.Blobs(), layer)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("fetching a layer of %s: %w", tag, err)
		}
		sigs.Legacy = append(sigs.Legacy, LegacySignature{
			Payload:     payload,
			Signature:   layer.Annotations[annotationCosignSignature],
			Certificate: nonEmpty(layer.Annotations[annotationCosignCertificate]),
			Chain:       nonEmpty(layer.Annotations[annotationCosignChain]),
			RekorBundle: nonEmpty(layer.Annotations[annotationCosignBundle]),
		})
	}
	return nil
}

// collectProvenanceLayer fetches the .prov `helm push` stores beside the chart layer
// when the chart was packaged with --sign.
func collectProvenanceLayer(ctx context.Context, repo *remote.Repository, sigs *Signatures) error {
	var m ocispec.Manifest
	if err := json.Unmarshal(sigs.Manifest, &m); err != nil {
		return nil // verification tells what is wrong with the manifest
	}
	for _, layer := range m.Layers {
		if layer.MediaType != mediaTypeHelmProvenance {
			continue
		}
		prov, err := fetchBounded(ctx, repo.Blobs(), layer)
		if isNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("fetching the provenance layer: %w", err)
		}
		sigs.Provenance = prov
		return nil
	}
	return nil
}

// fetchBounded fetches what desc describes, refusing before any request what claims to
// be larger than MaxSignatureBytes, and checking digest and size of what arrives.
func fetchBounded(ctx context.Context, from content.Fetcher, desc ocispec.Descriptor) ([]byte, error) {
	if desc.Size < 0 || desc.Size > MaxSignatureBytes {
		return nil, fmt.Errorf("%w: signature artifact %s is %d bytes, over the %d-byte limit",
			ErrArchiveTooLarge, desc.Digest, desc.Size, MaxSignatureBytes)
	}
	return content.FetchAll(ctx, from, desc)
}

func nonEmpty(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
