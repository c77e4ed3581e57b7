package multicluster

import (
	"errors"
	"fmt"
	"strings"

	"github.com/compositor-dev/compositor/api/vocab"
	"k8s.io/apimachinery/pkg/labels"
)

// OpenTo reports whether a cluster whose kubeconfig Secret has annotations takes the
// compositions of a namespace with namespaceLabels. An annotation that is not a valid
// selector opens the cluster to no namespace, and is the error.
func OpenTo(annotations, namespaceLabels map[string]string) (bool, error) {
	raw, ok := annotations[vocab.AnnotationNamespaceSelector]
	if !ok {
		return false, nil
	}
	selector, err := ParseSelector(raw)
	if err != nil {
		return false, fmt.Errorf("annotation %s: %w", vocab.AnnotationNamespaceSelector, err)
	}
	return selector.Matches(labels.Set(namespaceLabels)), nil
}

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
// PlacementAnnotation the placement is local. The annotation must hold a valid label
// selector that selects on something (ParseSelector); the error names the annotation
// and the reason.
func ParsePlacement(annotations map[string]string) (Placement, error) {
	raw, ok := annotations[vocab.AnnotationPlacement]
	if !ok {
		return Placement{}, nil
	}
	selector, err := ParseSelector(raw)
	if err != nil {
		return Placement{}, fmt.Errorf("annotation %s: %w", vocab.AnnotationPlacement, err)
	}
	return Placement{Selector: selector}, nil
}

// ParseSelector reads a placement's label selector, in the syntax of kubectl's -l
// (e.g. `env in (prod),region=eu`). An empty selector, or one that selects on nothing,
// is refused rather than read as "every cluster", which a typo would otherwise mean.
// The error is the reason, for the caller to put next to the field it came from.
func ParseSelector(raw string) (labels.Selector, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, errors.New("is empty: it must be a label selector over the clusters' labels (e.g. env=prod), or be removed to install in the local cluster only")
	}
	selector, err := labels.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%q is not a valid label selector: %w", raw, err)
	}
	if selector.Empty() {
		return nil, fmt.Errorf("%q selects nothing in particular: it must be a label selector over the clusters' labels (e.g. env=prod)", raw)
	}
	return selector, nil
}
