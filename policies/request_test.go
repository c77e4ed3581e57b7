package policies

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
)

// composition is a FireworksApp named x in team-a with status st (nil: none) and the
// release-name annotation release ("": none).
func composition(release string, st map[string]any) map[string]any {
	md := map[string]any{"name": "x", "namespace": "team-a"}
	if release != "" {
		md["annotations"] = map[string]any{vocab.AnnotationReleaseName: release}
	}
	obj := map[string]any{"apiVersion": "composition.krateo.io/v1-1-5", "kind": "FireworksApp", "metadata": md, "spec": map[string]any{}}
	if st != nil {
		obj["status"] = st
	}
	return obj
}

// Every judge reads a write the same way: the one builder derives the kind, the
// release, the revision its install records and whether it renders as an upgrade, and
// what input.definition says.
func TestNewRequestReadsEveryWriteOneWay(t *testing.T) {
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "fireworks", Namespace: "team-a", Annotations: map[string]string{vocab.AnnotationAllowClusterScoped: "StorageClass.storage.k8s.io"}},
		Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: "oci://charts.example/fireworks", Version: "1.1.5"}},
		Status:     corev1alpha1.CompositionDefinitionStatus{Resource: "fireworksapps"},
	}
	installedAt := func(revision int64) map[string]any {
		return map[string]any{"revision": revision, "digest": "sha256:installed"}
	}

	t.Run("a create", func(t *testing.T) {
		r := NewRequest(Write{Operation: "CREATE", Object: composition("", nil), Definition: def})
		assert.Equal(t, metav1.GroupVersionKind{Group: vocab.CompositionGroup, Version: "v1-1-5", Kind: "FireworksApp"}, r.Kind)
		assert.Equal(t, metav1.GroupVersionResource{Group: vocab.CompositionGroup, Version: "v1-1-5", Resource: "fireworksapps"}, r.Resource)
		assert.Equal(t, "x", r.ReleaseName, "the object's name, as the mutating webhook defaults it")
		assert.Equal(t, 1, r.Revision)
		assert.False(t, r.Installed)
		assert.Equal(t, &ChartRef{URL: "oci://charts.example/fireworks", Version: "1.1.5"}, r.Definition)
		assert.Equal(t, map[schema.GroupKind]bool{{Group: "storage.k8s.io", Kind: "StorageClass"}: true}, r.ClusterScoped)
	})
	t.Run("an update", func(t *testing.T) {
		r := NewRequest(Write{Operation: "UPDATE", Object: composition("shop", installedAt(2)), OldObject: composition("shop", installedAt(3))})
		assert.Equal(t, "shop", r.ReleaseName)
		assert.Equal(t, 4, r.Revision, "the revision after the one the old object says is installed")
		assert.False(t, r.Installed, "an update renders as an upgrade by its operation")
	})
	t.Run("a deletion at admission", func(t *testing.T) {
		r := NewRequest(Write{Operation: "DELETE", OldObject: composition("shop", installedAt(3))})
		assert.Equal(t, "x", r.Name)
		assert.Equal(t, "team-a", r.Namespace)
		assert.Equal(t, "shop", r.ReleaseName)
		assert.Equal(t, "FireworksApp", r.Kind.Kind)
	})
	t.Run("the audit of an installed composition", func(t *testing.T) {
		r := NewRequest(Write{Object: composition("", installedAt(5))})
		assert.True(t, r.Installed, "rendered as its next upgrade")
		assert.Equal(t, 6, r.Revision)
	})
	t.Run("the audit of one never installed", func(t *testing.T) {
		r := NewRequest(Write{Object: composition("", map[string]any{"revision": int64(5)})})
		assert.False(t, r.Installed, "only the digest the controller records says it is installed")
	})
	t.Run("admission's kind and resource stand", func(t *testing.T) {
		written := metav1.GroupVersionKind{Group: vocab.CompositionGroup, Version: "v2-0-0", Kind: "FireworksApp"}
		r := NewRequest(Write{Operation: "CREATE", Object: composition("", nil), Kind: written,
			Resource: metav1.GroupVersionResource{Group: vocab.CompositionGroup, Version: "v2-0-0", Resource: "fireworksapps"}, Definition: def})
		assert.Equal(t, written, r.Kind, "the request's kind, not the pinned object's")
		assert.Equal(t, "v2-0-0", r.Resource.Version)
	})
	t.Run("a file without a namespace", func(t *testing.T) {
		obj := composition("", nil)
		delete(obj["metadata"].(map[string]any), "namespace")
		assert.Equal(t, "default", NewRequest(Write{Operation: "CREATE", Object: obj, Namespace: "default"}).Namespace)
		assert.Equal(t, "team-a", NewRequest(Write{Operation: "CREATE", Object: composition("", nil), Namespace: "default"}).Namespace, "the object's own namespace wins")
	})
	t.Run("a definition describes itself", func(t *testing.T) {
		obj := map[string]any{"apiVersion": "core.krateo.io/v1alpha1", "kind": "CompositionDefinition",
			"metadata": map[string]any{"name": "fireworks", "namespace": "team-a"},
			"spec":     map[string]any{"chart": map[string]any{"url": "https://charts.example", "version": "2.0.0"}}}
		r := NewRequest(Write{Operation: "CREATE", Object: obj})
		assert.Equal(t, &ChartRef{URL: "https://charts.example", Version: "2.0.0"}, r.Definition)
		assert.Equal(t, "compositiondefinitions", r.Resource.Resource)
		assert.Zero(t, r.Revision, "only compositions have releases")
	})
}
