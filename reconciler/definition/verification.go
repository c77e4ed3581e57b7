package definition

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartverify"
	"github.com/compositor-dev/compositor/internal/condition"
)

// keptVerified refuses to go on with the chart kept in the cluster, while the chart
// source is down, when the definition asks for verification and no check of that very
// archive is on record: the kept archive was stored before verification was asked for.
func keptVerified(def *corev1alpha1.CompositionDefinition, kept *chartfetch.Result) error {
	if def.Spec.Chart.Verify == nil {
		return nil
	}
	if v := def.Status.Verification; v != nil && v.Digest == kept.Digest {
		return nil
	}
	return &condition.Error{Reason: string(chartverify.ReasonUnavailable), Err: fmt.Errorf(
		"the chart source is unreachable and the chart kept in the cluster (%s) was never verified as spec.chart.verify asks", kept.Digest)}
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
