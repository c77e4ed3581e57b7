package webhooks

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/certs"
)

// TestChartConfigurationsAreCompositors renders the chart's webhook configurations and
// requires them equal to what Compositor applies at start for the chart's Service, but
// the rules and CA bundle, which only Compositor writes: the chart owns the
// configurations (so that `helm uninstall` deletes them) and Compositor applies the
// same fields, so neither undoes the other's writes.
func TestChartConfigurationsAreCompositors(t *testing.T) {
	chart, err := loader.Load("../charts/compositor")
	require.NoError(t, err)
	for _, tc := range []struct {
		mode        string
		annotations map[string]string
	}{
		{mode: "builtin"},
		{mode: "cert-manager", annotations: certs.InjectCAFrom("ops", "cmp-compositor-webhook")},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			values, err := chartvalues.ToRenderValues(chart, map[string]any{
				"certs":   map[string]any{"mode": tc.mode},
				"webhook": map[string]any{"timeoutSeconds": 7},
			}, chartcommon.ReleaseOptions{Name: "cmp", Namespace: "ops", IsInstall: true}, chartcommon.DefaultCapabilities)
			require.NoError(t, err)
			rendered, err := engine.Render(chart, values)
			require.NoError(t, err)
			manifest := rendered["compositor/templates/webhookconfigurations.yaml"]
			require.NotEmpty(t, manifest)

			var gotMutating admissionregistrationv1.MutatingWebhookConfiguration
			var gotValidating admissionregistrationv1.ValidatingWebhookConfiguration
			docs := splitYAML(manifest)
			require.Len(t, docs, 2)
			require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &gotMutating))
			require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &gotValidating))

			mutating, validating, err := Configurations(ConfigurationOptions{
				Endpoint:       Endpoint{Service: &admissionregistrationv1.ServiceReference{Namespace: "ops", Name: "cmp-compositor-webhook", Port: ptr.To[int32](443)}},
				TimeoutSeconds: 7,
				Annotations:    tc.annotations,
			})
			require.NoError(t, err)
			require.Equal(t, mutating.TypeMeta, gotMutating.TypeMeta)
			require.Equal(t, validating.TypeMeta, gotValidating.TypeMeta)
			require.Equal(t, ConfigurationName, gotMutating.Name)
			require.Equal(t, ConfigurationName, gotValidating.Name)
			require.Equal(t, mutating.Annotations, gotMutating.Annotations)
			require.Equal(t, validating.Annotations, gotValidating.Annotations)
			// The chart leaves the rules (and the CA bundle) to Compositor: Helm never
			// changes what it does not template.
			for i := range mutating.Webhooks {
				require.NotEmpty(t, mutating.Webhooks[i].Rules)
				mutating.Webhooks[i].Rules = nil
			}
			for i := range validating.Webhooks {
				require.NotEmpty(t, validating.Webhooks[i].Rules)
				validating.Webhooks[i].Rules = nil
			}
			require.Equal(t, mutating.Webhooks, gotMutating.Webhooks)
			require.Equal(t, validating.Webhooks, gotValidating.Webhooks)
			require.Equal(t, "Helm", gotMutating.Labels["app.kubernetes.io/managed-by"])
		})
	}
}

// splitYAML returns the non-empty documents of a multi-document manifest.
func splitYAML(manifest string) []string {
	var docs []string
	for _, doc := range regexpDocSep.Split(manifest, -1) {
		if regexpBlank.MatchString(doc) {
			continue
		}
		docs = append(docs, doc)
	}
	return docs
}

var (
	regexpDocSep = regexp.MustCompile(`(?m)^---\s*$`)
	regexpBlank  = regexp.MustCompile(`^(\s*(#.*)?\n?)*$`)
)
