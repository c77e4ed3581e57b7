package policies

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Checker makes the validation decision for one request: a composition's values
// against its chart's schemas, then every matching policy. The webhook and
// `compositor validate` both call Check, so they say the same thing.
type Checker struct {
	// Schemas validates composition values; nil skips the schema check.
	Schemas SchemaValidator
	// Engine evaluates the policies; nil skips them.
	Engine *Engine
}

// Check returns every violation of r. The schema check runs when r carries a chart and
// an object (a composition being created or updated). The error is for trouble other
// than violations: a chart whose schema cannot be compiled (ErrSchemaCompile,
// ErrRemoteRef), a request that cannot become Rego input.
//
// The schema check and the policies share one deadline, the engine's (DefaultTimeout
// without an engine), so that together they stay below the webhook's timeout.
func (c *Checker) Check(ctx context.Context, r *Request) (Decision, error) {
	timeout := DefaultTimeout
	if c.Engine != nil {
		timeout = c.Engine.Timeout()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out []Violation
	if c.Schemas != nil && r.Chart != nil && r.Object != nil {
		vs, err := c.validate(ctx, r)
		if err != nil {
			return Decision{}, fmt.Errorf("validating %s %s/%s against its chart's schema: %w", r.Kind.Kind, r.Namespace, r.Name, err)
		}
		if len(vs) > 0 {
			// Rendered policies wait until the values pass the schema.
			copied := *r
			copied.schemaFailed = true
			r = &copied
		}
		out = append(out, vs...)
	}
	if c.Engine != nil {
		vs, err := c.Engine.Evaluate(ctx, r)
		if err != nil {
			return Decision{}, err
		}
		out = append(out, vs...)
	}
	SortViolations(out)
	return Decision{Violations: out}, nil
}

// validate checks r's values against its chart's schemas until ctx is done.
func (c *Checker) validate(ctx context.Context, r *Request) ([]Violation, error) {
	return validateWithDeadline(ctx, c.Schemas, r.Chart, r.ChartDigest, r.Spec())
}

// ObjectRequest builds the Request `compositor validate` checks for an object read
// from a file, as the webhook would see its creation: operation CREATE, kind from
// apiVersion and kind, namespace from metadata.namespace (else defaultNamespace), the
// release name from krateo.io/release-name (else the object's name, as the mutating
// webhook defaults it). The caller adds Resource.Resource (for a composition,
// crd.Plural of the chart name), Chart, ChartDigest, Definition and NamespaceLabels.
func ObjectRequest(obj map[string]any, defaultNamespace string) *Request {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	gv, _ := schema.ParseGroupVersion(apiVersion)
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	if ns == "" {
		ns = defaultNamespace
	}
	release := name
	if ann, ok := md["annotations"].(map[string]any); ok {
		if rn, ok := ann["krateo.io/release-name"].(string); ok && rn != "" {
			release = rn
		}
	}
	return &Request{
		Operation:   "CREATE",
		Kind:        metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: kind},
		Resource:    metav1.GroupVersionResource{Group: gv.Group, Version: gv.Version},
		Namespace:   ns,
		Name:        name,
		Object:      obj,
		ReleaseName: release,
	}
}
