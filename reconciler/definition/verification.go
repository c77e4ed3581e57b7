package definition

import (
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartverify"
	"github.com/compositor-dev/compositor/internal/condition"
)

// keptVerified refuses to go on with the chart kept in the cluster, while the chart
// source is down, when the definition asks for verification and no check of that very
// archive is on record (for the version the status serves, or one it retains): the kept
// archive was stored before verification was asked for, or its last check failed.
func keptVerified(def *corev1alpha1.CompositionDefinition, kept *chartfetch.Result) error {
	if def.Spec.Chart.Verify == nil || verifiedAt(def, kept.Digest) != nil {
		return nil
	}
	return &condition.Error{Reason: string(chartverify.ReasonUnavailable), Err: fmt.Errorf(
		"the chart source is unreachable and no check of the chart kept in the cluster (%s) is on record, as spec.chart.verify asks", kept.Digest)}
}

// verifiedAt is the record of the check of the served chart of digest: the status's,
// or that of a version the status retains.
func verifiedAt(def *corev1alpha1.CompositionDefinition, digest string) *corev1alpha1.ChartVerificationStatus {
	if v := def.Status.Verification; v != nil && v.Digest == digest && def.Status.Digest == digest {
		return v
	}
	for _, r := range def.Status.Retained {
		if v := r.Verification; v != nil && v.Digest == digest && r.Digest == digest {
			return v
		}
	}
	return nil
}

// refuseUnverified fails the reconciliation of a chart whose signature does not check.
// A refusal that is a verdict (not a signature that could not be fetched) also takes
// back the records of earlier checks of that archive: the chart store then serves it to
// no one, so compositions of a chart whose key was taken out of the keyring, or whose
// definition now asks for a check it fails, are neither admitted nor installed. The
// definition is then not Ready.
func (r *Reconciler) refuseUnverified(def *corev1alpha1.CompositionDefinition, digest string, err error) (ctrl.Result, error) {
	var ce *condition.Error
	verdict := errors.As(err, &ce) && ce.Reason != string(chartverify.ReasonUnavailable)
	served := def.Status.Digest == digest || slices.ContainsFunc(def.Status.Retained, func(r corev1alpha1.ServedChart) bool { return r.Digest == digest })
	if !verdict || !served {
		return r.fail(def, err) // a new chart refused: the served one stays as it is
	}
	if v := def.Status.Verification; v != nil && v.Digest == digest {
		def.Status.Verification = nil
	}
	for i := range def.Status.Retained {
		if v := def.Status.Retained[i].Verification; v != nil && v.Digest == digest {
			def.Status.Retained[i].Verification = nil
		}
	}
	result, failErr := r.fail(def, err)
	ready := condition.New(corev1alpha1.ConditionReady, false, ce.Reason,
		fmt.Sprintf("the chart %s does not pass spec.chart.verify: nothing of it is admitted or installed until it does", digest))
	ready.ObservedGeneration = def.Generation
	meta.SetStatusCondition(&def.Status.Conditions, ready)
	return result, failErr
}

// secretRefs are the Secrets def reads: its chart credentials' and its verification's.
func secretRefs(def *corev1alpha1.CompositionDefinition) []corev1alpha1.SecretKeySelector {
	var out []corev1alpha1.SecretKeySelector
	c := def.Spec.Chart
	if c.Credentials != nil {
		out = append(out, c.Credentials.PasswordRef)
	}
	if v := c.Verify; v != nil {
		switch {
		case v.Provenance != nil:
			out = append(out, v.Provenance.KeyringRef)
		case v.Cosign != nil && v.Cosign.KeyRef != nil:
			out = append(out, *v.Cosign.KeyRef)
		case v.Cosign != nil && v.Cosign.Keyless != nil:
			out = append(out, v.Cosign.Keyless.TrustedRootRef)
		}
	}
	return out
}

// recordVerification writes what the signature check of the served chart proved.
// Without spec.chart.verify there is nothing to record; a chart kept in the cluster
// (verified nil) keeps the record of its last check.
func recordVerification(def *corev1alpha1.CompositionDefinition, verified *chartverify.Identity) {
	switch {
	case def.Spec.Chart.Verify == nil:
		def.Status.Verification = nil
	case verified != nil && verified.Digest == def.Status.Digest:
		def.Status.Verification = verificationStatus(verified)
	}
}

func verificationStatus(id *chartverify.Identity) *corev1alpha1.ChartVerificationStatus {
	s := &corev1alpha1.ChartVerificationStatus{
		Method:         string(id.Method),
		Digest:         id.Digest,
		ManifestDigest: id.ManifestDigest,
		KeyFingerprint: id.KeyFingerprint,
		Signer:         id.Signer,
		Subject:        id.Subject,
		Issuer:         id.Issuer,
	}
	if !id.SignedAt.IsZero() {
		// Kept to the second, as the API server stores it, so an unchanged check does
		// not rewrite the status.
		t := metav1.NewTime(id.SignedAt.UTC().Truncate(1e9))
		s.SignedAt = &t
	}
	return s
}
