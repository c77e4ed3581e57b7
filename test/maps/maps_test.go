package maps

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// repoRoot is the module's root: two folders up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// packages lists the module's packages as paths relative to its root ("." for the
// root), as `go list -tags node ./...` finds them: every folder with a .go file, except
// testdata, folders whose name starts with "." or "_", and nested modules (test/tools/*).
func packages(t *testing.T, root string) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root {
			if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || path == filepath.Join(root, "bin") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") {
				rel, err := filepath.Rel(root, path)
				if err != nil {
					return err
				}
				pkgs = append(pkgs, filepath.ToSlash(rel))
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pkgs)
	return pkgs
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// tableFirstColumns returns the code spans of the first column of the table that
// follows heading in the Markdown file, each without a trailing slash.
func tableFirstColumns(t *testing.T, file, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	i := slices.Index(lines, heading)
	if i < 0 {
		t.Fatalf("%s has no line %q", file, heading)
	}
	var names []string
	inTable := false
	for _, line := range lines[i+1:] {
		if strings.HasPrefix(line, "#") {
			break
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(line, "|")
		if len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			names = append(names, strings.TrimSuffix(m[1], "/"))
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: no table after %q", file, heading)
	}
	return names
}

func TestArchitectureMapListsEveryPackage(t *testing.T) {
	root := repoRoot(t)
	rows := tableFirstColumns(t, filepath.Join(root, "docs", "architecture.md"), "## Packages")
	pkgs := packages(t, root)
	for _, p := range pkgs {
		name := p
		if p == "." {
			t.Errorf("the module's root folder holds Go files: give it a row in docs/architecture.md's package table")
			continue
		}
		if !slices.Contains(rows, name) {
			t.Errorf("package %s has no row in docs/architecture.md's package table (## Packages): add one that says what it owns", name)
		}
	}
	for _, r := range rows {
		if strings.HasPrefix(r, "charts/") || r == "charts" {
			continue // the chart folder holds no Go; the table may name it
		}
		if !slices.Contains(pkgs, r) {
			t.Errorf("docs/architecture.md's package table names %s, which is not a package of the module: remove or rename its row", r)
		}
	}
}

var docBullet = regexp.MustCompile(`^//   - ([a-z0-9/]+):`)

func TestReconcilerDocNamesEveryRoom(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "reconciler", "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, line := range strings.Split(string(b), "\n") {
		if m := docBullet.FindStringSubmatch(line); m != nil {
			named = append(named, m[1])
		}
	}
	var rooms []string
	for _, p := range packages(t, root) {
		if rest, ok := strings.CutPrefix(p, "reconciler/"); ok {
			rooms = append(rooms, rest)
		}
	}
	for _, r := range rooms {
		if !slices.Contains(named, r) {
			t.Errorf("reconciler/%s is not named in reconciler/doc.go's list: add a line `//   - %s: ...`", r, r)
		}
	}
	for _, n := range named {
		if !slices.Contains(rooms, n) {
			t.Errorf("reconciler/doc.go names %s, which is not a package under reconciler/", n)
		}
	}
}

func TestReadmeLayoutNamesEveryTopLevelFolder(t *testing.T) {
	root := repoRoot(t)
	rows := tableFirstColumns(t, filepath.Join(root, "README.md"), "## Layout")
	for _, p := range packages(t, root) {
		top, _, _ := strings.Cut(p, "/")
		covered := slices.ContainsFunc(rows, func(r string) bool {
			return r == top || r == p || strings.HasPrefix(p, r+"/")
		})
		if !covered {
			t.Errorf("package %s: the README's Layout (## Layout) has no row for %s/ or %s", p, top, p)
		}
	}
}
