package policies

import (
	"fmt"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/releaseutil"
	"sigs.k8s.io/yaml"
)

// sourcePrefix starts the comment Helm writes above each rendered document, naming
// the template it comes from.
const sourcePrefix = "# Source: "

// ParseManifests reads the manifests Helm is about to apply (the buffer a Helm
// PostRenderer receives: documents separated by "---", each under a "# Source:"
// comment) into objects, in their order. Empty documents are left out. The template
// of each object is the one its "# Source:" comment names.
func ParseManifests(manifests string) ([]RenderedObject, error) {
	docs := releaseutil.SplitManifests(manifests)
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	var out []RenderedObject
	for _, k := range keys {
		obj := map[string]any{}
		if err := yaml.Unmarshal([]byte(docs[k]), &obj); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrRender, sourceOf(docs[k]), err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, RenderedObject{Template: sourceOf(docs[k]), Object: obj})
	}
	return out, nil
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
