package compositor.builtin.credentials_namespace_test

import data.compositor.builtin.credentials_namespace

definition(secret_namespace) := {
	"apiVersion": "core.krateo.io/v1alpha1",
	"kind": "CompositionDefinition",
	"metadata": {"name": "fireworks", "namespace": "team-a"},
	"spec": {"chart": {
		"url": "oci://registry.example.com/charts/fireworks-app",
		"version": "1.1.5",
		"credentials": {"username": "u", "passwordRef": {"name": "repo", "namespace": secret_namespace, "key": "password"}},
	}},
}

test_same_namespace_allowed if {
	count(credentials_namespace.deny) == 0 with input as {"review": {"namespace": "team-a", "object": definition("team-a")}}
}

test_other_namespace_denied if {
	some v in credentials_namespace.deny with input as {"review": {"namespace": "team-a", "object": definition("kube-system")}}
	v.path == "spec.chart.credentials.passwordRef.namespace"
	v.id == "credentials-namespace"
	contains(v.msg, `"kube-system"`)
}

test_namespace_from_object_when_request_has_none if {
	count(credentials_namespace.deny) == 1 with input as {"review": {"namespace": "", "object": definition("kube-system")}}
	count(credentials_namespace.deny) == 0 with input as {"review": {"namespace": "", "object": definition("team-a")}}
}

test_no_credentials_allowed if {
	count(credentials_namespace.deny) == 0 with input as {"review": {"namespace": "team-a", "object": {"spec": {"chart": {"url": "oci://r/c"}}}}}
}

verifying(kind, secret_namespace) := object.union(definition("team-a"), {"spec": {"chart": {"verify": verify(kind, secret_namespace)}}})

verify("provenance", ns) := {"provenance": {"keyringRef": {"name": "k", "namespace": ns, "key": "pubring.gpg"}}}

verify("key", ns) := {"cosign": {"keyRef": {"name": "k", "namespace": ns, "key": "cosign.pub"}}}

verify("keyless", ns) := {"cosign": {"keyless": {"issuer": "https://issuer", "subject": "me", "trustedRootRef": {"name": "k", "namespace": ns, "key": "trusted_root.json"}}}}

test_verification_secrets_in_other_namespace_denied if {
	every kind, path in {
		"provenance": "spec.chart.verify.provenance.keyringRef.namespace",
		"key": "spec.chart.verify.cosign.keyRef.namespace",
		"keyless": "spec.chart.verify.cosign.keyless.trustedRootRef.namespace",
	} {
		some v in credentials_namespace.deny with input as {"review": {"namespace": "team-a", "object": verifying(kind, "kube-system")}}
		v.path == path
		contains(v.msg, `"kube-system"`)
	}
}

test_verification_secrets_in_same_namespace_allowed if {
	every kind in {"provenance", "key", "keyless"} {
		count(credentials_namespace.deny) == 0 with input as {"review": {"namespace": "team-a", "object": verifying(kind, "team-a")}}
	}
}
