# METADATA
# title: Every chart is verified
# description: >-
#   Off unless the platform switches it on (--enable-builtin-policy
#   require-chart-verification): then a CompositionDefinition must say how its chart's
#   signature is checked (spec.chart.verify), so that no chart whose publisher is not
#   proven becomes an API.
# custom:
#   match:
#     kinds:
#       - group: core.krateo.io
#         kind: CompositionDefinition
package compositor.builtin.require_chart_verification

deny contains violation if {
	chart := input.review.object.spec.chart
	not verified(chart)
	violation := {
		"msg": "this platform requires every chart to be verified: set spec.chart.verify (provenance with a keyring, or cosign with a key or a keyless identity)",
		"path": "spec.chart.verify",
		"id": "require-chart-verification",
	}
}

verified(chart) if chart.verify.provenance

verified(chart) if chart.verify.cosign
