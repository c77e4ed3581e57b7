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

// TestConstraintVerdictsAgree is the -constraints run's verdict check on its own: on
// test/bench/constraints, Compositor's decision on a composition and Gatekeeper's on
// its release's requests must find the same things.
func TestConstraintVerdictsAgree(t *testing.T) {
	ctx := context.Background()
	p, err := setupConstraints(ctx, config{
		policyDir:     "../../bench/policies",
		chartDir:      "../../../samples/charts/fireworks-app/1.1.5",
		values:        "../../../samples/charts/fireworks-app/examples/1.1.5/values-full.yaml",
		constraintDir: "../../bench/constraints",
	})
	if err != nil {
		t.Fatal(err)
	}
	findings, err := p.checkConstraintVerdicts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if findings == 0 {
		t.Error("the denied composition found nothing to compare")
	}
	if p.templates != 50 || p.constraints != 50 {
		t.Errorf("%d templates and %d constraints, want 50 of each", p.templates, p.constraints)
	}
}
