package compositor.builtin.exact_chart_version_test

import data.compositor.builtin.exact_chart_version

review(version) := {"review": {"namespace": "team-a", "object": {"spec": {"chart": {"url": "oci://r/c", "version": version}}}}}

denied(version) if {
	some v in exact_chart_version.deny with input as review(version)
	v.path == "spec.chart.version"
}

test_exact_allowed if {
	every version in ["1.1.5", "0.1.0", "v2.0.0", "1.0.0-rc.1", "1.0.0+build.5", ""] {
		not denied(version)
	}
}

test_no_version_allowed if {
	count(exact_chart_version.deny) == 0 with input as {"review": {"object": {"spec": {"chart": {"url": "https://x/c.tgz"}}}}}
}

test_ranges_denied if {
	every version in ["^1.2.0", "~1.2.3", ">=1.0.0", "1.x", "*", "1.2", "1", "1.2.3 - 1.4.0", "latest", "01.2.3"] {
		denied(version)
	}
}
