package gatekeeper

import (
	"strings"
)

// podTemplates are the workloads whose pod template Compositor expands into the Pod
// it implies, as Gatekeeper's ExpansionTemplates do: a chart renders Deployments, and
// the library's pod-security templates match Pods.
var podTemplates = map[[2]string][]string{
	{"apps", "Deployment"}:        {"spec", "template"},
	{"apps", "ReplicaSet"}:        {"spec", "template"},
	{"apps", "StatefulSet"}:       {"spec", "template"},
	{"apps", "DaemonSet"}:         {"spec", "template"},
	{"batch", "Job"}:              {"spec", "template"},
	{"batch", "CronJob"}:          {"spec", "jobTemplate", "spec", "template"},
	{"", "ReplicationController"}: {"spec", "template"},
}

// Expand returns the Pod a workload's pod template implies, as a Generated subject,
// or nil when s is not a workload or has no pod template. The Pod is named as
// Gatekeeper names an expanded resource: the workload's name and "-pod".
func Expand(s *Subject) *Subject {
	path, ok := podTemplates[[2]string{s.Group, s.Kind}]
	if !ok || s.Generated {
		return nil
	}
	tmpl, ok := nested(s.Object, path...).(map[string]any)
	if !ok {
		return nil
	}
	pod := make(map[string]any, len(tmpl)+2)
	for k, v := range tmpl {
		pod[k] = v
	}
	meta := map[string]any{}
	if m, ok := tmpl["metadata"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	meta["name"] = strings.ToLower(s.name() + "-pod")
	if s.Namespace != "" {
		meta["namespace"] = s.Namespace
	}
	pod["apiVersion"], pod["kind"], pod["metadata"] = "v1", "Pod", meta
	return &Subject{Object: pod, Version: "v1", Kind: "Pod", Namespace: s.Namespace, NamespaceObject: s.NamespaceObject, Generated: true}
}

// Inventory arranges objects as Gatekeeper's data.inventory does:
// cluster[apiVersion][kind][name] for cluster-scoped objects and
// namespace[namespace][apiVersion][kind][name] for namespaced ones.
func Inventory(objs []*Subject) map[string]any {
	cluster, namespaced := map[string]any{}, map[string]any{}
	for _, s := range objs {
		gv := s.Version
		if s.Group != "" {
			gv = s.Group + "/" + s.Version
		}
		root := cluster
		if s.Namespace != "" {
			root = child(namespaced, s.Namespace)
		}
		child(child(root, gv), s.Kind)[s.name()] = s.Object
	}
	return map[string]any{"cluster": cluster, "namespace": namespaced}
}

func child(m map[string]any, key string) map[string]any {
	c, ok := m[key].(map[string]any)
	if !ok {
		c = map[string]any{}
		m[key] = c
	}
	return c
}
