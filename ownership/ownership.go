// Package ownership is Compositor's tenancy rule for generated APIs, in one place: which
// CompositionDefinition serves a kind and version, which one a composition belongs to,
// and when a definition may not serve what another already does. The webhooks, the
// definition reconciler, the composition controllers, the release bindings and the
// audit all ask it, so they cannot disagree.
//
// The rule:
//
//   - A definition serves the kind and version its status reports (status.kind and
//     status.apiVersion), from the chart content of its status.digest, unless it is
//     being deleted; and the versions it retains (status.retained), each from its own
//     chart, while compositions are still pinned to them after it moved on.
//   - One kind and version has one chart content (the files the chart holds, not the
//     archive's bytes). The first definition to serve it (the oldest, then by namespace
//     and name) owns it; a definition that would serve it from other content conflicts
//     with that owner and does not serve it.
//   - Several definitions may serve one kind and version from the same content, say one
//     per team namespace. A composition belongs to the definition in its own namespace
//     when there is one, else to the owner: its controller, identity and release rights
//     are that definition's.
package ownership

import (
	"cmp"
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
)

// Served is what def's status says it serves: the group, version and kind of its
// generated API, which a definition being deleted keeps until its compositions are
// gone. ok is false while it serves none.
func Served(def *corev1alpha1.CompositionDefinition) (gvk schema.GroupVersionKind, ok bool) {
	gv, err := schema.ParseGroupVersion(def.Status.APIVersion)
	if err != nil || gv.Group != vocab.CompositionGroup || gv.Version == "" || def.Status.Kind == "" {
		return schema.GroupVersionKind{}, false
	}
	return gv.WithKind(def.Status.Kind), true
}

// Serves tells whether def serves gvk: its status reports that kind and version, as
// the version it serves or one it retains (Reports), and it is not being deleted.
func Serves(def *corev1alpha1.CompositionDefinition, gvk schema.GroupVersionKind) bool {
	return def.DeletionTimestamp.IsZero() && Reports(def, gvk)
}

// Reports tells whether def's status reports gvk: its kind, and the version it serves
// or one it retains (status.retained: a version compositions are still pinned to
// after the definition moved on), being deleted or not.
func Reports(def *corev1alpha1.CompositionDefinition, gvk schema.GroupVersionKind) bool {
	if def.Status.Kind != gvk.Kind {
		return false
	}
	apiVersion := gvk.GroupVersion().String()
	return def.Status.APIVersion == apiVersion || slices.ContainsFunc(def.Status.Retained, func(r corev1alpha1.ServedChart) bool {
		return r.APIVersion == apiVersion
	})
}

// At is def as it serves gvk's version. For the version its status serves, def itself.
// For a version it retains, a copy whose status (apiVersion, digest, package URL) and
// spec.chart.version describe that version's chart instead: whatever reads the chart
// of a definition (the webhooks, the controllers, the chart store) then reads the
// chart of the composition's version, while the definition moves its compositions to
// another. nil when def reports no such version.
func At(def *corev1alpha1.CompositionDefinition, gvk schema.GroupVersionKind) *corev1alpha1.CompositionDefinition {
	if def.Status.Kind != gvk.Kind {
		return nil
	}
	apiVersion := gvk.GroupVersion().String()
	if def.Status.APIVersion == apiVersion {
		return def
	}
	for _, r := range def.Status.Retained {
		if r.APIVersion != apiVersion {
			continue
		}
		view := *def // the copy's slices and maps are shared: it is only read
		view.Spec.Chart.Version = r.Chart
		view.Status.APIVersion, view.Status.Digest, view.Status.PackageURL = r.APIVersion, r.Digest, r.PackageURL
		view.Status.Verification = r.Verification
		return &view
	}
	return nil
}

// Retains tells whether def's status retains version (status.retained) for the
// compositions still pinned to it.
func Retains(def *corev1alpha1.CompositionDefinition, version string) bool {
	return slices.ContainsFunc(def.Status.Retained, func(r corev1alpha1.ServedChart) bool {
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		return err == nil && gv.Version == version
	})
}

// Current is the version def serves now, of a definition or of a view of it (At): the
// served version its status lists that it does not retain; "" when none.
func Current(def *corev1alpha1.CompositionDefinition) string {
	for _, v := range def.Status.Managed.VersionInfo {
		if v.Served && !Retains(def, v.Version) {
			return v.Version
		}
	}
	return ""
}

// Servers are the definitions among defs that serve gvk, owner first: the oldest, then
// by namespace and name; each as At gives it for gvk. defs is not modified.
func Servers(defs []corev1alpha1.CompositionDefinition, gvk schema.GroupVersionKind) []*corev1alpha1.CompositionDefinition {
	var out []*corev1alpha1.CompositionDefinition
	for i := range defs {
		if Serves(&defs[i], gvk) {
			out = append(out, At(&defs[i], gvk))
		}
	}
	slices.SortFunc(out, olderFirst)
	return out
}

// Owner is the definition that owns gvk, or nil when none serves it.
func Owner(defs []corev1alpha1.CompositionDefinition, gvk schema.GroupVersionKind) *corev1alpha1.CompositionDefinition {
	if servers := Servers(defs, gvk); len(servers) > 0 {
		return servers[0]
	}
	return nil
}

// For is the definition a composition of gvk in namespace belongs to: the one serving
// gvk in namespace, else the owner; nil when none serves gvk.
func For(defs []corev1alpha1.CompositionDefinition, gvk schema.GroupVersionKind, namespace string) *corev1alpha1.CompositionDefinition {
	servers := Servers(defs, gvk)
	for _, d := range servers {
		if d.Namespace == namespace {
			return d
		}
	}
	if len(servers) > 0 {
		return servers[0]
	}
	return nil
}

// Conflict is the definition that keeps def from serving gvk: one older than def that
// serves gvk from other chart content. same tells whether a server's content is def's
// (an archive digest compares cheaply; two packagings of one chart differ in it but
// not in content). nil means def may serve gvk.
func Conflict(defs []corev1alpha1.CompositionDefinition, def *corev1alpha1.CompositionDefinition, gvk schema.GroupVersionKind,
	same func(server *corev1alpha1.CompositionDefinition) (bool, error)) (*corev1alpha1.CompositionDefinition, error) {
	for _, d := range Servers(defs, gvk) {
		if d.UID == def.UID {
			return nil, nil // def is older than every server after it
		}
		if ok, err := same(d); err != nil || !ok {
			return d, err
		}
	}
	return nil, nil
}

// ServedByAnother tells whether a definition other than def serves gvk.
func ServedByAnother(defs []corev1alpha1.CompositionDefinition, def *corev1alpha1.CompositionDefinition, gvk schema.GroupVersionKind) bool {
	return slices.ContainsFunc(Servers(defs, gvk), func(d *corev1alpha1.CompositionDefinition) bool { return d.UID != def.UID })
}

// Generated tells whether some definition reports gvk's kind in group, in any version:
// the kind is a generated API, whose writes need a chart to be judged.
func Generated(defs []corev1alpha1.CompositionDefinition, gk schema.GroupKind) bool {
	return slices.ContainsFunc(defs, func(d corev1alpha1.CompositionDefinition) bool {
		served, ok := Served(&d)
		return ok && served.GroupKind() == gk
	})
}

func olderFirst(a, b *corev1alpha1.CompositionDefinition) int {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		if a.CreationTimestamp.Before(&b.CreationTimestamp) {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// ServedIndex is the name of the cache index of definitions by what their status
// reports serving; list with ServingVersion or ServingKind to read only those.
const ServedIndex = "compositor.dev/served"

// IndexServed adds ServedIndex to a cache of CompositionDefinitions, before it starts.
// Admission reads a composition's definitions through it on every review: a list of
// every definition each time grew with their number.
func IndexServed(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &corev1alpha1.CompositionDefinition{}, ServedIndex, func(obj client.Object) []string {
		def, ok := obj.(*corev1alpha1.CompositionDefinition)
		if !ok {
			return nil
		}
		served, ok := Served(def)
		if !ok {
			return nil
		}
		keys := []string{versionKey(served), kindKey(served.GroupKind())}
		for _, r := range def.Status.Retained {
			if gv, err := schema.ParseGroupVersion(r.APIVersion); err == nil {
				keys = append(keys, versionKey(gv.WithKind(served.Kind)))
			}
		}
		return keys
	})
}

// ServingVersion selects, in a cache with ServedIndex, the definitions whose status
// reports gvk; For, Owner and Servers then decide among them.
func ServingVersion(gvk schema.GroupVersionKind) client.ListOption {
	return client.MatchingFields{ServedIndex: versionKey(gvk)}
}

// ServingKind selects, in a cache with ServedIndex, the definitions whose status
// reports gk in any version; Generated then holds for gk when there is one.
func ServingKind(gk schema.GroupKind) client.ListOption {
	return client.MatchingFields{ServedIndex: kindKey(gk)}
}

func versionKey(gvk schema.GroupVersionKind) string {
	return "version=" + gvk.Group + "/" + gvk.Version + "/" + gvk.Kind
}

func kindKey(gk schema.GroupKind) string { return "kind=" + gk.Group + "/" + gk.Kind }
