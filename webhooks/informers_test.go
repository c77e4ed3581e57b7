package webhooks

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// removals is a real cache that records the informers removed from it.
type removals struct {
	cache.Cache
	mu      sync.Mutex
	removed []schema.GroupVersionKind
}

func (r *removals) RemoveInformer(ctx context.Context, obj client.Object) error {
	r.mu.Lock()
	r.removed = append(r.removed, obj.GetObjectKind().GroupVersionKind())
	r.mu.Unlock()
	return r.Cache.RemoveInformer(ctx, obj)
}

func (r *removals) list() []schema.GroupVersionKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]schema.GroupVersionKind(nil), r.removed...)
}

// TestForgetRetiredVersions removes the release-name check's informer of a version as
// soon as its CRD stops serving it, and of every version when the CRD goes; a CRD of
// another group is none of its business.
func TestForgetRetiredVersions(t *testing.T) {
	cp := controlplane.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	scheme, err := api.NewScheme()
	require.NoError(t, err)
	real, err := cache.New(cp.Config, cache.Options{Scheme: scheme})
	require.NoError(t, err)
	c := &removals{Cache: real}
	go func() { _ = real.Start(ctx) }()
	require.True(t, real.WaitForCacheSync(ctx))
	require.NoError(t, ForgetRetiredVersions(ctx, c))

	version := func(name string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: true, Storage: storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", XPreserveUnknownFields: ptr.To(true)}}}
	}
	newCRD := func(group string) *apiextensionsv1.CustomResourceDefinition {
		return &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "tinies." + group},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: group, Scope: apiextensionsv1.NamespaceScoped,
				Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: "tinies", Singular: "tiny", Kind: "Tiny", ListKind: "TinyList"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{version("v1", true), version("v2", false)},
			},
		}
	}
	other := newCRD("other.example")
	generated := newCRD(crd.Group)
	for _, obj := range []*apiextensionsv1.CustomResourceDefinition{other, generated} {
		require.NoError(t, cp.Client.Create(ctx, obj))
	}
	unserve := func(obj *apiextensionsv1.CustomResourceDefinition) {
		t.Helper()
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		obj.Spec.Versions[1].Served = false
		require.NoError(t, cp.Client.Update(ctx, obj))
	}
	unserve(other)
	unserve(generated)
	v2 := schema.GroupVersionKind{Group: crd.Group, Version: "v2", Kind: "Tiny"}
	require.EventuallyWithT(t, func(c2 *assert.CollectT) {
		assert.Equal(c2, []schema.GroupVersionKind{v2}, c.list())
	}, 30*time.Second, 100*time.Millisecond)

	require.NoError(t, cp.Client.Delete(ctx, other))
	require.NoError(t, cp.Client.Delete(ctx, generated))
	v1 := schema.GroupVersionKind{Group: crd.Group, Version: "v1", Kind: "Tiny"}
	require.EventuallyWithT(t, func(c2 *assert.CollectT) {
		assert.Equal(c2, []schema.GroupVersionKind{v2, v1}, c.list())
	}, 30*time.Second, 100*time.Millisecond)
}
