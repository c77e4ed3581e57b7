package policies

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

// SourceSchema is the Source of a violation of the chart's own values.schema.json.
const SourceSchema = "values.schema.json"

// MaxWarningLength bounds a warning line, in bytes. The API server cuts an admission
// warning to 256 characters (runes) once a response's warnings pass 4096 in all
// (truncateItemRunes in k8s.io/apiserver/pkg/endpoints/filters/warning.go; the
// AdmissionResponse.warnings field doc of k8s.io/api/admission/v1 says warnings over
// 256 characters may be truncated); 256 bytes are never more than 256 runes, so a
// warning of ours is never cut again, and its start (the source) always arrives.
const MaxWarningLength = 256

// Violation is one reason to deny (or warn about) a request.
type Violation struct {
	// Path is the field path the violation is about, e.g. "spec.storage.size"; empty
	// when a policy named none.
	Path string
	// Message says what is wrong, in plain words.
	Message string
	// Source is where the rule comes from: "values.schema.json", "values.schema.json of
	// subchart cache", or "policy <name>".
	Source string
	// Policy is the name of the policy that found the violation; empty for the schema.
	Policy string
	// ID is the id the policy's rule gave the violation, if any.
	ID string
	// Object names the rendered object the violation is about, e.g.
	// "Deployment/x-fireworks-app"; set only for policies with target rendered.
	Object string
	// Action is what the violation does to the request. Schema violations always deny.
	Action v1alpha1.EnforcementAction
	// Failed says that no answer was had: the policy or constraint could not be
	// evaluated (a deadline, a runtime error, a chart that did not render, constraints
	// not read yet), and Message says why. Such a verdict may differ on another try.
	Failed bool
}

// IsSchema reports whether v comes from a chart's JSON Schema rather than a policy.
func (v Violation) IsSchema() bool { return v.Policy == "" }

// String is the line the caller sees, e.g.
//
//	spec.replicaCount: must be <= 10 (values.schema.json)
//	spec.image.registry: registry "docker.io" is not allowed [policy allowed-registries]
//	Deployment/x-fireworks-app spec.replicas: must be at least 2 [policy ha]
func (v Violation) String() string {
	var b strings.Builder
	v.writeWhatAndWhy(&b)
	if v.IsSchema() {
		b.WriteString(" (" + v.Source + ")")
	} else {
		b.WriteString(" [" + v.source() + "]")
	}
	return b.String()
}

// source names where a policy violation comes from: the policy or constraint, and the
// rule's id when it has one of its own.
func (v Violation) source() string {
	if !v.IsSchema() && v.ID != "" && v.ID != v.Policy {
		return v.Source + "/" + oneLine(v.ID)
	}
	return v.Source
}

// writeWhatAndWhy writes the object and path the violation is about, if any, then its
// message.
func (v Violation) writeWhatAndWhy(b *strings.Builder) {
	where := v.Object
	if v.Path != "" {
		if where != "" {
			where += " "
		}
		where += v.Path
	}
	if where != "" {
		b.WriteString(where)
		b.WriteString(": ")
	}
	b.WriteString(oneLine(v.Message))
}

// Warning is the admission warning for v: the line of String with the policy or
// constraint it comes from first, e.g.
//
//	[constraint K8sRequiredLabels/must-have-owner] Deployment/x: you must provide labels: {"owner"}
//
// so that a warning shortened to MaxWarningLength still names its source, as
// Gatekeeper's own warnings do.
func (v Violation) Warning() string {
	var b strings.Builder
	b.WriteString("[" + v.source() + "] ")
	v.writeWhatAndWhy(&b)
	return printable(b.String())
}

// printable is s as a warning can carry it: the API server drops a warning that is not
// valid UTF-8 or holds a control character (apimachinery's net.NewWarningHeader), so
// invalid bytes become U+FFFD and control characters their Go escape (\x1b); format
// characters (U+202E, which turns the text after it around on a terminal) are escaped
// too, so that a value cannot make a warning read otherwise than it says.
func printable(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	hidden := func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if hidden(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// oneLine keeps a message on one line: every violation is one line of the denial.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\r\n\t") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// SortViolations puts violations in the order they are shown: schema violations
// first, root chart before subcharts, then policies by name; within a source by
// object, path and message. The order never depends on map iteration.
func SortViolations(vs []Violation) {
	slices.SortStableFunc(vs, compareViolations)
}

func compareViolations(a, b Violation) int {
	if a.IsSchema() != b.IsSchema() {
		if a.IsSchema() {
			return -1
		}
		return 1
	}
	if a.IsSchema() && (a.Source == SourceSchema) != (b.Source == SourceSchema) {
		if a.Source == SourceSchema {
			return -1
		}
		return 1
	}
	return cmp.Or(
		strings.Compare(a.Source, b.Source),
		strings.Compare(a.Object, b.Object),
		strings.Compare(a.Path, b.Path),
		strings.Compare(a.Message, b.Message),
		strings.Compare(a.ID, b.ID),
	)
}

// FormatLines turns violations into the lines the caller sees, one per violation, in
// the order of SortViolations. The webhook and `compositor validate` both print these.
func FormatLines(vs []Violation) []string {
	if len(vs) == 0 {
		return nil
	}
	sorted := slices.Clone(vs)
	SortViolations(sorted)
	lines := make([]string, 0, len(sorted))
	for _, v := range sorted {
		lines = append(lines, v.String())
	}
	return slices.Compact(lines)
}

// FormatDenial is the denial message: every deny violation on its own line.
func FormatDenial(vs []Violation) string {
	return strings.Join(FormatLines(filterAction(vs, v1alpha1.EnforcementDeny)), "\n")
}

// FormatWarnings turns the warn violations into admission warnings (Violation.Warning),
// in the order of SortViolations, each shortened to at most MaxWarningLength bytes.
func FormatWarnings(vs []Violation) []string {
	warn := filterAction(vs, v1alpha1.EnforcementWarn)
	if len(warn) == 0 {
		return nil
	}
	SortViolations(warn)
	lines := make([]string, 0, len(warn))
	for _, v := range warn {
		lines = append(lines, truncate(v.Warning(), MaxWarningLength))
	}
	return slices.Compact(lines)
}

// truncate shortens s to at most n bytes without splitting a character, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func filterAction(vs []Violation, action v1alpha1.EnforcementAction) []Violation {
	var out []Violation
	for _, v := range vs {
		if v.Action == action {
			out = append(out, v)
		}
	}
	return out
}

// Decision is the outcome of checking one request.
type Decision struct {
	// Violations holds every violation found, whatever its action, in the order of
	// SortViolations.
	Violations []Violation
}

// Denied reports whether any violation denies the request.
func (d Decision) Denied() bool {
	return slices.ContainsFunc(d.Violations, func(v Violation) bool { return v.Action == v1alpha1.EnforcementDeny })
}

// Message is the denial message, one violation per line; empty when allowed.
func (d Decision) Message() string { return FormatDenial(d.Violations) }

// Warnings are the lines to return as admission warnings.
func (d Decision) Warnings() []string { return FormatWarnings(d.Violations) }

// DryRun returns the violations of dryrun policies: for metrics and audit only, never
// shown to the caller.
func (d Decision) DryRun() []Violation { return filterAction(d.Violations, v1alpha1.EnforcementDryRun) }

// Reason follows Kubernetes conventions: Invalid (422) when the values break the
// chart's schema, Forbidden (403) when only policies deny; empty when allowed.
func (d Decision) Reason() metav1.StatusReason {
	if !d.Denied() {
		return ""
	}
	for _, v := range d.Violations {
		if v.Action == v1alpha1.EnforcementDeny && v.IsSchema() {
			return metav1.StatusReasonInvalid
		}
	}
	return metav1.StatusReasonForbidden
}

// Err is the API error for a denied request on the object gk/name, with Message() as
// its message and one cause per violation; nil when the request is allowed.
func (d Decision) Err(gk schema.GroupKind, name string) *apierrors.StatusError {
	reason := d.Reason()
	if reason == "" {
		return nil
	}
	code := int32(403)
	if reason == metav1.StatusReasonInvalid {
		code = 422
	}
	var causes []metav1.StatusCause
	for _, v := range filterAction(d.Violations, v1alpha1.EnforcementDeny) {
		t := metav1.CauseTypeFieldValueInvalid
		if !v.IsSchema() {
			t = metav1.CauseType("PolicyViolation")
		}
		causes = append(causes, metav1.StatusCause{Type: t, Field: v.Path, Message: v.String()})
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    code,
		Reason:  reason,
		Message: d.Message(),
		Details: &metav1.StatusDetails{Group: gk.Group, Kind: gk.Kind, Name: name, Causes: causes},
	}}
}
