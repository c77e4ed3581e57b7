package chartstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartverify"
	"github.com/compositor-dev/compositor/internal/condition"
)

// Reasons of a definition whose verification material cannot be read.
const (
	ReasonVerificationKeyNotFound   = "VerificationKeyNotFound"
	ReasonVerificationKeyNotAllowed = "VerificationKeyNotAllowed"
)

// Verify checks the signature of fetched, the chart of def just fetched, as
// spec.chart.verify asks, and returns what it proved; nil, nil when the definition asks
// for no verification. It fails closed: a signature that cannot be found, fetched or
// checked refuses the chart with a *condition.Error whose reason is a
// chartverify.Reason (or says which Secret is missing).
func (c *Source) Verify(ctx context.Context, def *corev1alpha1.CompositionDefinition, fetched *chartfetch.Result) (*chartverify.Identity, error) {
	v := def.Spec.Chart.Verify
	if v == nil {
		return nil, nil
	}
	if len(fetched.Archive) == 0 {
		return nil, refused(chartverify.Refuse(chartverify.ReasonUnavailable, "the archive of %s is not at hand to check", fetched.Digest))
	}
	material, err := c.signatures(ctx, def, fetched)
	if err != nil {
		return nil, err
	}
	var id chartverify.Identity
	switch {
	case v.Provenance != nil:
		keyring, err := c.secretKey(ctx, def, v.Provenance.KeyringRef, "spec.chart.verify.provenance.keyringRef", ReasonVerificationKeyNotAllowed, ReasonVerificationKeyNotFound)
		if err != nil {
			return nil, err
		}
		id, err = chartverify.VerifyProvenance(fetched.Archive, material.Provenance, keyring)
		if err != nil {
			return nil, refused(err)
		}
	case v.Cosign != nil:
		policy, err := c.cosignPolicy(ctx, def, v.Cosign)
		if err != nil {
			return nil, err
		}
		switch {
		case material.imported:
			id, err = chartverify.VerifyBlobBundle(fetched.Archive, material.Bundle, policy)
		case material.oci != nil:
			id, err = chartverify.VerifyOCI(fetched.Digest, material.oci, policy)
		default:
			err = chartverify.Refuse(chartverify.ReasonInvalid,
				"spec.chart.verify.cosign applies to oci:// charts and imported archives; %s is neither (use spec.chart.verify.provenance)", redacted(def.Spec.Chart.URL))
		}
		if err != nil {
			return nil, refused(err)
		}
	default:
		return nil, refused(chartverify.Refuse(chartverify.ReasonInvalid, "spec.chart.verify names neither provenance nor cosign"))
	}
	return &id, nil
}

// ErrNotVerified means the definition asks for its chart to be verified and its status
// records no check of the chart it serves: not yet, or the last check failed.
var ErrNotVerified = errors.New("the chart's signature is not verified")

// checkVerified refuses the chart def serves (or a view of a version it retains,
// ownership.At) when spec.chart.verify asks for a check and none of that very archive is
// on record: every user of a definition's chart (admission, the controllers, the audit)
// gets it through Chart, so a chart whose check fails serves no one.
func checkVerified(def *corev1alpha1.CompositionDefinition) error {
	if def.Spec.Chart.Verify == nil {
		return nil
	}
	if v := def.Status.Verification; v != nil && v.Digest != "" && v.Digest == def.Status.Digest {
		return nil
	}
	return fmt.Errorf("%w: CompositionDefinition %s/%s asks for it (spec.chart.verify) and records no check of %s; see its Synced condition",
		ErrNotVerified, def.Namespace, def.Name, def.Status.Digest)
}

// material is the signature that came with a chart.
type material struct {
	imported   bool
	Provenance []byte
	Bundle     []byte
	oci        *chartfetch.Signatures
}

// signatures gets the signature material of fetched: from the cluster for an imported
// chart, else from its chart source, through the same network rules and credentials
// as the chart.
func (c *Source) signatures(ctx context.Context, def *corev1alpha1.CompositionDefinition, fetched *chartfetch.Result) (*material, error) {
	if name, imported, err := ParseImportedURL(def.Spec.Chart.URL); imported {
		if err != nil {
			return nil, &condition.Error{Reason: ReasonChartFetchFailed, Terminal: true, Err: err}
		}
		im, err := c.Store.Imported(ctx, name, def.Spec.Chart.Version)
		if err != nil {
			return nil, refused(chartverify.Refuse(chartverify.ReasonUnavailable, "%w", err))
		}
		if im.Digest != fetched.Digest {
			return nil, refused(chartverify.Refuse(chartverify.ReasonTampered, "the imported chart %s %s is now %s, not the %s checked", name, im.Version, im.Digest, fetched.Digest))
		}
		return &material{imported: true, Provenance: im.Provenance, Bundle: im.Bundle}, nil
	}
	ref, err := c.ref(ctx, def)
	if err != nil {
		return nil, err
	}
	sigs, err := c.Fetcher.FetchSignatures(ctx, ref, fetched)
	if err != nil {
		return nil, refused(chartverify.Refuse(chartverify.ReasonUnavailable, "fetching the signature of %s: %w", ref, err))
	}
	m := &material{Provenance: sigs.Provenance}
	if strings.EqualFold(scheme(def.Spec.Chart.URL), "oci") {
		m.oci = sigs
	}
	return m, nil
}

// cosignPolicy reads the key or trusted root spec.chart.verify.cosign names.
func (c *Source) cosignPolicy(ctx context.Context, def *corev1alpha1.CompositionDefinition, v *corev1alpha1.CosignVerification) (chartverify.CosignPolicy, error) {
	if v.KeyRef != nil {
		key, err := c.secretKey(ctx, def, *v.KeyRef, "spec.chart.verify.cosign.keyRef", ReasonVerificationKeyNotAllowed, ReasonVerificationKeyNotFound)
		return chartverify.CosignPolicy{PublicKey: key}, err
	}
	if v.Keyless == nil {
		return chartverify.CosignPolicy{}, refused(chartverify.Refuse(chartverify.ReasonInvalid, "spec.chart.verify.cosign names neither keyRef nor keyless"))
	}
	root, err := c.secretKey(ctx, def, v.Keyless.TrustedRootRef, "spec.chart.verify.cosign.keyless.trustedRootRef", ReasonVerificationKeyNotAllowed, ReasonVerificationKeyNotFound)
	return chartverify.CosignPolicy{Keyless: &chartverify.Keyless{
		Issuer: v.Keyless.Issuer, Subject: v.Keyless.Subject, SubjectRegExp: v.Keyless.SubjectRegExp, TrustedRoot: root,
	}}, err
}

// refused is a verification refusal as a condition: its reason is the chartverify
// Reason.
func refused(err error) error {
	return &condition.Error{Reason: string(chartverify.ReasonOf(err)), Err: fmt.Errorf("the chart's signature does not check: %w", err)}
}

func scheme(raw string) string {
	s, _, _ := strings.Cut(raw, "://")
	return s
}

func redacted(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}
