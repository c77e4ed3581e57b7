# METADATA
# title: Chart credentials and verification keys come from the definition's own namespace
# description: >-
#   A CompositionDefinition may read the password of its chart repository, and the
#   keyring, public key or trusted root its chart is verified with, only from Secrets
#   in its own namespace; pointing elsewhere would let whoever can write a
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

# The Secrets of spec.chart.verify are read the same way: keyrings, keys and trusted
# roots come from the definition's own namespace too.
verify_refs contains ["spec.chart.verify.provenance.keyringRef", ref] if {
	ref := input.review.object.spec.chart.verify.provenance.keyringRef
}

verify_refs contains ["spec.chart.verify.cosign.keyRef", ref] if {
	ref := input.review.object.spec.chart.verify.cosign.keyRef
}

verify_refs contains ["spec.chart.verify.cosign.keyless.trustedRootRef", ref] if {
	ref := input.review.object.spec.chart.verify.cosign.keyless.trustedRootRef
}

deny contains violation if {
	some [path, ref] in verify_refs
	ref.namespace != namespace
	violation := {
		"msg": sprintf("the Secret of %s must be in the definition's namespace %q, not in %q", [path, namespace, ref.namespace]),
		"path": concat(".", [path, "namespace"]),
		"id": "credentials-namespace",
	}
}
