package compositor.builtin.no_insecure_tls_test

import data.compositor.builtin.no_insecure_tls

review(chart) := {"review": {"namespace": "team-a", "object": {"spec": {"chart": chart}}}}

test_insecure_denied if {
	some v in no_insecure_tls.deny with input as review({"url": "https://charts.example.com", "insecureSkipVerifyTLS": true})
	v.path == "spec.chart.insecureSkipVerifyTLS"
}

test_verified_allowed if {
	count(no_insecure_tls.deny) == 0 with input as review({"url": "https://charts.example.com", "insecureSkipVerifyTLS": false})
	count(no_insecure_tls.deny) == 0 with input as review({"url": "https://charts.example.com"})
}
