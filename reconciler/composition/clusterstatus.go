// status.clusters, the record of where a composition has releases on target
// clusters: this file owns its codec (ClusterStatus, Clusters, clustersField,
// setClusters), the status fields of a release in the local cluster beside it
// (localStatusFields, hasLocalRelease), and what is read from the entries
// (readySomewhere, unlisted, notReadyReason, notReadyMessage, whereReleasesAre). It
// writes nothing to the API server: recordClusters (placement.go) and the status
// patch of the reconcile do.

package composition

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// ClusterStatus is a composition's release on one target cluster: an entry of
// status.clusters.
type ClusterStatus struct {
	// Name is the cluster's: its kubeconfig Secret's.
	Name string `json:"name"`
	// Ready is true when the release there is what the composition asks for.
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// ChartVersion, Fingerprint and Revision are those of the release installed
	// there, kept when a later attempt fails.
	ChartVersion string `json:"chartVersion,omitempty"`
	Fingerprint  string `json:"fingerprint,omitempty"`
	Revision     int64  `json:"revision,omitempty"`
}

// Clusters reads status.clusters of a composition, by name.
func Clusters(obj *unstructured.Unstructured) map[string]ClusterStatus {
	raw, _, _ := unstructured.NestedSlice(obj.Object, "status", "clusters")
	out := make(map[string]ClusterStatus, len(raw))
	for _, item := range raw {
		m, ok := item.(map[string]interface{})
		if !ok {
			continue
		}
		var st ClusterStatus
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &st); err == nil && st.Name != "" {
			out[st.Name] = st
		}
	}
	return out
}

// clustersField is status.clusters as it is stored.
func clustersField(obj *unstructured.Unstructured) interface{} {
	field, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "clusters")
	return field
}

// setClusters writes status.clusters, by name; none removes the field.
func setClusters(obj *unstructured.Unstructured, clusters map[string]ClusterStatus) {
	if len(clusters) == 0 {
		unstructured.RemoveNestedField(obj.Object, "status", "clusters")
		return
	}
	list := make([]ClusterStatus, 0, len(clusters))
	for _, st := range clusters {
		list = append(list, st)
	}
	slices.SortFunc(list, func(a, b ClusterStatus) int { return cmp.Compare(a.Name, b.Name) })
	out := make([]interface{}, 0, len(list))
	for i := range list {
		if m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&list[i]); err == nil {
			out = append(out, m)
		}
	}
	_ = unstructured.SetNestedSlice(obj.Object, out, "status", "clusters")
}

// localStatusFields are what status records of the release in the local cluster.
var localStatusFields = []string{"helmChartUrl", "helmChartVersion", "releaseName", "digest", "fingerprint"}

// hasLocalRelease reports whether the composition's status records a release in the
// local cluster.
func hasLocalRelease(obj *unstructured.Unstructured) bool {
	fingerprint, _, _ := unstructured.NestedString(obj.Object, "status", "fingerprint")
	return fingerprint != ""
}

// readySomewhere reports whether some cluster has the release with fingerprint.
func readySomewhere(clusters map[string]ClusterStatus, fingerprint string) bool {
	for _, st := range clusters {
		if st.Ready && st.Fingerprint == fingerprint {
			return true
		}
	}
	return false
}

// unlisted are the clusters among names that notReadyMessage(clusters) leaves out:
// those without an entry, or with one that is Ready.
func unlisted(clusters map[string]ClusterStatus, names []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(name string) bool {
		st, ok := clusters[name]
		return ok && !st.Ready
	})
}

// notReadyReason is the reason of the first cluster, by name, that is not Ready.
func notReadyReason(clusters map[string]ClusterStatus) string {
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		if st := clusters[name]; !st.Ready {
			return st.Reason
		}
	}
	return ReasonInstallFailed
}

// notReadyMessage names every cluster that is not Ready, and why.
func notReadyMessage(clusters map[string]ClusterStatus) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		if st := clusters[name]; !st.Ready {
			message := strings.TrimPrefix(st.Message, "cluster "+name+": ")
			parts = append(parts, fmt.Sprintf("cluster %s: %s", name, message))
		}
	}
	return strings.Join(parts, "; ")
}

// whereReleasesAre is status.clusters without the messages.
func whereReleasesAre(obj *unstructured.Unstructured) map[string]ClusterStatus {
	clusters := Clusters(obj)
	for name, st := range clusters {
		st.Message = ""
		clusters[name] = st
	}
	return clusters
}
