package policies

import (
	"context"
	"fmt"
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
// ErrRemoteRef).
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
		vs, err := r.SchemaViolations, error(nil)
		if !r.SchemaChecked {
			vs, err = c.validate(ctx, r)
		}
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
		out = append(out, c.Engine.Evaluate(ctx, r)...)
	}
	SortViolations(out)
	return Decision{Violations: out}, nil
}

// validate checks r's values against its chart's schemas until ctx is done.
func (c *Checker) validate(ctx context.Context, r *Request) ([]Violation, error) {
	return validateWithDeadline(ctx, c.Schemas, r.Chart, r.ChartDigest, r.Spec())
}
