package bench.rendered.no_latest

deny contains sprintf("container %s runs %q, whose tag is not pinned", [c.name, c.image]) if {
	some obj in input.rendered
	some c in obj.spec.template.spec.containers
	endswith(c.image, ":latest")
}
