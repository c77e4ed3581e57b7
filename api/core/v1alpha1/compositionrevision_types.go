package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// CompositionReference names the composition a revision is of.
type CompositionReference struct {
	// APIVersion of the composition, the served version its controller read it
	// through, e.g. composition.krateo.io/v1-1-5.
	APIVersion string `json:"apiVersion"`
	// Kind of the composition, e.g. FireworksApp.
	Kind string `json:"kind"`
	// Name of the composition, in the revision's namespace.
	Name string `json:"name"`
	// UID of the composition: a revision is only ever restored onto the composition
	// whose UID it names.
	UID types.UID `json:"uid"`
}

// CompositionRevision is one revision of a composition's Helm release, as Compositor
// installed it: the spec as written, the chart it ran and who wrote it. The composition
// controller writes one per install or upgrade and keeps the definition's
// spec.upgrade.revisionHistoryLimit newest; `compositor rollback` (the annotation
// compositor.dev/rollback-to) restores one. It is Compositor's record, sealed with the
// release seal's key: one whose seal fails is never restored.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,categories={krateo,compositions},shortName=comprev
// +kubebuilder:printcolumn:name="COMPOSITION",type="string",JSONPath=".composition.name"
// +kubebuilder:printcolumn:name="REVISION",type="integer",JSONPath=".revision"
// +kubebuilder:printcolumn:name="CHART VERSION",type="string",JSONPath=".chartVersion"
// +kubebuilder:printcolumn:name="AUTHOR",type="string",JSONPath=".author"
// +kubebuilder:printcolumn:name="AGE",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="KIND",type="string",JSONPath=".composition.kind",priority=1
// +kubebuilder:printcolumn:name="SERVED VERSION",type="string",JSONPath=".servedVersion",priority=1
// +kubebuilder:printcolumn:name="DIGEST",type="string",JSONPath=".chartDigest",priority=1
// +kubebuilder:printcolumn:name="FINGERPRINT",type="string",JSONPath=".fingerprint",priority=1
type CompositionRevision struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Composition is the composition this is a revision of.
	Composition CompositionReference `json:"composition"`

	// Revision is the Helm release revision this one installed (helm history).
	// +kubebuilder:validation:Minimum=1
	Revision int64 `json:"revision"`

	// Release is the Helm release's name.
	Release string `json:"release"`

	// ServedVersion is the version of the composition's kind whose controller
	// installed it (the pin, krateo.io/composition-version), e.g. v1-1-5.
	ServedVersion string `json:"servedVersion"`

	// ChartVersion is the version of the chart installed, e.g. 1.1.5.
	ChartVersion string `json:"chartVersion"`

	// ChartDigest is the digest of the chart archive installed.
	ChartDigest string `json:"chartDigest"`

	// Spec is the composition's spec as the controller of ServedVersion read it: the
	// values installed.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Spec apiextensionsv1.JSON `json:"spec"`

	// Fingerprint of the chart digest and the values (the composition's
	// status.fingerprint, and the release record's compositor.dev/fingerprint).
	Fingerprint string `json:"fingerprint"`

	// Time is when the revision was installed.
	Time metav1.Time `json:"time"`

	// Author is the user who wrote the spec this revision installed, as the API
	// server authenticated them (the composition's compositor.dev/spec-author).
	// +optional
	Author string `json:"author,omitempty"`

	// Seal is the HMAC of every field above, the namespace and the name, with
	// Compositor's release seal key: "v1:" and hex.
	Seal string `json:"seal"`
}

// CompositionRevisionList is a list of CompositionRevisions.
//
// +kubebuilder:object:root=true
type CompositionRevisionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CompositionRevision `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CompositionRevision{}, &CompositionRevisionList{})
}
