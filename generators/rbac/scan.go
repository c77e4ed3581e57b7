package rbac

import (
	"path"
	"regexp"
	"strings"

	chart "helm.sh/helm/v4/pkg/chart/v2"
)

// typeRef is one apiVersion/kind pair a chart can create, and where it was seen.
type typeRef struct {
	APIVersion string
	Kind       string
	Source     string
}

// scanResult is what the static scan of a chart found.
type scanResult struct {
	refs []typeRef
	// dynamic lists the files with a manifest whose apiVersion or kind is only known
	// once rendered (a templated value, or a document produced by include or tpl).
	dynamic []string
}

var (
	literalAPIVersion = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)
	literalKind       = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
	templateAction    = regexp.MustCompile(`\{\{-?\s*(.*?)\s*-?\}\}`)
)

// scanChart reads the templates and CRD files of ch and of all its subcharts, at any
// depth, whatever their conditions: a static answer to "which kinds can this chart
// create with any values".
func scanChart(ch *chart.Chart) scanResult {
	var res scanResult
	var walk func(c *chart.Chart)
	walk = func(c *chart.Chart) {
		prefix := c.ChartFullPath() + "/"
		for _, f := range c.Templates {
			if f == nil || path.Base(f.Name) == "NOTES.txt" {
				continue
			}
			name := prefix + f.Name
			refs, dynamic := scanTemplate(name, f.Data, strings.HasPrefix(path.Base(f.Name), "_"))
			res.refs = append(res.refs, refs...)
			if dynamic {
				res.dynamic = append(res.dynamic, name)
			}
		}
		for _, f := range c.Files {
			// Helm installs the crds/ directory as it is, without templating.
			if f == nil || !strings.HasPrefix(f.Name, "crds/") || !isManifestFile(f.Name) {
				continue
			}
			refs, _ := scanTemplate(prefix+f.Name, f.Data, false)
			res.refs = append(res.refs, refs...)
		}
		for _, d := range c.Dependencies() {
			walk(d)
		}
	}
	walk(ch)
	return res
}

func isManifestFile(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// scanTemplate finds the top-level apiVersion/kind pairs of each YAML document in a
// template. Only keys at column 0 count, so a nested reference (an HPA's
// scaleTargetRef, a RoleBinding's subjects) is never taken for an object the chart
// creates. In a partial, documents without a pair are fragments and never dynamic; in
// any other template, a document that produces output through template actions but
// has no literal pair is dynamic, and so is one whose apiVersion or kind is templated.
func scanTemplate(name string, data []byte, partial bool) (refs []typeRef, dynamic bool) {
	var (
		apiVersion, kind string
		haveAPI, haveKnd bool
		docPair, output  bool
		docDynamic       bool
	)
	flush := func() {
		if haveAPI != haveKnd || (!docPair && output && !partial) {
			docDynamic = true
		}
		if docDynamic {
			dynamic = true
		}
		apiVersion, kind, haveAPI, haveKnd, docPair, output, docDynamic = "", "", false, false, false, false, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, " \t\r")
		if strings.HasPrefix(line, "---") {
			flush()
			continue
		}
		if producesOutput(line) {
			output = true
		}
		if v, ok := topLevelValue(line, "apiVersion"); ok {
			if !literalAPIVersion.MatchString(v) {
				docDynamic = true
				continue
			}
			if haveAPI && !haveKnd {
				docDynamic = true // two apiVersions in a row: the pairing is unclear
			}
			apiVersion, haveAPI = v, true
		} else if v, ok := topLevelValue(line, "kind"); ok {
			if !literalKind.MatchString(v) {
				docDynamic = true
				continue
			}
			if haveKnd && !haveAPI {
				docDynamic = true
			}
			kind, haveKnd = v, true
		} else {
			continue
		}
		if haveAPI && haveKnd {
			if kind == "List" {
				docDynamic = true // the items are what gets created; the render sees them
			} else {
				refs = append(refs, typeRef{APIVersion: apiVersion, Kind: kind, Source: name})
			}
			docPair = true
			apiVersion, kind, haveAPI, haveKnd = "", "", false, false
		}
	}
	flush()
	return refs, dynamic
}

// topLevelValue returns the scalar of "key: value" written at column 0, without quotes
// and trailing comment.
func topLevelValue(line, key string) (string, bool) {
	rest, ok := strings.CutPrefix(line, key+":")
	if !ok {
		return "", false
	}
	v := strings.TrimSpace(rest)
	if i := strings.Index(v, " #"); i >= 0 && !strings.Contains(v[:i], "{{") {
		v = strings.TrimSpace(v[:i])
	}
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = v[1 : len(v)-1]
	}
	return v, true
}

// producesOutput tells whether a line holds a template action that can write text:
// anything but comments, control structure and variable assignments.
func producesOutput(line string) bool {
	for _, m := range templateAction.FindAllStringSubmatch(line, -1) {
		body := m[1]
		if strings.HasPrefix(body, "/*") {
			continue
		}
		word, _, _ := strings.Cut(body, " ")
		switch word {
		case "if", "else", "end", "range", "with", "define", "break", "continue":
			continue
		}
		if strings.HasPrefix(body, "$") && (strings.Contains(body, ":=") || strings.Contains(body, " = ")) {
			continue
		}
		return true
	}
	return false
}
