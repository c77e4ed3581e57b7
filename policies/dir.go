package policies

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// DirPolicies is what LoadDir read from a policy directory.
type DirPolicies struct {
	// Policies are the files that could be read, by name.
	Policies []Policy
	// Broken maps the name of each policy file that could not be read (bad Rego
	// syntax, bad METADATA or sidecar) to why. Their last good versions stay in force.
	Broken map[string]error
	// Constraints are the Gatekeeper ConstraintTemplates and Constraints of the YAML
	// files (every *.yaml or *.yml that is not a .rego file's sidecar), compiled. A
	// file that does not load is in Broken under its file name, and then the last good
	// constraints of the directory stay in force as a whole.
	Constraints *gatekeeper.Library
	// constraintsBroken says that a Gatekeeper file is in Broken.
	constraintsBroken bool
}

// Err joins the errors of the broken files, nil when there are none.
func (d *DirPolicies) Err() error {
	names := make([]string, 0, len(d.Broken))
	for n := range d.Broken {
		names = append(names, n)
	}
	sort.Strings(names)
	errs := make([]error, 0, len(names))
	for _, n := range names {
		errs = append(errs, d.Broken[n])
	}
	return errors.Join(errs...)
}

// LoadDir reads the policies of a --policy-dir: every <name>.rego file directly in dir
// except *_test.rego, with its match, action, target and parameters from its METADATA
// custom section or its sidecar <name>.yaml (see ParsePolicyFile). The policy's name is
// <name>. Every other *.yaml or *.yml file is read for Gatekeeper ConstraintTemplates
// and Constraints (other documents are ignored). Hidden files (such as the ..data
// links of a mounted ConfigMap) are skipped. The error is for a directory that cannot
// be read at all.
func LoadDir(dir string) (*DirPolicies, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("policy dir: %w", err)
	}
	out := &DirPolicies{Broken: map[string]error{}}
	for _, e := range entries {
		file := e.Name()
		if strings.HasPrefix(file, ".") || !strings.HasSuffix(file, ".rego") || strings.HasSuffix(file, "_test.rego") {
			continue
		}
		if info, err := os.Stat(filepath.Join(dir, file)); err != nil || info.IsDir() {
			continue
		}
		name := strings.TrimSuffix(file, ".rego")
		src, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			out.Broken[name] = fmt.Errorf("policy dir: %w", err)
			continue
		}
		var sidecar []byte
		for _, ext := range []string{".yaml", ".yml"} {
			b, err := os.ReadFile(filepath.Join(dir, name+ext))
			if err == nil {
				sidecar = b
				break
			}
			if !errors.Is(err, os.ErrNotExist) {
				out.Broken[name] = fmt.Errorf("policy dir: %w", err)
			}
		}
		if _, broken := out.Broken[name]; broken {
			continue
		}
		p, err := ParsePolicyFile(name, file, src, sidecar)
		if err != nil {
			out.Broken[name] = err
			continue
		}
		out.Policies = append(out.Policies, p)
	}
	loadConstraints(dir, entries, out)
	return out, nil
}

// loadConstraints reads the Gatekeeper templates and constraints of the directory's
// YAML files: documents of other kinds are left alone, a constraint of a kind no
// template defines or with parameters its template's schema refuses is an error.
func loadConstraints(dir string, entries []os.DirEntry, out *DirPolicies) {
	var templates []*gatekeeper.Template
	type constraintDoc struct {
		file string
		obj  map[string]any
	}
	var docs []constraintDoc
	fail := func(file string, err error) {
		out.Broken[file] = fmt.Errorf("%s: %w", file, err)
		out.constraintsBroken = true
	}
	for _, e := range entries {
		file := e.Name()
		ext := filepath.Ext(file)
		if strings.HasPrefix(file, ".") || (ext != ".yaml" && ext != ".yml") || e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(file, ext)+".rego")); err == nil {
			continue // a sidecar
		}
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			fail(file, err)
			continue
		}
		objs, err := gatekeeper.DecodeObjects(data)
		if err != nil {
			fail(file, err)
			continue
		}
		for _, obj := range objs {
			apiVersion, _ := obj["apiVersion"].(string)
			group, _, _ := strings.Cut(apiVersion, "/")
			switch {
			case group == gatekeeper.TemplatesGroup && obj["kind"] == "ConstraintTemplate":
				src, err := gatekeeper.TemplateFromObject(obj)
				var t *gatekeeper.Template
				if err == nil {
					t, err = CompileTemplate(context.Background(), src)
				}
				if err != nil {
					fail(file, fmt.Errorf("ConstraintTemplate %s: %w", src.Metadata.Name, err))
					continue
				}
				templates = append(templates, t)
			case group == gatekeeper.ConstraintsGroup:
				docs = append(docs, constraintDoc{file, obj})
			}
		}
	}
	byKind := map[string]*gatekeeper.Template{}
	for _, t := range templates {
		byKind[t.Kind] = t
	}
	var constraints []*gatekeeper.Constraint
	for _, d := range docs {
		c, err := gatekeeper.ParseConstraint(d.obj)
		if err == nil && byKind[c.Kind] == nil {
			err = fmt.Errorf("constraint %s: no ConstraintTemplate of the directory defines kind %s", c.Name, c.Kind)
		}
		if err == nil {
			err = byKind[c.Kind].CheckParameters(d.obj)
		}
		if err != nil {
			fail(d.file, err)
			continue
		}
		constraints = append(constraints, c)
	}
	out.Constraints = gatekeeper.NewLibrary(templates, constraints)
}

// ReloadDir loads dir and makes its policies the engine's OriginDir set (Engine.Sync):
// new and changed files take effect, deleted files stop being enforced, and a file
// that no longer reads or compiles keeps its last good version. The error lists every
// file that did not load or compile.
func ReloadDir(ctx context.Context, e *Engine, dir string) error {
	d, err := LoadDir(dir)
	if err != nil {
		return err
	}
	broken := make([]string, 0, len(d.Broken))
	for n := range d.Broken {
		broken = append(broken, n)
	}
	if !d.constraintsBroken {
		e.SetConstraints(OriginDir, d.Constraints)
	}
	return errors.Join(d.Err(), e.Sync(ctx, OriginDir, d.Policies, broken...))
}

// DebounceDelay is how long WatchDir waits for a burst of file events to settle
// (an editor's save, a ConfigMap update) before reloading once.
const DebounceDelay = 200 * time.Millisecond

// WatchDir loads dir into the engine and reloads it whenever something in dir
// changes, until ctx is done. After every load it calls onReload with ReloadDir's
// error (nil when every file is in force); a nil onReload logs the errors through the
// logger of ctx. It returns ctx's error, or the watcher's if watching fails.
func WatchDir(ctx context.Context, e *Engine, dir string, onReload func(error)) error {
	log := logr.FromContextOrDiscard(ctx).WithValues("policyDir", dir)
	if onReload == nil {
		onReload = func(err error) {
			if err != nil {
				log.Error(err, "some policy files are not in force; their last good versions stay")
				return
			}
			log.Info("policy dir loaded")
		}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching policy dir: %w", err)
	}
	defer func() { _ = w.Close() }()
	// Watch before the first load, so a change made during it is not missed.
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watching policy dir: %w", err)
	}
	onReload(ReloadDir(ctx, e, dir))

	timer := time.NewTimer(DebounceDelay)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("watching policy dir: watcher closed")
			}
			log.V(1).Info("policy dir changed", "file", ev.Name, "op", ev.Op.String())
			timer.Reset(DebounceDelay)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("watching policy dir: watcher closed")
			}
			log.Error(err, "policy dir watcher error; reloading")
			timer.Reset(DebounceDelay)
		case <-timer.C:
			onReload(ReloadDir(ctx, e, dir))
		}
	}
}
