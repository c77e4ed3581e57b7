package compositor.builtin.chart_url_scheme_test

import data.compositor.builtin.chart_url_scheme

review(url) := {"review": {"namespace": "team-a", "object": {"spec": {"chart": {"url": url}}}}}

denied(url) if {
	some v in chart_url_scheme.deny with input as review(url)
	v.path == "spec.chart.url"
}

test_allowed if {
	every url in [
		"oci://registry.example.com/charts/fireworks-app",
		"https://charts.example.com",
		"HTTPS://charts.example.com/fireworks-app-1.1.5.tgz",
		"http://127.0.0.1:8080/charts",
		"http://127.9.9.9/x.tgz",
		"http://localhost:5000",
		"http://LOCALHOST./x",
		"http://user:pw@127.0.0.1:1/x",
		"http://[::1]:8080/charts",
		"imported://fireworks-app",
	] {
		not denied(url)
	}
}

test_denied if {
	every url in [
		"http://charts.example.com",
		"http://128.0.0.1/x",
		"http://localhost.example.com/x",
		"http://127.0.0.1.nip.io/x",
		"http://127.0.0.1@evil.example.com/x",
		"http://[::2]/x",
		"http://2130706433/x",
		"ftp://charts.example.com",
		"file:///etc/passwd",
		"charts.example.com/x.tgz",
		"",
	] {
		denied(url)
	}
}
