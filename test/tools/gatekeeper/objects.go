package main

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// The composition both engines review: a FireworksApp of chart version 1.1.5 created
// in namespace team-a by a person in group devs.
const (
	compositionGroup   = "composition.krateo.io"
	compositionVersion = "v1-1-5"
	compositionKind    = "FireworksApp"
	compositionPlural  = "fireworksapps"
	namespace          = "team-a"
	objectName         = "fireworks"
	username           = "alice@example.com"
)

var userGroups = []string{"devs", "system:authenticated"}

// objects are the two compositions of a run: one every policy admits (the one
// timed), and one each policy has something against (for the verdict check only).
type objects struct {
	Admitted map[string]any
	Denied   map[string]any
}

// loadObjects builds both compositions from the values file at path. values-full.yaml
// is every value at its schema limit, and replicaCount 10 is above the max-replicas
// policy's 5, so the admitted spec lowers it to 3; everything else passes as it is.
// The denied spec breaks every bench policy and keeps within the chart's schema, so
// only the policies speak: replicas 9, a registry outside the allowed prefixes, tag
// latest, pullPolicy Never (a warning), and no team label.
func loadObjects(path string) (*objects, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	values := map[string]any{}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}

	admitted := runtime.DeepCopyJSON(values)
	admitted["replicaCount"] = int64(3)

	denied := runtime.DeepCopyJSON(values)
	denied["replicaCount"] = int64(9)
	denied["image"] = map[string]any{"repository": "quay.io/acme/nginx", "tag": "latest", "pullPolicy": "Never"}

	return &objects{
		Admitted: composition(admitted, map[string]any{"team": "payments", "tier": "web"}),
		Denied:   composition(denied, map[string]any{"tier": "web"}),
	}, nil
}

// composition wraps spec into a FireworksApp object with the given labels.
func composition(spec, labels map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": compositionGroup + "/" + compositionVersion,
		"kind":       compositionKind,
		"metadata": map[string]any{
			"name":      objectName,
			"namespace": namespace,
			"labels":    labels,
		},
		"spec": spec,
	}
}

// namespaceLabels are the labels of namespace team-a, as the API server sets them.
var namespaceLabels = map[string]string{"kubernetes.io/metadata.name": namespace}
