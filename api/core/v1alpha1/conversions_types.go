package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// ConversionStep converts the values of one chart version to those of a later one, and
// back. Steps chain: 1.1.5 → 1.1.6 and 1.1.6 → 2.0.0 convert 1.1.5 to 2.0.0.
type ConversionStep struct {
	// From is the earlier chart version.
	// +kubebuilder:validation:MinLength=1
	From string `json:"from"`

	// To is the later chart version.
	// +kubebuilder:validation:MinLength=1
	To string `json:"to"`

	// Rules are applied in order going from From to To, and in reverse order back.
	// +kubebuilder:validation:MinItems=1
	Rules []ConversionRule `json:"rules"`
}

// ConversionRule is one change of the values between two chart versions: exactly one
// of move, derive and drop. Paths are dotted keys of the values, e.g. service.type.
type ConversionRule struct {
	// Move is a path of From's values whose value moves to the path To names.
	// +optional
	Move string `json:"move,omitempty"`

	// To is the path of To's values Move moves the value to.
	// +optional
	To string `json:"to,omitempty"`

	// Map converts the moved value: from From's value (a string, or the JSON of any
	// other value) to To's value.
	// +optional
	Map map[string]apiextensionsv1.JSON `json:"map,omitempty"`

	// Default is To's value for a value Map does not list.
	// +optional
	Default *apiextensionsv1.JSON `json:"default,omitempty"`

	// Reverse converts To's value back to From's. Without it, Map is inverted, which
	// needs each value of Map to come from one key only.
	// +optional
	Reverse map[string]apiextensionsv1.JSON `json:"reverse,omitempty"`

	// ReverseDefault is From's value for a value of To that Reverse does not list.
	// +optional
	ReverseDefault *apiextensionsv1.JSON `json:"reverseDefault,omitempty"`

	// Derive is a path of To's values computed by Expression.
	// +optional
	Derive string `json:"derive,omitempty"`

	// Expression is a CEL expression over self, From's values, whose result is the
	// value at Derive. A result of null leaves Derive unset.
	// +optional
	Expression string `json:"expression,omitempty"`

	// Inverse computes, going back, paths of From's values from To's (self), one CEL
	// expression each. Going forward these paths are removed: Derive holds what they
	// said.
	// +optional
	Inverse map[string]string `json:"inverse,omitempty"`

	// Drop is a path of From's values that To does not have.
	// +optional
	Drop string `json:"drop,omitempty"`

	// AcknowledgeLoss says why the rule may lose values. A rule that loses values
	// (converting a value there and back does not give it back) is refused unless it
	// says so; the definition's status then reports what it loses. Drop needs none.
	// +optional
	AcknowledgeLoss string `json:"acknowledgeLoss,omitempty"`
}

// ConversionLoss is what an acknowledged rule loses, with a value that shows it.
type ConversionLoss struct {
	// Step names the two chart versions, e.g. 1.1.5 → 2.0.0.
	Step string `json:"step"`
	// Path is the path of the values the rule loses.
	Path string `json:"path"`
	// Example is a value that does not come back, and what comes back instead.
	// +optional
	Example string `json:"example,omitempty"`
	// Reason is the rule's acknowledgeLoss, or that the field is dropped.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// ConversionDeclaration is what the definition of one served version declares about
// conversion: the chart version it serves and the steps from earlier chart versions to
// it. A generated CRD keeps one per served version, as JSON in the annotation
// conversions.compositor.dev/<version>.
type ConversionDeclaration struct {
	Chart string           `json:"chart"`
	Steps []ConversionStep `json:"steps,omitempty"`
}
