package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/generators/chartsource"
)

// fetchChart resolves the definition's credentials and fetches its chart.
func (r *DefinitionReconciler) fetchChart(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*chartsource.Result, error) {
	spec := def.Spec.Chart
	ref := chartsource.Ref{
		URL:                   spec.URL,
		Repo:                  spec.Repo,
		Version:               spec.Version,
		InsecureSkipVerifyTLS: spec.InsecureSkipVerifyTLS,
	}
	if spec.Credentials != nil {
		password, err := r.password(ctx, def)
		if err != nil {
			return nil, err
		}
		ref.Username, ref.Password = spec.Credentials.Username, password
	}
	result, err := r.Fetcher.Fetch(ctx, ref)
	if err != nil {
		return nil, &phaseError{reason: ReasonChartFetchFailed, err: err}
	}
	return result, nil
}

// password reads the credentials' Secret. Only a Secret in the definition's own
// namespace is read: a definition must not be a way to read another team's Secrets.
func (r *DefinitionReconciler) password(ctx context.Context, def *corev1alpha1.CompositionDefinition) (string, error) {
	ref := def.Spec.Chart.Credentials.PasswordRef
	if ref.Namespace != def.Namespace {
		return "", &phaseError{reason: ReasonCredentialsNotAllowed, terminal: true, err: fmt.Errorf(
			"spec.chart.credentials.passwordRef.namespace is %q: the Secret must be in the definition's namespace %q", ref.Namespace, def.Namespace)}
	}
	secret := &corev1.Secret{}
	if err := r.Live.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return "", &phaseError{reason: ReasonCredentialsNotFound, err: fmt.Errorf("the Secret %s/%s of spec.chart.credentials.passwordRef does not exist", ref.Namespace, ref.Name)}
		}
		return "", fmt.Errorf("reading the Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	password, ok := secret.Data[ref.Key]
	if !ok {
		return "", &phaseError{reason: ReasonCredentialsNotFound, err: fmt.Errorf("the Secret %s/%s has no key %q", ref.Namespace, ref.Name, ref.Key)}
	}
	return string(password), nil
}
