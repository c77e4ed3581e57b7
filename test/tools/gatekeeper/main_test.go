package main

import (
	"context"
	"testing"
)

// TestVerdictsAgree is the run's verdict check on its own, without timing: the
// translated templates and constraints must say what the Compositor policies say.
func TestVerdictsAgree(t *testing.T) {
	ctx := context.Background()
	p, err := setup(ctx, config{
		policyDir: "../../bench/policies",
		chartDir:  "../../../samples/charts/fireworks-app/1.1.5",
		values:    "../../../samples/charts/fireworks-app/examples/1.1.5/values-full.yaml",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkVerdicts(ctx, p.compositor, p.gatekeeper, p.objects); err != nil {
		t.Fatal(err)
	}

	// The denied object is meant to trip every policy, so that the translation of
	// each one is compared, not only of those a lone denial would exercise.
	v, err := p.gatekeeper.verdict(ctx, p.objects.Denied)
	if err != nil {
		t.Fatal(err)
	}
	fired := map[string]bool{}
	for _, f := range append(v.Deny, v.Warn...) {
		fired[f.Policy] = true
		t.Log(f)
	}
	if len(fired) != p.policies {
		t.Errorf("%d of %d policies found something in the denied object", len(fired), p.policies)
	}
}
