# METADATA
# title: Chart versions are exact
# description: >-
#   A range (^1.2, ~1.2.3, >=1, 1.x, *) would let the chart change under the generated
#   API without anyone applying anything; a definition names one exact SemVer version.
# custom:
#   match:
#     kinds:
#       - group: core.krateo.io
#         kind: CompositionDefinition
package compositor.builtin.exact_chart_version

deny contains violation if {
	version := input.review.object.spec.chart.version
	version != ""
	not exact(version)
	violation := {
		"msg": sprintf("chart version %q must be an exact version such as 1.2.3, not a range", [version]),
		"path": "spec.chart.version",
		"id": "exact-chart-version",
	}
}

exact(v) if semver.is_valid(v)

exact(v) if {
	startswith(v, "v")
	semver.is_valid(substring(v, 1, -1))
}
