package bench.rendered.max_replicas

deny contains sprintf("%d replicas, above the limit of %d", [obj.spec.replicas, input.parameters.max]) if {
	some obj in input.rendered
	obj.spec.replicas > input.parameters.max
}
