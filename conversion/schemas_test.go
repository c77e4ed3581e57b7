package conversion

import (
	"context"
	"errors"
	"testing"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// crdLister lists and gets a fixed set of CRDs and counts the calls of each.
type crdLister struct {
	client.Reader
	crds       []apiextensionsv1.CustomResourceDefinition
	calls      int
	gets       int
	getFailure error
}

func (l *crdLister) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	l.gets++
	if l.getFailure != nil {
		return l.getFailure
	}
	for _, c := range l.crds {
		if c.Name == key.Name {
			c.DeepCopyInto(obj.(*apiextensionsv1.CustomResourceDefinition))
			return nil
		}
	}
	return apierrors.NewNotFound(apiextensionsv1.Resource("customresourcedefinitions"), key.Name)
}

func (l *crdLister) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	l.calls++
	list.(*apiextensionsv1.CustomResourceDefinitionList).Items = l.crds
	return nil
}

func TestCRDSchemas(t *testing.T) {
	fx := fireworks(t)
	ctx := context.Background()
	gk := schema.GroupKind{Group: vocab.CompositionGroup, Kind: "FireworksApp"}
	withRV := func(rv string, versions int) apiextensionsv1.CustomResourceDefinition {
		c := *fx.crd.DeepCopy()
		c.UID, c.ResourceVersion = "uid-1", rv
		c.Spec.Versions = append(c.Spec.Versions[:versions:versions], c.Spec.Versions[len(c.Spec.Versions)-1])
		return c
	}

	t.Run("kept per resourceVersion", func(t *testing.T) {
		cached := &crdLister{crds: []apiextensionsv1.CustomResourceDefinition{withRV("1", 3)}}
		src := NewCRDSchemas(cached, nil)
		first, err := src.Schemas(ctx, gk, []string{"v2-0-0"})
		require.NoError(t, err)
		again, err := src.Schemas(ctx, gk, nil)
		require.NoError(t, err)
		assert.Same(t, first, again)
		assert.Equal(t, 1, cached.calls, "once known, a CRD is read by its name, not found in a list of every CRD")
		assert.Equal(t, 1, cached.gets)

		cached.crds = []apiextensionsv1.CustomResourceDefinition{withRV("2", 2)}
		changed, err := src.Schemas(ctx, gk, nil)
		require.NoError(t, err)
		assert.NotSame(t, first, changed)
		assert.Equal(t, []string{"v1-1-5", "v1-1-6"}, changed.Served())
	})

	t.Run("asks the API server when the cache lags", func(t *testing.T) {
		cached := &crdLister{crds: []apiextensionsv1.CustomResourceDefinition{withRV("1", 2)}}
		live := &crdLister{crds: []apiextensionsv1.CustomResourceDefinition{withRV("2", 3)}}
		src := NewCRDSchemas(cached, live)
		s, err := src.Schemas(ctx, gk, []string{"v1-1-5"})
		require.NoError(t, err)
		assert.Equal(t, 0, live.calls+live.gets, "the cache had every version")
		assert.Equal(t, []string{"v1-1-5", "v1-1-6"}, s.Served())

		s, err = src.Schemas(ctx, gk, []string{"v2-0-0"})
		require.NoError(t, err)
		assert.Equal(t, 1, live.calls+live.gets)
		assert.Equal(t, []string{"v1-1-5", "v1-1-6", "v2-0-0"}, s.Served())

		cached.crds = nil
		_, err = src.Schemas(ctx, gk, nil)
		require.NoError(t, err, "a kind the cache does not have yet comes from the API server")
		live.crds = nil
		_, err = src.Schemas(ctx, gk, nil)
		assert.ErrorIs(t, err, ErrUnknownKind)
	})

	t.Run("a CRD renamed or gone is looked for again", func(t *testing.T) {
		cached := &crdLister{crds: []apiextensionsv1.CustomResourceDefinition{withRV("1", 3)}}
		src := NewCRDSchemas(cached, nil)
		_, err := src.Schemas(ctx, gk, nil)
		require.NoError(t, err)
		renamed := withRV("2", 2)
		renamed.Name = "other." + vocab.CompositionGroup
		cached.crds = []apiextensionsv1.CustomResourceDefinition{renamed}
		s, err := src.Schemas(ctx, gk, nil)
		require.NoError(t, err)
		assert.Equal(t, []string{"v1-1-5", "v1-1-6"}, s.Served())
		assert.Equal(t, 2, cached.calls)

		cached.getFailure = errors.New("cache stopped")
		_, err = src.Schemas(ctx, gk, nil)
		assert.ErrorContains(t, err, "cache stopped", "a failing read is said, not taken for a missing CRD")
	})

	t.Run("a CRD without a storage version", func(t *testing.T) {
		c := withRV("1", 3)
		c.Spec.Versions = c.Spec.Versions[:3]
		_, err := NewCRDSchemas(&crdLister{crds: []apiextensionsv1.CustomResourceDefinition{c}}, nil).Schemas(ctx, gk, nil)
		assert.ErrorIs(t, err, ErrUnconvertibleCRD)
	})
}
