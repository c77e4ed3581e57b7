package crd

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// TestAPIServer applies the generated fireworks-app CRD to a real kube-apiserver, then,
// for each chart version, a copy of that version's schema stored as itself (no
// conversion webhook runs here) under a test group, and writes every example values
// file through it: valid ones must be stored unchanged, invalid ones refused.
func TestAPIServer(t *testing.T) {
	cp := controlplane.Start(t)
	scheme := runtime.NewScheme()
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	versions, _ := fireworksVersions(t)
	var all []ServedVersion
	for _, v := range samplecharts.Versions() {
		all = append(all, versions[v])
	}
	generated := buildFireworks(t, all...)
	require.NoError(t, c.Create(ctx, generated))
	waitEstablished(ctx, t, c, generated.Name)

	for _, v := range samplecharts.Versions() {
		t.Run(v, func(t *testing.T) {
			name, err := VersionName(v)
			require.NoError(t, err)
			group := name + ".crd-test.compositor.dev"
			single, _, err := Build(BuildOptions{Group: group, ChartName: samplecharts.ChartName, Versions: []ServedVersion{versions[v]}, Conversion: fireworksWebhook})
			require.NoError(t, err)
			single.Spec.Versions = single.Spec.Versions[:1] // the served version, stored as itself
			single.Spec.Versions[0].Storage = true
			single.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
			require.NoError(t, c.Create(ctx, single))
			waitEstablished(ctx, t, c, single.Name)

			examples, err := samplecharts.Examples(v)
			require.NoError(t, err)
			for i, ex := range examples {
				var spec map[string]any
				require.NoError(t, yaml.Unmarshal(ex.Values, &spec))
				if spec == nil {
					spec = map[string]any{}
				}
				obj := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": group + "/" + name,
					"kind":       single.Spec.Names.Kind,
					"metadata":   map[string]any{"name": fmt.Sprintf("example-%d", i), "namespace": "default"},
					"spec":       spec,
				}}
				err := c.Create(ctx, obj, client.FieldValidation("Strict"))
				if _, webhookOnly := webhookOnlyExamples[ex.Name]; !ex.Valid && webhookOnly {
					assert.NoError(t, err, "%s: the CRD leaves it to the webhook", ex.Name)
					continue
				}
				if !ex.Valid {
					assert.True(t, apierrors.IsInvalid(err) || apierrors.IsBadRequest(err), "%s: want refused, got %v", ex.Name, err)
					continue
				}
				if !assert.NoError(t, err, ex.Name) {
					continue
				}
				stored := &unstructured.Unstructured{}
				stored.SetGroupVersionKind(obj.GroupVersionKind())
				require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(obj), stored))
				assert.Equal(t, normalized(t, spec), normalized(t, stored.Object["spec"]), "%s stored unchanged", ex.Name)
			}
		})
	}
}

func waitEstablished(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var got apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err == nil {
		// Established is the API server's word; discovery, which the client maps kinds
		// with, follows a moment later.
		err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var got apiextensionsv1.CustomResourceDefinition
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &got); err != nil {
				return false, err
			}
			for _, v := range got.Spec.Versions {
				if !v.Served {
					continue
				}
				gvk := schema.GroupVersionKind{Group: got.Spec.Group, Version: v.Name, Kind: got.Spec.Names.Kind}
				if _, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
					return false, nil
				}
			}
			return true, nil
		})
	}
	if err != nil {
		var got apiextensionsv1.CustomResourceDefinition
		_ = c.Get(context.Background(), client.ObjectKey{Name: name}, &got)
		t.Fatalf("CRD %s never became Established: %v; conditions %+v", name, err, got.Status.Conditions)
	}
}

// normalized gives a JSON value the number types the API server uses.
func normalized(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, utiljson.Unmarshal(b, &out))
	return out
}
