package bench.allowed_registries

deny contains {"msg": sprintf("image repository %q is not from an allowed registry", [repository]), "path": "spec.image.repository"} if {
	repository := object.get(input.review.object.spec, ["image", "repository"], "nginx")
	not allowed(repository)
}

allowed(repository) if {
	some prefix in input.parameters.prefixes
	startswith(repository, prefix)
}
