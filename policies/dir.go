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
)

// DirPolicies is what LoadDir read from a policy directory.
type DirPolicies struct {
	// Policies are the files that could be read, by name.
	Policies []Policy
	// Broken maps the name of each policy file that could not be read (bad Rego
	// syntax, bad METADATA or sidecar) to why. Their last good versions stay in force.
	Broken map[string]error
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
// <name>. Hidden files (such as the ..data links of a mounted ConfigMap) are skipped.
// The error is for a directory that cannot be read at all.
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
	return out, nil
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
