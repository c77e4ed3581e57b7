# METADATA
# title: Chart credentials come from the definition's own namespace
# description: >-
#   A CompositionDefinition may read the password of its chart repository only from a
#   Secret in its own namespace; pointing elsewhere would let whoever can write a
#   definition read Secrets of other namespaces through Compositor.
# custom:
#   match:
#     kinds:
#       - group: core.krateo.io
#         kind: CompositionDefinition
package compositor.builtin.credentials_namespace

# The namespace of the definition: the request's, else the object's own.
namespace := input.review.namespace if {
	input.review.namespace != ""
} else := object.get(input.review.object, ["metadata", "namespace"], "")

deny contains violation if {
	ref := input.review.object.spec.chart.credentials.passwordRef
	ref.namespace != namespace
	violation := {
		"msg": sprintf("the password Secret must be in the definition's namespace %q, not in %q", [namespace, ref.namespace]),
		"path": "spec.chart.credentials.passwordRef.namespace",
		"id": "credentials-namespace",
	}
}
