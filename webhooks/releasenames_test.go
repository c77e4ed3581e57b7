package webhooks

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// TestReleaseNamesWatchEachKindWrittenUntilItIsRetired: the first question about a kind
// starts one informer for it, whatever version asks; it answers with the compositions
// of the namespace using the name; the informer stops as soon as the CRD stops serving
// its version, or goes; a CRD of another group is none of its business.
func TestReleaseNamesWatchEachKindWrittenUntilItIsRetired(t *testing.T) {
	cp := controlplane.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	scheme, err := api.NewScheme()
	require.NoError(t, err)
	crds, err := cache.New(cp.Config, cache.Options{Scheme: scheme})
	require.NoError(t, err)
	go func() { _ = crds.Start(ctx) }()
	md, err := metadata.NewForConfig(cp.Config)
	require.NoError(t, err)
	names := NewReleaseNames(md, crds)
	stopped := make(chan struct{})
	go func() { _ = names.Start(ctx); close(stopped) }()

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
	other, generated := newCRD("other.example"), newCRD(vocab.CompositionGroup)
	for _, obj := range []*apiextensionsv1.CustomResourceDefinition{other, generated} {
		require.NoError(t, cp.Client.Create(ctx, obj))
	}
	tinies := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: vocab.CompositionGroup, Version: v, Resource: "tinies"}
	}
	create := func(name, namespace, release string) {
		t.Helper()
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: "v1", Kind: "Tiny"})
		obj.SetName(name)
		obj.SetNamespace(namespace)
		obj.SetAnnotations(map[string]string{vocab.AnnotationReleaseName: release})
		require.EventuallyWithT(t, func(c *assert.CollectT) { assert.NoError(c, cp.Client.Create(ctx, obj)) }, 30*time.Second, 50*time.Millisecond)
	}
	create("first", "default", "shared")
	create("elsewhere", "kube-public", "shared")
	create("third", "default", "own")

	asked, askCancel := context.WithTimeout(ctx, 30*time.Second)
	defer askCancel()
	users, err := names.Users(asked, tinies("v2"), "default", "shared")
	require.NoError(t, err)
	assert.Equal(t, []string{"first"}, users, "the first question waits for the list")
	create("second", "default", "shared")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		users, err := names.Users(asked, tinies("v1"), "default", "shared")
		assert.NoError(c, err)
		assert.ElementsMatch(c, []string{"first", "second"}, users)
	}, 30*time.Second, 50*time.Millisecond)
	users, err = names.Users(asked, tinies("v1"), "default", "unused")
	require.NoError(t, err)
	assert.Empty(t, users)
	tiny := schema.GroupResource{Group: vocab.CompositionGroup, Resource: "tinies"}
	assert.Equal(t, map[schema.GroupResource]string{tiny: "v2"}, names.watching(), "one informer for the kind, at the version first asked")

	unserve := func(obj *apiextensionsv1.CustomResourceDefinition, i int) {
		t.Helper()
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		obj.Spec.Versions[i].Served = false
		require.NoError(t, cp.Client.Update(ctx, obj))
	}
	unserve(other, 1)
	unserve(generated, 0) // v1: the informer watches v2, and stays
	require.Eventually(t, func() bool {
		// etcd's resourceVersions rise: the update, or a later one, is handled.
		rv, _ := names.handled.Load(generated.Name)
		seen, _ := strconv.ParseUint(fmt.Sprint(rv), 10, 64)
		sent, _ := strconv.ParseUint(generated.ResourceVersion, 10, 64)
		return seen >= sent
	}, 30*time.Second, 10*time.Millisecond, "the update is handled")
	assert.Equal(t, map[schema.GroupResource]string{tiny: "v2"}, names.watching())
	unserve(generated, 1) // v2
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, names.watching()) }, 30*time.Second, 50*time.Millisecond)

	require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(generated), generated))
	generated.Spec.Versions[0].Served = true
	require.NoError(t, cp.Client.Update(ctx, generated))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		users, err := names.Users(asked, tinies("v1"), "default", "shared")
		assert.NoError(c, err)
		assert.ElementsMatch(c, []string{"first", "second"}, users)
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, cp.Client.Delete(ctx, other))
	require.NoError(t, cp.Client.Delete(ctx, generated))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, names.watching()) }, 30*time.Second, 50*time.Millisecond)

	cancel()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("ReleaseNames did not stop")
	}
	_, err = names.Users(context.Background(), tinies("v1"), "default", "shared")
	assert.Error(t, err, "no question is answered once stopped")
}
