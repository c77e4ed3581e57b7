package rbac

import "k8s.io/apimachinery/pkg/runtime/schema"

// refusedGroups are API groups in which Compositor grants nothing a chart could use to
// create objects.
var refusedGroups = map[string]string{
	"rbac.authorization.k8s.io":    "RBAC objects would let the controller grant itself or others any right",
	"admissionregistration.k8s.io": "admission webhooks and policies see or change every write in the cluster",
}

// refusedResources are single types Compositor never grants.
var refusedResources = map[schema.GroupResource]string{
	{Group: "apiregistration.k8s.io", Resource: "apiservices"}:             "an APIService takes over whole API groups",
	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}: "deleting a CRD deletes every object of that API in the cluster; install CRDs outside the chart",
	{Group: "", Resource: "namespaces"}:                                    "deleting a namespace deletes everything in it; create namespaces outside the chart",
	{Group: "", Resource: "nodes"}:                                         "nodes are cluster infrastructure",
	{Group: "", Resource: "persistentvolumes"}:                             "a PersistentVolume can mount any host path, around Pod Security",
	{Group: "", Resource: "serviceaccounts/token"}:                         "tokens let the controller act as other identities",
}

// Refused tells whether Compositor refuses to let a generated controller create
// objects of group/resource, and why. Such types make ResourceTypes fail with
// ErrForbiddenKind: granting create, update and delete on them would hand the
// controller control over the cluster or over other identities.
func Refused(group, resource string) (reason string, refused bool) {
	if reason, ok := refusedGroups[group]; ok {
		return reason, true
	}
	reason, ok := refusedResources[schema.GroupResource{Group: group, Resource: resource}]
	return reason, ok
}
