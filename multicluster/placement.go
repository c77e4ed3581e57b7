package multicluster

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// PlacementAnnotation holds a composition's placement: a label selector over the
// labels of the registered clusters (their kubeconfig Secrets' labels).
const PlacementAnnotation = "compositor.dev/placement"

// Placement is where a composition is installed: the local cluster only, or every
// engaged cluster its selector matches.
type Placement struct {
	// Selector selects the target clusters; nil is the local cluster only.
	Selector labels.Selector
}

// Local reports whether the placement is the local cluster only (no annotation).
func (p Placement) Local() bool { return p.Selector == nil }

// String is the selector in canonical form, or "local".
func (p Placement) String() string {
	if p.Local() {
		return "local"
	}
	return p.Selector.String()
}

// ParsePlacement reads the placement from a composition's annotations. Without
// PlacementAnnotation the placement is local. The annotation must hold a non-empty,
// valid label selector (the syntax of kubectl's -l, e.g. `env in (prod),region=eu`);
// an empty one is refused rather than read as "every cluster", which a typo would
// otherwise mean. The error names the annotation and the reason.
func ParsePlacement(annotations map[string]string) (Placement, error) {
	raw, ok := annotations[PlacementAnnotation]
	if !ok {
		return Placement{}, nil
	}
	if strings.TrimSpace(raw) == "" {
		return Placement{}, fmt.Errorf("annotation %s is empty: it must be a label selector over the clusters' labels (e.g. env=prod), or be removed to install in the local cluster only", PlacementAnnotation)
	}
	selector, err := labels.Parse(raw)
	if err != nil {
		return Placement{}, fmt.Errorf("annotation %s %q is not a valid label selector: %w", PlacementAnnotation, raw, err)
	}
	if selector.Empty() {
		return Placement{}, fmt.Errorf("annotation %s %q selects nothing in particular: it must be a label selector over the clusters' labels (e.g. env=prod)", PlacementAnnotation, raw)
	}
	return Placement{Selector: selector}, nil
}
