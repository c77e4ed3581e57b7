package gatekeeper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"encoding/json"

	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
	goyaml3 "sigs.k8s.io/yaml/goyaml.v3"
)

// Suite is a Gatekeeper test suite (test.gatekeeper.sh/v1alpha1 Suite), the file
// `gator verify` runs.
type Suite struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Tests      []SuiteTest `json:"tests"`
	Skip       bool        `json:"skip,omitempty"`
}

// SuiteTest is one template and constraint with its cases.
type SuiteTest struct {
	Name       string       `json:"name"`
	Template   string       `json:"template"`
	Constraint string       `json:"constraint"`
	Expansion  string       `json:"expansion,omitempty"`
	Cases      []*SuiteCase `json:"cases,omitempty"`
	Invalid    bool         `json:"invalid,omitempty"`
	Skip       bool         `json:"skip,omitempty"`
}

// SuiteCase is one object to review, with the inventory around it and what to expect.
type SuiteCase struct {
	Name       string      `json:"name"`
	Object     string      `json:"object"`
	Inventory  []string    `json:"inventory,omitempty"`
	Assertions []Assertion `json:"assertions"`
	Skip       bool        `json:"skip,omitempty"`
}

// Assertion expects a number of violations ("yes": at least one, "no": none, or an
// exact count; "yes" when unset), counting those whose message matches Message (a
// regular expression) when it is set.
type Assertion struct {
	Violations *intstr.IntOrString `json:"violations,omitempty"`
	Message    *string             `json:"message,omitempty"`
}

// Outcome of a case.
type Outcome string

const (
	Passed      Outcome = "passed"
	Failed      Outcome = "failed"
	Unsupported Outcome = "unsupported"
	Skipped     Outcome = "skipped"
)

// CaseResult is the outcome of one case; Reason says why it did not pass.
type CaseResult struct {
	Test, Case string
	Outcome    Outcome
	Reason     string
}

// SuiteResult is the outcome of one suite file. Err is set when the file itself
// cannot be read; then Cases is empty.
type SuiteResult struct {
	Path  string
	Err   error
	Cases []CaseResult
}

// Count returns how many cases had the outcome.
func (r *SuiteResult) Count(o Outcome) int {
	n := 0
	for _, c := range r.Cases {
		if c.Outcome == o {
			n++
		}
	}
	return n
}

// IsSuite reports whether data is a Suite file.
func IsSuite(data []byte) bool {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	return yaml.Unmarshal(data, &head) == nil && head.Kind == "Suite" && strings.HasPrefix(head.APIVersion, "test.gatekeeper.sh/")
}

// Verify runs the suite file at path as `gator verify` does: for each test, its
// template and constraint; for each case, its object reviewed against them with its
// inventory, and every assertion checked. Paths in the suite are relative to its
// directory. A test Compositor cannot run as written (an expansion file, a template
// it does not support) counts its cases as unsupported, saying why.
func Verify(ctx context.Context, path string, opts Options) SuiteResult {
	res := SuiteResult{Path: path}
	data, err := os.ReadFile(path)
	if err != nil {
		res.Err = err
		return res
	}
	s, err := readSuite(data)
	if err != nil {
		res.Err = err
		return res
	}
	dir := filepath.Dir(path)
	opts.AnyInventory = true
	for _, t := range s.Tests {
		res.Cases = append(res.Cases, runTest(ctx, dir, &t, s.Skip, opts)...)
	}
	return res
}

// readSuite reads a Suite file.
func readSuite(data []byte) (Suite, error) {
	// YAML 1.2, as gator reads suites: "violations: yes" is the string yes.
	var doc any
	var s Suite
	err := goyaml3.Unmarshal(data, &doc)
	if err == nil {
		var raw []byte
		if raw, err = json.Marshal(doc); err == nil {
			err = json.Unmarshal(raw, &s)
		}
	}
	if err != nil {
		return s, fmt.Errorf("reading the suite: %w", err)
	}
	if s.Kind != "Suite" || !strings.HasPrefix(s.APIVersion, "test.gatekeeper.sh/") {
		return s, fmt.Errorf("not a Suite of test.gatekeeper.sh (apiVersion %q, kind %q)", s.APIVersion, s.Kind)
	}
	return s, nil
}

func runTest(ctx context.Context, dir string, t *SuiteTest, skip bool, opts Options) []CaseResult {
	all := func(o Outcome, reason string) []CaseResult {
		out := make([]CaseResult, 0, len(t.Cases))
		for _, c := range t.Cases {
			out = append(out, CaseResult{Test: t.Name, Case: c.Name, Outcome: o, Reason: reason})
		}
		if len(out) == 0 {
			out = append(out, CaseResult{Test: t.Name, Outcome: o, Reason: reason})
		}
		return out
	}
	if skip || t.Skip {
		return all(Skipped, "skip: true")
	}
	if t.Expansion != "" {
		return all(Unsupported, "expansion: ExpansionTemplates are not read (Compositor expands the pod templates of workloads itself)")
	}
	lib, err := loadTest(ctx, dir, t, opts)
	if t.Invalid {
		// The constraint is expected to be refused by the template's parameters schema.
		var schemaErr *ParametersError
		if errors.As(err, &schemaErr) {
			return []CaseResult{{Test: t.Name, Outcome: Passed}}
		}
		return []CaseResult{{Test: t.Name, Outcome: Failed, Reason: fmt.Sprintf("want the constraint refused by the template's schema, got %v", err)}}
	}
	if errors.Is(err, ErrUnsupported) {
		return all(Unsupported, err.Error())
	}
	if err != nil {
		return all(Failed, err.Error())
	}
	out := make([]CaseResult, 0, len(t.Cases))
	for _, c := range t.Cases {
		r := CaseResult{Test: t.Name, Case: c.Name, Outcome: Passed}
		switch {
		case c.Skip:
			r.Outcome, r.Reason = Skipped, "skip: true"
		default:
			if err := runCase(ctx, dir, lib, c); err != nil {
				r.Outcome, r.Reason = Failed, err.Error()
				if errors.Is(err, ErrUnsupported) {
					r.Outcome = Unsupported
				}
			}
		}
		out = append(out, r)
	}
	return out
}

func loadTest(ctx context.Context, dir string, t *SuiteTest, opts Options) (*Library, error) {
	if t.Template == "" || t.Constraint == "" {
		return nil, errors.New("the test needs a template and a constraint")
	}
	data, err := os.ReadFile(filepath.Join(dir, t.Template))
	if err != nil {
		return nil, err
	}
	src, err := ParseTemplate(data)
	if err != nil {
		return nil, err
	}
	tmpl, err := Compile(ctx, src, opts)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", t.Template, err)
	}
	objs, err := readObjects(filepath.Join(dir, t.Constraint))
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("constraint %s: the file holds %d objects, want 1", t.Constraint, len(objs))
	}
	c, err := ParseConstraint(objs[0])
	if err != nil {
		return nil, fmt.Errorf("constraint %s: %w", t.Constraint, err)
	}
	if c.Kind != tmpl.Kind {
		return nil, fmt.Errorf("constraint %s: kind %s is not the template's kind %s", t.Constraint, c.Kind, tmpl.Kind)
	}
	if err := tmpl.CheckParameters(objs[0]); err != nil {
		return nil, err
	}
	return NewLibrary([]*Template{tmpl}, []*Constraint{c}), nil
}

func runCase(ctx context.Context, dir string, lib *Library, c *SuiteCase) error {
	if c.Object == "" {
		return errors.New("the case names no object")
	}
	if len(c.Assertions) == 0 {
		return errors.New("the case has no assertions")
	}
	s, req, err := loadCase(dir, c)
	if err != nil {
		return err
	}
	results := lib.Review(ctx, s, req)
	for _, r := range results {
		if r.Err != nil {
			return r.Err
		}
	}
	for i, a := range c.Assertions {
		if err := a.check(results); err != nil {
			return fmt.Errorf("assertion %d: %w", i, err)
		}
	}
	return nil
}

// loadCase reads a case's object and inventory: what to review, and how.
func loadCase(dir string, c *SuiteCase) (*Subject, *Request, error) {
	objs, err := readObjects(filepath.Join(dir, c.Object))
	if err != nil {
		return nil, nil, err
	}
	if len(objs) != 1 {
		return nil, nil, fmt.Errorf("object %s: the file holds %d objects, want 1", c.Object, len(objs))
	}
	var inventory []*Subject
	namespaces := map[string]map[string]any{}
	for _, p := range c.Inventory {
		inv, err := readObjects(filepath.Join(dir, p))
		if err != nil {
			return nil, nil, err
		}
		for _, o := range inv {
			s := SubjectOf(o)
			inventory = append(inventory, s)
			if s.isNamespace() {
				namespaces[s.name()] = o
			}
		}
	}
	s, req, err := caseSubject(objs[0])
	if err != nil {
		return nil, nil, err
	}
	if s.NamespaceObject == nil && s.Namespace != "" {
		s.NamespaceObject = namespaces[s.Namespace]
	}
	req.Inventory = Inventory(inventory)
	return s, req, nil
}

// caseSubject is the subject of a case's object: the object itself, or the request
// of an AdmissionReview.
func caseSubject(obj map[string]any) (*Subject, *Request, error) {
	if obj["kind"] != "AdmissionReview" || !strings.HasPrefix(fmt.Sprint(obj["apiVersion"]), "admission.k8s.io/") {
		return SubjectOf(obj), &Request{}, nil
	}
	req, ok := obj["request"].(map[string]any)
	if !ok {
		return nil, nil, errors.New("the AdmissionReview has no request")
	}
	object, _ := req["object"].(map[string]any)
	old, _ := req["oldObject"].(map[string]any)
	if object == nil && old == nil {
		return nil, nil, errors.New("the AdmissionReview's request has neither object nor oldObject")
	}
	op, _ := req["operation"].(string)
	s := &Subject{Object: object, OldObject: old}
	if op == "DELETE" || object == nil {
		s.Object, s.OldObject = old, old
	}
	kind, _ := req["kind"].(map[string]any)
	s.Group, _ = kind["group"].(string)
	s.Version, _ = kind["version"].(string)
	s.Kind, _ = kind["kind"].(string)
	s.Name, _ = req["name"].(string)
	s.Namespace, _ = req["namespace"].(string)
	r := &Request{Operation: op}
	r.UserInfo, _ = req["userInfo"].(map[string]any)
	r.DryRun, _ = req["dryRun"].(bool)
	return s, r, nil
}

// SubjectOf is the subject for an object as it stands: its group, version, kind and
// namespace read from it.
func SubjectOf(obj map[string]any) *Subject {
	apiVersion, _ := obj["apiVersion"].(string)
	group, version, ok := strings.Cut(apiVersion, "/")
	if !ok {
		group, version = "", apiVersion
	}
	kind, _ := obj["kind"].(string)
	return &Subject{Object: obj, Group: group, Version: version, Kind: kind, Namespace: nestedString(obj, "metadata", "namespace")}
}

func (a *Assertion) check(results []Result) error {
	var re *regexp.Regexp
	if a.Message != nil {
		var err error
		if re, err = regexp.Compile(*a.Message); err != nil {
			return fmt.Errorf("message %q: %w", *a.Message, err)
		}
	}
	n := 0
	var msgs []string
	for _, r := range results {
		msgs = append(msgs, r.Msg)
		if re == nil || re.MatchString(r.Msg) {
			n++
		}
	}
	want := intstr.FromString("yes")
	if a.Violations != nil {
		want = *a.Violations
	}
	what := "violations"
	if re != nil {
		what = fmt.Sprintf("violations matching %q", *a.Message)
	}
	switch {
	case want.Type == intstr.Int && want.IntVal >= 0:
		if int32(n) != want.IntVal {
			return fmt.Errorf("got %d %s, want exactly %d; messages %q", n, what, want.IntVal, msgs)
		}
	case want.Type == intstr.String && want.StrVal == "yes":
		if n == 0 {
			return fmt.Errorf("got no %s, want at least one; messages %q", what, msgs)
		}
	case want.Type == intstr.String && want.StrVal == "no":
		if n > 0 {
			return fmt.Errorf("got %d %s, want none; messages %q", n, what, msgs)
		}
	default:
		return fmt.Errorf("violations %q must be yes, no or a count", want.String())
	}
	return nil
}

// readObjects reads every object of a YAML or JSON file of one or more documents.
func readObjects(path string) ([]map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return DecodeObjects(data)
}

// DecodeObjects decodes the objects of a stream of YAML or JSON documents, skipping
// empty ones.
func DecodeObjects(data []byte) ([]map[string]any, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []map[string]any
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(obj) > 0 {
			out = append(out, obj)
		}
	}
}
