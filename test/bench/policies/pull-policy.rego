package bench.pull_policy

warn contains {"msg": "imagePullPolicy Never only works with images already on every node", "path": "spec.image.pullPolicy"} if {
	input.review.object.spec.image.pullPolicy == "Never"
}
