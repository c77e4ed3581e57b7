package ownership

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

var (
	v115 = schema.GroupVersionKind{Group: "composition.krateo.io", Version: "v1-1-5", Kind: "FireworksApp"}
	v116 = schema.GroupVersionKind{Group: "composition.krateo.io", Version: "v1-1-6", Kind: "FireworksApp"}
	t0   = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
)

// def is a definition in namespace/name, created age minutes after t0, serving gvk from
// digest (nothing when gvk is empty).
func def(namespace, name string, age int, gvk schema.GroupVersionKind, digest string) corev1alpha1.CompositionDefinition {
	d := corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{
		Namespace: namespace, Name: name, UID: types.UID(namespace + "/" + name),
		CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Minute)),
	}}
	if !gvk.Empty() {
		d.Status.APIVersion, d.Status.Kind, d.Status.Digest = gvk.GroupVersion().String(), gvk.Kind, digest
	}
	return d
}

func deleting(d corev1alpha1.CompositionDefinition) corev1alpha1.CompositionDefinition {
	d.DeletionTimestamp = &metav1.Time{Time: t0}
	return d
}

func name(d *corev1alpha1.CompositionDefinition) string {
	if d == nil {
		return ""
	}
	return d.Namespace + "/" + d.Name
}

func TestFor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		defs      []corev1alpha1.CompositionDefinition
		gvk       schema.GroupVersionKind
		namespace string
		want      string
	}{
		{"none serves it", []corev1alpha1.CompositionDefinition{def("a", "x", 0, v116, "d1")}, v115, "a", ""},
		{"the only server, from any namespace", []corev1alpha1.CompositionDefinition{def("a", "x", 0, v115, "d1")}, v115, "c", "a/x"},
		{"the one in the composition's namespace", []corev1alpha1.CompositionDefinition{def("a", "x", 0, v115, "d1"), def("b", "x", 5, v115, "d1")}, v115, "b", "b/x"},
		{"else the oldest", []corev1alpha1.CompositionDefinition{def("b", "x", 5, v115, "d1"), def("a", "x", 0, v115, "d1")}, v115, "c", "a/x"},
		{"of equal age, by namespace and name", []corev1alpha1.CompositionDefinition{def("b", "x", 0, v115, "d1"), def("a", "y", 0, v115, "d1"), def("a", "x", 0, v115, "d1")}, v115, "c", "a/x"},
		{"not one being deleted", []corev1alpha1.CompositionDefinition{deleting(def("a", "x", 0, v115, "d1")), def("b", "x", 5, v115, "d1")}, v115, "a", "b/x"},
		{"not one that has not served yet", []corev1alpha1.CompositionDefinition{def("a", "x", 0, schema.GroupVersionKind{}, ""), def("b", "x", 5, v115, "d1")}, v115, "a", "b/x"},
		{"not one of another kind", []corev1alpha1.CompositionDefinition{def("a", "x", 0, schema.GroupVersionKind{Group: v115.Group, Version: v115.Version, Kind: "Other"}, "d1")}, v115, "a", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, name(For(tc.defs, tc.gvk, tc.namespace)))
		})
	}
}

func TestConflict(t *testing.T) {
	first := def("team-a", "fireworks", 0, v115, "d1")
	for _, tc := range []struct {
		name   string
		defs   []corev1alpha1.CompositionDefinition
		def    corev1alpha1.CompositionDefinition
		digest string
		want   string
	}{
		{"nobody serves it yet", nil, def("team-b", "fireworks", 5, schema.GroupVersionKind{}, ""), "d2", ""},
		{"the same content beside the owner", []corev1alpha1.CompositionDefinition{first}, def("team-b", "fireworks", 5, schema.GroupVersionKind{}, ""), "d1", ""},
		{"other content than the owner's", []corev1alpha1.CompositionDefinition{first}, def("team-b", "fireworks", 5, schema.GroupVersionKind{}, ""), "d2", "team-a/fireworks"},
		{"other content, though created first", []corev1alpha1.CompositionDefinition{first}, def("team-b", "fireworks", -5, schema.GroupVersionKind{}, ""), "d2", "team-a/fireworks"},
		{"the owner itself, with a newer server of other content", []corev1alpha1.CompositionDefinition{first, def("team-b", "fireworks", 5, v115, "d2")}, first, "d1", ""},
		{"a newer server of other content", []corev1alpha1.CompositionDefinition{first, def("team-b", "fireworks", 5, v115, "d2")}, def("team-b", "fireworks", 5, v115, "d2"), "d2", "team-a/fireworks"},
		{"an owner being deleted does not hold it", []corev1alpha1.CompositionDefinition{deleting(first)}, def("team-b", "fireworks", 5, schema.GroupVersionKind{}, ""), "d2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defs := append(tc.defs, tc.def)
			same := func(d *corev1alpha1.CompositionDefinition) (bool, error) { return d.Status.Digest == tc.digest, nil }
			owner, err := Conflict(defs, &defs[len(defs)-1], v115, same)
			assert.NoError(t, err)
			assert.Equal(t, tc.want, name(owner))
		})
	}
}

func TestConflictThatCannotBeTold(t *testing.T) {
	defs := []corev1alpha1.CompositionDefinition{def("team-a", "fireworks", 0, v115, "d1"), def("team-b", "fireworks", 5, schema.GroupVersionKind{}, "")}
	owner, err := Conflict(defs, &defs[1], v115, func(*corev1alpha1.CompositionDefinition) (bool, error) { return false, errors.New("chart unavailable") })
	assert.EqualError(t, err, "chart unavailable")
	assert.Equal(t, "team-a/fireworks", name(owner))
}

func TestServedByAnotherAndGenerated(t *testing.T) {
	a, b := def("a", "x", 0, v115, "d1"), def("b", "x", 5, v116, "d1")
	defs := []corev1alpha1.CompositionDefinition{a, b}
	assert.False(t, ServedByAnother(defs, &defs[0], v115))
	assert.True(t, ServedByAnother(append(defs, def("c", "x", 9, v115, "d1")), &defs[0], v115))
	assert.True(t, Generated(defs, v115.GroupKind()))
	assert.False(t, Generated(defs, schema.GroupKind{Group: v115.Group, Kind: "DemoApp"}))
	assert.Equal(t, "a/x", name(Owner(defs, v115)))
}

// capturedIndex is a client.FieldIndexer that keeps the index function it is given.
type capturedIndex struct {
	field   string
	extract client.IndexerFunc
}

func (c *capturedIndex) IndexField(_ context.Context, _ client.Object, field string, extract client.IndexerFunc) error {
	c.field, c.extract = field, extract
	return nil
}

func TestServedIndexSelectsWhatStatusReports(t *testing.T) {
	idx := &capturedIndex{}
	assert.NoError(t, IndexServed(context.Background(), idx))
	assert.Equal(t, ServedIndex, idx.field)
	selects := func(opt client.ListOption, d corev1alpha1.CompositionDefinition) bool {
		lo := &client.ListOptions{}
		opt.ApplyToList(lo)
		for _, v := range idx.extract(&d) {
			if lo.FieldSelector.Matches(fields.Set{ServedIndex: v}) {
				return true
			}
		}
		return false
	}
	serving := def("a", "x", 0, v115, "d1")
	assert.True(t, selects(ServingVersion(v115), serving))
	assert.False(t, selects(ServingVersion(v116), serving))
	assert.True(t, selects(ServingKind(v116.GroupKind()), serving), "any version of the kind")
	assert.False(t, selects(ServingKind(schema.GroupKind{Group: v115.Group, Kind: "Other"}), serving))
	assert.False(t, selects(ServingVersion(v115), def("a", "y", 0, schema.GroupVersionKind{}, "")), "a definition that serves nothing yet")
}

func TestServedReadsWhatStatusReports(t *testing.T) {
	d := def("ops", "fireworks", 0, v115, "sha256:a")
	served, ok := Served(&d)
	assert.True(t, ok)
	assert.Equal(t, v115, served)

	for name, status := range map[string]corev1alpha1.CompositionDefinitionStatus{
		"nothing yet":       {},
		"no kind":           {APIVersion: v115.GroupVersion().String()},
		"another group":     {APIVersion: "apps/v1", Kind: "FireworksApp"},
		"no version":        {APIVersion: "composition.krateo.io/", Kind: "FireworksApp"},
		"not an apiVersion": {APIVersion: "a/b/c", Kind: "FireworksApp"},
	} {
		d := def("ops", "fireworks", 0, schema.GroupVersionKind{}, "")
		d.Status = status
		_, ok := Served(&d)
		assert.False(t, ok, name)
	}
}
