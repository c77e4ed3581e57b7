package composition

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
)

// ConditionRepresentable tells whether every served version of the kind can show the
// composition's values: False names the versions whose schema refuses a value the
// pinned version allows (a replica count above an older chart's maximum). Their
// clients still read the value as it is, and may write it back unchanged (the API
// server ratchets unchanged values), but not change it outside their schema.
const ConditionRepresentable = "Representable"

// Reasons of ConditionRepresentable.
const (
	ReasonRepresentable    = "Representable"
	ReasonNotRepresentable = "NotRepresentable"
)

// setRepresentable checks obj, as read through the controller's version, against
// every other served version's schema, as those versions' clients read it.
func (r *Reconciler) setRepresentable(ctx context.Context, obj *unstructured.Unstructured) {
	if r.Schemas == nil {
		return
	}
	s, err := r.Schemas.Schemas(ctx, r.GVK.GroupKind(), []string{r.GVK.Version})
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Cannot tell which served versions show the composition's values", "reason", err.Error())
		return
	}
	var refused []string
	for _, version := range s.Served() {
		if version == r.GVK.Version {
			continue
		}
		view, err := s.AsReadThrough(obj.Object, r.GVK.Version, version)
		if err != nil {
			refused = append(refused, fmt.Sprintf("%s: %v", version, err))
			continue
		}
		for _, e := range s.Refused(version, view) {
			refused = append(refused, fmt.Sprintf("%s: %s", version, e.Error()))
		}
	}
	c := metav1.Condition{Type: ConditionRepresentable, Status: metav1.ConditionTrue, Reason: ReasonRepresentable,
		Message: "every served version can show the values", ObservedGeneration: obj.GetGeneration()}
	if len(refused) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonNotRepresentable
		c.Message = fmt.Sprintf("%s; clients of those versions read the values as they are and may write them back unchanged, not change them beyond their schema: read and write through %s",
			strings.Join(refused, "; "), r.GVK.Version)
	}
	setCondition(obj, c)
}
