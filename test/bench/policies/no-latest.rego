package bench.no_latest

deny contains {"msg": sprintf("image tag %q is not pinned", [tag]), "path": "spec.image.tag"} if {
	tag := object.get(input.review.object.spec, ["image", "tag"], "")
	tag == "latest"
}
