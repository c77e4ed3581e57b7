package bench.rendered.managed_by_label

deny contains "no app.kubernetes.io/managed-by label" if {
	some obj in input.rendered
	not obj.metadata.labels["app.kubernetes.io/managed-by"]
}
