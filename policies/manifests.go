package policies

import (
	"strings"
)

// sourcePrefix starts the comment Helm writes above each rendered document, naming
// the template it comes from.
const sourcePrefix = "# Source: "

// ParseManifests reads the manifests Helm is about to apply (the buffer a Helm
// PostRenderer receives: documents separated by "---", each under a "# Source:"
// comment) into the objects Helm's kube client builds from them to create, in their
// order: a list's items rather than the list, empty and null documents left out (see
// decode.go). The template of each object is the one its document's "# Source:" comment
// names (or the one before it, for a document without one), "" when there is none (a
// hook's manifest). A document whose reading is ambiguous is refused with an error
// wrapping ErrRender that names the template, the document and why.
func ParseManifests(manifests string) ([]RenderedObject, error) {
	d := newManifestDecoder()
	last := ""
	templateOf := func(part string) string {
		// A part without a "# Source:" comment (a document Helm's own split did not
		// cut) belongs to the template before it.
		if source := sourceOf(part); source != "" {
			last = source
		}
		return last
	}
	if err := d.add(manifests, templateOf); err != nil {
		return nil, err
	}
	return d.out, nil
}

// sourceOf is the template a document's "# Source:" comment names, or "".
func sourceOf(doc string) string {
	for _, line := range strings.Split(doc, "\n") {
		if source, ok := strings.CutPrefix(strings.TrimSpace(line), sourcePrefix); ok {
			return source
		}
	}
	return ""
}
