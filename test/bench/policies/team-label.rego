package bench.team_label

deny contains {"msg": "every composition needs a team label", "path": "metadata.labels.team"} if {
	not input.review.object.metadata.labels.team
}
