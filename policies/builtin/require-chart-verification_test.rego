package compositor.builtin.require_chart_verification_test

import data.compositor.builtin.require_chart_verification

definition(verify) := {
	"apiVersion": "core.krateo.io/v1alpha1",
	"kind": "CompositionDefinition",
	"metadata": {"name": "fireworks", "namespace": "team-a"},
	"spec": {"chart": object.union(
		{"url": "oci://registry.example.com/charts/fireworks-app", "version": "1.1.5"},
		verify,
	)},
}

test_unverified_denied if {
	some v in require_chart_verification.deny with input as {"review": {"object": definition({})}}
	v.path == "spec.chart.verify"
	v.id == "require-chart-verification"
}

test_empty_verify_denied if {
	count(require_chart_verification.deny) == 1 with input as {"review": {"object": definition({"verify": {}})}}
}

test_verified_allowed if {
	count(require_chart_verification.deny) == 0 with input as {"review": {"object": definition({"verify": {"provenance": {"keyringRef": {"name": "k", "namespace": "team-a", "key": "k"}}}})}}
	count(require_chart_verification.deny) == 0 with input as {"review": {"object": definition({"verify": {"cosign": {"keyRef": {"name": "k", "namespace": "team-a", "key": "k"}}}})}}
}
