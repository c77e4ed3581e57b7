package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EnforcementAction says what happens to a request that violates a policy.
// +kubebuilder:validation:Enum=deny;warn;dryrun
type EnforcementAction string

const (
	// EnforcementDeny rejects the request and shows every violation to the caller.
	EnforcementDeny EnforcementAction = "deny"
	// EnforcementWarn admits the request and returns the violations as warnings.
	EnforcementWarn EnforcementAction = "warn"
	// EnforcementDryRun admits the request and records the violations in metrics and
	// audit only; the caller never sees them.
	EnforcementDryRun EnforcementAction = "dryrun"
)

// Target says what a policy is evaluated over.
// +kubebuilder:validation:Enum=object;rendered
type Target string

const (
	// TargetObject evaluates the policy over the admitted object.
	TargetObject Target = "object"
	// TargetRendered evaluates the policy over the manifests the chart renders from a
	// composition's values.
	TargetRendered Target = "rendered"
)

// Operation is an admission operation a policy applies to.
// +kubebuilder:validation:Enum=CREATE;UPDATE;DELETE;CONNECT;"*"
type Operation string

// KindMatcher selects objects by API group, kind and version; "*" matches any.
type KindMatcher struct {
	// Group of the objects; "*" matches any group.
	// +optional
	Group string `json:"group,omitempty"`
	// Kind of the objects; "*" matches any kind.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Versions of the objects; empty or "*" matches any version.
	// +optional
	// +listType=set
	Versions []string `json:"versions,omitempty"`
}

// Match selects the admission requests a policy is evaluated on. Every field that is
// set must match; an empty Match matches every request Compositor admits.
type Match struct {
	// Kinds the policy applies to; empty means all.
	// +optional
	Kinds []KindMatcher `json:"kinds,omitempty"`
	// Namespaces the policy applies to; empty means all.
	// +optional
	// +listType=set
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceSelector selects the namespaces by their labels.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// LabelSelector selects the objects by their labels.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// Operations the policy applies to; empty means CREATE and UPDATE.
	// +optional
	// +listType=set
	Operations []Operation `json:"operations,omitempty"`
}

// CompositionPolicySpec is the desired state of a CompositionPolicy.
type CompositionPolicySpec struct {
	// Rego is one Rego v1 module defining `deny contains v` and/or `warn contains v`,
	// where v is a string or an object {msg, path, id}.
	// +kubebuilder:validation:MinLength=1
	Rego string `json:"rego"`

	// Match selects the requests the policy is evaluated on.
	// +optional
	Match Match `json:"match,omitempty"`

	// EnforcementAction is deny (default), warn or dryrun.
	// +optional
	// +kubebuilder:default=deny
	EnforcementAction EnforcementAction `json:"enforcementAction,omitempty"`

	// Target is object (default: the admitted object) or rendered (the manifests the
	// chart would produce from a composition's values).
	// +optional
	// +kubebuilder:default=object
	Target Target `json:"target,omitempty"`

	// Parameters are free-form and exposed to the policy as input.parameters.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Parameters *apiextensionsv1.JSON `json:"parameters,omitempty"`
}

// CompileError is one error found while compiling a policy's Rego.
type CompileError struct {
	// Line of the error in spec.rego, starting at 1.
	// +optional
	Line int32 `json:"line,omitempty"`
	// Column of the error in spec.rego, starting at 1.
	// +optional
	Column int32 `json:"column,omitempty"`
	// Message says what is wrong.
	Message string `json:"message"`
}

// MaxAuditExamples bounds the violations an audit keeps in status.
const MaxAuditExamples = 20

// AuditViolation is one object found violating a policy by the audit.
type AuditViolation struct {
	// APIVersion of the object.
	APIVersion string `json:"apiVersion"`
	// Kind of the object.
	Kind string `json:"kind"`
	// Namespace of the object.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name of the object.
	Name string `json:"name"`
	// Message of the violation.
	Message string `json:"message"`
}

// AuditStatus summarizes the last audit of existing objects against a policy.
type AuditStatus struct {
	// LastRunTime is when the audit last finished.
	// +optional
	LastRunTime *metav1.Time `json:"lastRunTime,omitempty"`
	// ViolationCount is the number of violations the audit found.
	// +optional
	ViolationCount int32 `json:"violationCount,omitempty"`
	// Examples holds at most 20 of those violations.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Examples []AuditViolation `json:"examples,omitempty"`
}

// CompositionPolicyStatus is the observed state of a CompositionPolicy.
type CompositionPolicyStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Compiled is true when the Rego of that generation compiled and is enforced.
	// +optional
	Compiled bool `json:"compiled,omitempty"`
	// Errors found while compiling the Rego.
	// +optional
	Errors []CompileError `json:"errors,omitempty"`
	// Audit summarizes which existing objects violate the policy.
	// +optional
	Audit AuditStatus `json:"audit,omitempty"`
}

// CompositionPolicy is a Rego policy that Compositor enforces at admission time on
// definitions and compositions.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories={compositor},shortName=comppol
// +kubebuilder:printcolumn:name="ACTION",type="string",JSONPath=".spec.enforcementAction"
// +kubebuilder:printcolumn:name="TARGET",type="string",JSONPath=".spec.target"
// +kubebuilder:printcolumn:name="COMPILED",type="boolean",JSONPath=".status.compiled"
// +kubebuilder:printcolumn:name="VIOLATIONS",type="integer",JSONPath=".status.audit.violationCount"
// +kubebuilder:printcolumn:name="AGE",type="date",JSONPath=".metadata.creationTimestamp"
type CompositionPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CompositionPolicySpec   `json:"spec"`
	Status CompositionPolicyStatus `json:"status,omitempty"`
}

// CompositionPolicyList is a list of CompositionPolicies.
//
// +kubebuilder:object:root=true
type CompositionPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CompositionPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CompositionPolicy{}, &CompositionPolicyList{})
}
