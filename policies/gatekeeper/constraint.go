package gatekeeper

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Enforcement actions of a Constraint that Compositor carries out. "scoped" is turned
// into one of them by its scopedEnforcementActions.
const (
	ActionDeny   = "deny"
	ActionWarn   = "warn"
	ActionDryRun = "dryrun"
	actionScoped = "scoped"
)

// EnforcementPoint is the enforcement point a scoped Constraint names to be enforced by
// Compositor; "validation.gatekeeper.sh" (Gatekeeper's admission webhook) and "*" are
// honoured too, since Compositor judges at admission.
const EnforcementPoint = "compositor.dev"

// Constraint is one Constraint of a template's kind: what it matches, its parameters
// and what a violation does.
type Constraint struct {
	// Kind is the template's kind; Name the Constraint's metadata.name.
	Kind, Name string
	// Action is deny, warn or dryrun; "" means the Constraint is not enforced here (a
	// scoped Constraint naming other enforcement points only).
	Action string
	// Match is spec.match.
	Match Match

	params     *ast.Term
	selector   labels.Selector
	nsSelector labels.Selector
}

// Match is a Constraint's spec.match, as Gatekeeper defines it.
type Match struct {
	Kinds              []KindMatch           `json:"kinds,omitempty"`
	Scope              string                `json:"scope,omitempty"`
	Namespaces         []string              `json:"namespaces,omitempty"`
	ExcludedNamespaces []string              `json:"excludedNamespaces,omitempty"`
	LabelSelector      *metav1.LabelSelector `json:"labelSelector,omitempty"`
	NamespaceSelector  *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	Name               string                `json:"name,omitempty"`
	Source             string                `json:"source,omitempty"`
}

// KindMatch is one entry of spec.match.kinds.
type KindMatch struct {
	APIGroups []string `json:"apiGroups,omitempty"`
	Kinds     []string `json:"kinds,omitempty"`
}

type constraintSource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Match                    *Match         `json:"match,omitempty"`
		Parameters               map[string]any `json:"parameters,omitempty"`
		EnforcementAction        string         `json:"enforcementAction,omitempty"`
		ScopedEnforcementActions []struct {
			Action            string `json:"action"`
			EnforcementPoints []struct {
				Name string `json:"name"`
			} `json:"enforcementPoints"`
		} `json:"scopedEnforcementActions,omitempty"`
	} `json:"spec"`
}

// ParseConstraint reads a Constraint (constraints.gatekeeper.sh, any version) from its
// unstructured form. Its kind must be a template's kind; that is the caller's check.
func ParseConstraint(obj map[string]any) (*Constraint, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var src constraintSource
	if err := json.Unmarshal(raw, &src); err != nil {
		return nil, fmt.Errorf("reading the constraint: %w", err)
	}
	group, _, _ := strings.Cut(src.APIVersion, "/")
	if group != ConstraintsGroup {
		return nil, fmt.Errorf("apiVersion %q: constraints are in group %s", src.APIVersion, ConstraintsGroup)
	}
	if src.Kind == "" || src.Metadata.Name == "" {
		return nil, fmt.Errorf("a constraint needs a kind and metadata.name")
	}
	c := &Constraint{Kind: src.Kind, Name: src.Metadata.Name}
	if src.Spec.Match != nil {
		c.Match = *src.Spec.Match
	}
	if c.Action, err = action(src); err != nil {
		return nil, err
	}
	if err := c.prepare(src.Spec.Parameters); err != nil {
		return nil, err
	}
	return c, nil
}

func action(src constraintSource) (string, error) {
	switch a := src.Spec.EnforcementAction; a {
	case "", ActionDeny:
		return ActionDeny, nil
	case ActionWarn, ActionDryRun:
		return a, nil
	case actionScoped:
		// The strictest action scoped to an enforcement point Compositor stands for.
		best := ""
		for _, s := range src.Spec.ScopedEnforcementActions {
			if !slices.ContainsFunc(s.EnforcementPoints, func(p struct {
				Name string `json:"name"`
			}) bool {
				return p.Name == "*" || p.Name == EnforcementPoint || p.Name == "validation.gatekeeper.sh"
			}) {
				continue
			}
			a := s.Action
			if !slices.Contains([]string{ActionDeny, ActionWarn, ActionDryRun}, a) {
				return "", fmt.Errorf("spec.scopedEnforcementActions: action %q must be deny, warn or dryrun", s.Action)
			}
			if rank(a) > rank(best) {
				best = a
			}
		}
		return best, nil
	default:
		return "", fmt.Errorf("spec.enforcementAction %q must be deny, warn, dryrun or scoped", src.Spec.EnforcementAction)
	}
}

func rank(a string) int { return slices.Index([]string{"", ActionDryRun, ActionWarn, ActionDeny}, a) }

func (c *Constraint) prepare(params map[string]any) error {
	if params == nil {
		params = map[string]any{}
	}
	v, err := ast.InterfaceToValue(params)
	if err != nil {
		return fmt.Errorf("spec.parameters: %w", err)
	}
	c.params = ast.NewTerm(v)
	switch c.Match.Scope {
	case "", "*", "Cluster", "Namespaced":
	default:
		return fmt.Errorf("spec.match.scope %q must be *, Cluster or Namespaced", c.Match.Scope)
	}
	switch c.Match.Source {
	case "", "All", "Original", "Generated":
	default:
		return fmt.Errorf("spec.match.source %q must be All, Original or Generated", c.Match.Source)
	}
	for _, field := range []struct {
		name string
		vals []string
	}{{"namespaces", c.Match.Namespaces}, {"excludedNamespaces", c.Match.ExcludedNamespaces}} {
		for _, p := range field.vals {
			if err := checkGlob(p); err != nil {
				return fmt.Errorf("spec.match.%s: %w", field.name, err)
			}
		}
	}
	if c.Match.Name != "" {
		if err := checkGlob(c.Match.Name); err != nil {
			return fmt.Errorf("spec.match.name: %w", err)
		}
	}
	if c.Match.LabelSelector != nil {
		if c.selector, err = metav1.LabelSelectorAsSelector(c.Match.LabelSelector); err != nil {
			return fmt.Errorf("spec.match.labelSelector: %w", err)
		}
	}
	if c.Match.NamespaceSelector != nil {
		if c.nsSelector, err = metav1.LabelSelectorAsSelector(c.Match.NamespaceSelector); err != nil {
			return fmt.Errorf("spec.match.namespaceSelector: %w", err)
		}
	}
	return nil
}

// WildcardPattern is what Gatekeeper's CRDs allow in spec.match.namespaces,
// excludedNamespaces and name (its wildcard type's validation): a lower-case name with
// a "*" or "*-" before it, a "*" or "-*" after it, or both ("*-system", "kube-*",
// "*tenant*"). The constraint CRDs Compositor makes carry it too, so that the API
// server refuses what the engine would.
const WildcardPattern = `^(\*|\*-)?[a-z0-9]([-:a-z0-9]*[a-z0-9])?(\*|-\*)?$`

var wildcard = regexp.MustCompile(WildcardPattern)

// checkGlob accepts what Gatekeeper's wildcards are (WildcardPattern).
func checkGlob(p string) error {
	if !wildcard.MatchString(p) {
		return fmt.Errorf("%q: must be a lower-case name with an optional \"*\" or \"*-\" before it and \"*\" or \"-*\" after it (%s)", p, WildcardPattern)
	}
	return nil
}

func globMatches(p, s string) bool {
	prefix, suffix := strings.HasPrefix(p, "*"), strings.HasSuffix(p, "*") && len(p) > 1
	inner := strings.TrimSuffix(strings.TrimPrefix(p, "*"), "*")
	switch {
	case prefix && suffix:
		return strings.Contains(s, inner)
	case prefix:
		return strings.HasSuffix(s, inner)
	case suffix:
		return strings.HasPrefix(s, inner)
	default:
		return p == s
	}
}

// Subject is one object under review, with what matching needs around it.
type Subject struct {
	// Object is the object (for a DELETE, the object being deleted).
	Object map[string]any
	// Group, Version and Kind of Object.
	Group, Version, Kind string
	// Namespace is Object's namespace; empty for a cluster-scoped object.
	Namespace string
	// NamespaceObject is the Namespace object of Namespace, when known; its labels are
	// what namespaceSelector matches.
	NamespaceObject map[string]any
	// OldObject is the object before an UPDATE: as in Gatekeeper, a constraint that
	// matches either the object or its old version applies.
	OldObject map[string]any
	// Name overrides Object's metadata.name as input.review.name (an AdmissionRequest's
	// name, which may differ).
	Name string
	// Generated says that Object was made by expanding a workload's pod template.
	Generated bool
}

func (s *Subject) name() string {
	if s.Name != "" {
		return s.Name
	}
	return nestedString(s.Object, "metadata", "name")
}
func (s *Subject) isNamespace() bool { return s.Group == "" && s.Kind == "Namespace" }

// Matches reports whether the constraint applies to s, by Gatekeeper's rules: every
// field of spec.match that is set must match, on the object or its old version. It
// errs only when a namespaceSelector must judge a namespaced object whose Namespace is
// unknown.
func (c *Constraint) Matches(s *Subject) (bool, error) {
	return c.matches(s, &subjectLabels{})
}

// subjectLabels are the labels of a subject's object, old object and Namespace that
// label and namespace selectors read, each made once for all the constraints a review
// matches rather than once for each constraint with a selector.
type subjectLabels struct {
	sets [3]labels.Set // of Object, OldObject and NamespaceObject
	made [3]bool
}

// of returns the labels of s's object (i 0), old object (1) or Namespace (2).
func (l *subjectLabels) of(s *Subject, i int) labels.Set {
	if !l.made[i] {
		l.made[i] = true
		l.sets[i] = stringMap([]map[string]any{s.Object, s.OldObject, s.NamespaceObject}[i], "metadata", "labels")
	}
	return l.sets[i]
}

// matches is Matches with the labels of s kept in ls.
func (c *Constraint) matches(s *Subject, ls *subjectLabels) (bool, error) {
	for i, obj := range []map[string]any{s.Object, s.OldObject} {
		if obj == nil {
			continue
		}
		if ok, err := c.matchOne(s, obj, i, ls); ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// matchOne matches obj, the object (i 0) or the old object (1) of s.
func (c *Constraint) matchOne(s *Subject, obj map[string]any, i int, ls *subjectLabels) (bool, error) {
	m := &c.Match
	if len(m.Kinds) > 0 && !slices.ContainsFunc(m.Kinds, func(k KindMatch) bool {
		return anyOrContains(k.Kinds, s.Kind) && anyOrContains(k.APIGroups, s.Group)
	}) {
		return false, nil
	}
	hasNamespace := s.Namespace != ""
	switch m.Scope {
	case "Cluster":
		if !s.isNamespace() && hasNamespace {
			return false, nil
		}
	case "Namespaced":
		if s.isNamespace() || !hasNamespace {
			return false, nil
		}
	}
	ns := s.Namespace
	if s.isNamespace() {
		ns = nestedString(obj, "metadata", "name")
	}
	if ns != "" {
		if len(m.Namespaces) > 0 && !slices.ContainsFunc(m.Namespaces, func(p string) bool { return globMatches(p, ns) }) {
			return false, nil
		}
		if slices.ContainsFunc(m.ExcludedNamespaces, func(p string) bool { return globMatches(p, ns) }) {
			return false, nil
		}
	}
	if c.selector != nil && !c.selector.Matches(ls.of(s, i)) {
		return false, nil
	}
	if c.nsSelector != nil {
		switch {
		case s.isNamespace():
			if !c.nsSelector.Matches(ls.of(s, i)) {
				return false, nil
			}
		case !hasNamespace:
		case s.NamespaceObject == nil:
			return false, fmt.Errorf("constraint %s/%s: its namespaceSelector must judge namespace %s, which is unknown", c.Kind, c.Name, s.Namespace)
		case !c.nsSelector.Matches(ls.of(s, 2)):
			return false, nil
		}
	}
	if m.Name != "" && !globMatches(m.Name, nestedString(obj, "metadata", "name")) && !(strings.HasSuffix(m.Name, "*") && nestedString(obj, "metadata", "generateName") != "" && globMatches(m.Name, nestedString(obj, "metadata", "generateName"))) {
		return false, nil
	}
	switch m.Source {
	case "Original":
		return !s.Generated, nil
	case "Generated":
		return s.Generated, nil
	}
	return true, nil
}

// JudgesNamespace reports whether the constraint's namespace criteria (scope,
// namespaces, excludedNamespaces, namespaceSelector) let it judge objects in namespace
// ns, whose labels are nsLabels. When not, it judges only cluster-scoped objects or
// other namespaces' objects.
func (c *Constraint) JudgesNamespace(ns string, nsLabels map[string]string) bool {
	m := &c.Match
	switch {
	case m.Scope == "Cluster":
		return false
	case len(m.Namespaces) > 0 && !slices.ContainsFunc(m.Namespaces, func(p string) bool { return globMatches(p, ns) }):
		return false
	case slices.ContainsFunc(m.ExcludedNamespaces, func(p string) bool { return globMatches(p, ns) }):
		return false
	case c.nsSelector != nil && !c.nsSelector.Matches(labels.Set(nsLabels)):
		return false
	}
	return true
}

func anyOrContains(set []string, v string) bool {
	return len(set) == 0 || slices.Contains(set, "*") || slices.Contains(set, v)
}

func nestedString(obj map[string]any, path ...string) string {
	v, _ := nested(obj, path...).(string)
	return v
}

func nested(obj map[string]any, path ...string) any {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func stringMap(obj map[string]any, path ...string) map[string]string {
	m, _ := nested(obj, path...).(map[string]any)
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}
