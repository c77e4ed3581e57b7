package gatekeeper

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// ReviewEach is Review with every constraint evaluated on its own, with its template's
// own query, as before batches: what a batch's verdicts are held to.
func (l *Library) ReviewEach(ctx context.Context, s *Subject, req *Request) []Result {
	return l.reviewEach(ctx, s, req)
}

// WrapAll makes the libraries f builds evaluate every batched constraint wrapped,
// `with input as` its own input, as if no template read input plainly.
func WrapAll(f func()) {
	wrapAll.Store(true)
	defer wrapAll.Store(false)
	f()
}

// BatchFailures counts the batches whose evaluation failed, since the process started.
func BatchFailures() uint64 { return batchFailures.Load() }

// BatchModes says how the library's batch evaluates each constraint (Kind/name):
// "direct", "wrapped" or "wrapped referential"; a constraint evaluated on its own is
// left out, and a library without a batch gives an empty map.
func (l *Library) BatchModes() map[string]string {
	out := map[string]string{}
	if l.batch == nil {
		return out
	}
	for i, c := range l.constraints {
		if mode := l.batch.slots[i].mode; mode != notBatched {
			out[c.Kind+"/"+c.Name] = [...]string{"", "direct", "wrapped", "wrapped referential"}[mode]
		}
	}
	return out
}

// SuiteCaseInput is one case of a suite: what it reviews, and how.
type SuiteCaseInput struct {
	Name    string
	Subject *Subject
	Request *Request
}

// LoadSuitesTogether reads the suite files at paths into one library, every test's
// template and constraint together (a kind's first template, a constraint's first
// version), with the cases of them all. Skipped tests and cases, tests with an
// expansion, tests of an invalid constraint and cases whose files cannot be read are
// left out.
func LoadSuitesTogether(ctx context.Context, paths []string, opts Options) (*Library, []SuiteCaseInput, error) {
	opts.AnyInventory = true
	templates := map[string]*Template{}
	seen := map[string]bool{}
	var tmpls []*Template
	var constraints []*Constraint
	var cases []SuiteCaseInput
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		s, err := readSuite(data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		dir := filepath.Dir(path)
		for _, t := range s.Tests {
			if s.Skip || t.Skip || t.Expansion != "" || t.Invalid {
				continue
			}
			lib, err := loadTest(ctx, dir, &t, opts)
			if err != nil {
				continue // unsupported, as Verify reports it
			}
			c := lib.constraints[0]
			if templates[c.Kind] == nil {
				templates[c.Kind] = lib.templates[c.Kind]
				tmpls = append(tmpls, lib.templates[c.Kind])
			}
			if id := c.Kind + "/" + c.Name; !seen[id] {
				seen[id] = true
				constraints = append(constraints, c)
			}
			for _, sc := range t.Cases {
				if sc.Skip {
					continue
				}
				subject, req, err := loadCase(dir, sc)
				if err != nil {
					continue // a case Verify fails before any review
				}
				cases = append(cases, SuiteCaseInput{Name: path + ": " + t.Name + "/" + sc.Name, Subject: subject, Request: req})
			}
		}
	}
	return NewLibrary(tmpls, constraints), cases, nil
}
