package bench.rendered.pull_policy

warn contains sprintf("container %s has imagePullPolicy Never, which only works with images already on every node", [c.name]) if {
	some obj in input.rendered
	some c in obj.spec.template.spec.containers
	c.imagePullPolicy == "Never"
}
