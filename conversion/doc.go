// Package conversion converts the objects of a generated CRD between its served
// versions, whose schemas differ: each served version is the schema of one chart
// version, and the storage version (the hub) keeps every field of all of them.
//
// Converting to a served version moves out of spec and status the fields that version
// would not show — what its schema prunes, and the fields another served version
// declares and it does not — into the annotation StashAnnotation, as a JSON object from
// JSON Pointer to value (the stash). Converting back to the hub merges the stash into
// the object again, where the client did not set the value itself, so an object read
// and written through an older version loses nothing a newer version gave it, and a
// round trip through any versions gives back the object it started from.
//
// Schemas holds what conversion needs of one CRD and converts its objects; a
// SchemaSource finds the Schemas of a kind, CRDSchemas by reading the CRDs through a
// client. The package is pure: it does not serve ConversionReviews (package webhooks
// does, with it) and reads nothing but the CRDs a CRDSchemas is asked for.
package conversion
