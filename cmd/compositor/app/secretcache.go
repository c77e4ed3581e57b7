package app

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// secretCache configures the manager's cache of Secrets. Compositor watches only
// their metadata, to hear when a chart's credentials change, and needs no more than
// namespace, name and labels. Annotations are dropped because
// kubectl.kubernetes.io/last-applied-configuration holds the whole Secret, data
// included, when it was written with `kubectl apply`; managedFields go too.
func secretCache() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		// Keyed by GVK: the typed and the metadata-only informer of Secrets alike.
		&corev1.Secret{}: {Transform: stripSecretMetadata},
	}
}

// stripSecretMetadata is the cache transform of Secrets: it clears annotations and
// managedFields of the object before the cache stores it. Objects without metadata
// (a deleted-final-state tombstone) pass unchanged.
func stripSecretMetadata(obj any) (any, error) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	accessor.SetAnnotations(nil)
	accessor.SetManagedFields(nil)
	return obj, nil
}
