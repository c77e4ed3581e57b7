# METADATA
# title: Chart servers are reached with verified TLS
# description: >-
#   spec.chart.insecureSkipVerifyTLS would let anyone on the network path substitute
#   the chart Compositor installs.
# custom:
#   match:
#     kinds:
#       - group: core.krateo.io
#         kind: CompositionDefinition
package compositor.builtin.no_insecure_tls

deny contains violation if {
	input.review.object.spec.chart.insecureSkipVerifyTLS == true
	violation := {
		"msg": "skipping TLS verification of the chart server is not allowed; give the server a certificate the cluster trusts",
		"path": "spec.chart.insecureSkipVerifyTLS",
		"id": "no-insecure-tls",
	}
}
