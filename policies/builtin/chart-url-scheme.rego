# METADATA
# title: Charts come over oci:// or https://, or were imported
# description: >-
#   A chart fetched over plain HTTP can be replaced in transit. Plain http:// is
#   accepted only to a loopback address (127.0.0.0/8, ::1, localhost), where there is
#   no network to cross: local development and tests. imported://NAME names a chart
#   imported into the cluster with compositor import, fetched from nowhere.
# custom:
#   match:
#     kinds:
#       - group: core.krateo.io
#         kind: CompositionDefinition
package compositor.builtin.chart_url_scheme

deny contains violation if {
	url := input.review.object.spec.chart.url
	not allowed(url)
	violation := {
		"msg": sprintf("chart URL %q must use oci://, https:// or imported://; plain http:// is allowed only to a loopback address", [url]),
		"path": "spec.chart.url",
		"id": "chart-url-scheme",
	}
}

allowed(url) if lower(parts(url).scheme) in {"oci", "https", "imported"}

allowed(url) if {
	lower(parts(url).scheme) == "http"
	loopback(host(parts(url).authority))
}

# parts splits scheme://authority/... ; it is undefined for a URL without a scheme.
parts(url) := {"scheme": m[1], "authority": m[2]} if {
	m := regex.find_all_string_submatch_n(`^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)`, url, 1)[0]
}

# host drops user info and port; an IPv6 literal keeps no brackets.
host(authority) := h if {
	hostport := regex.replace(authority, `^.*@`, "")
	startswith(hostport, "[")
	h := trim_prefix(split(hostport, "]")[0], "[")
} else := split(regex.replace(authority, `^.*@`, ""), ":")[0]

loopback(h) if lower(trim_suffix(h, ".")) == "localhost"

loopback(h) if {
	regex.match(`^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$`, h)
	net.cidr_contains("127.0.0.0/8", h)
}

loopback(h) if {
	regex.match(`^[0-9A-Fa-f:]+$`, h)
	contains(h, ":")
	net.cidr_contains("::1/128", h)
}
