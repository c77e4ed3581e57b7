package bench.max_replicas

deny contains {"msg": sprintf("replicaCount %d is above the limit of %d", [count, input.parameters.max]), "path": "spec.replicaCount"} if {
	count := input.review.object.spec.replicaCount
	count > input.parameters.max
}
