package rbac

import (
	"maps"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The invariants below are what Check and Refused hold, exported so that the
// deployment chart's ValidatingAdmissionPolicy, which holds them again inside the API
// server for Compositor's own writes, can be tested against them.

// RefusedGroups returns, sorted, the API groups in which Refused refuses every type.
func RefusedGroups() []string {
	return slices.Sorted(maps.Keys(refusedGroups))
}

// RefusedTypes returns, sorted, the single types Refused refuses outside
// RefusedGroups.
func RefusedTypes() []schema.GroupResource {
	types := slices.Collect(maps.Keys(refusedResources))
	sort.Slice(types, func(i, j int) bool { return formatGR(types[i]) < formatGR(types[j]) })
	return types
}

// DangerousVerbs returns the verbs Check refuses in any rule.
func DangerousVerbs() []string {
	return slices.Clone(dangerousVerbs)
}
