package bench.rendered.allowed_registries

deny contains sprintf("container %s runs %q, not from an allowed registry", [c.name, c.image]) if {
	some obj in input.rendered
	some c in obj.spec.template.spec.containers
	not allowed(c.image)
}

allowed(image) if {
	some prefix in input.parameters.prefixes
	startswith(image, prefix)
}
