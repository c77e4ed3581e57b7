package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of a CompositionDefinition.
const (
	// ConditionReady is True when the generated API is served and its controller runs.
	ConditionReady = "Ready"
	// ConditionSynced is True when the last reconciliation succeeded.
	ConditionSynced = "Synced"
)

// ChartInfo says where the Helm chart of a definition comes from.
type ChartInfo struct {
	// URL of the chart: an oci:// reference, a direct link to a .tgz archive, or the
	// URL of a Helm repository (then repo names the chart in it).
	// +kubebuilder:validation:MinLength=1
	URL string `json:"url"`

	// Version is the exact chart version; needed for OCI and Helm repositories.
	// +optional
	Version string `json:"version,omitempty"`

	// Repo is the name of the chart inside a Helm repository.
	// +optional
	Repo string `json:"repo,omitempty"`

	// InsecureSkipVerifyTLS skips the verification of the chart server's certificate.
	// +optional
	InsecureSkipVerifyTLS bool `json:"insecureSkipVerifyTLS,omitempty"`

	// Credentials for a private repository or registry.
	// +optional
	Credentials *Credentials `json:"credentials,omitempty"`

	// Verify says how the chart's signature is checked before it becomes an API: a
	// chart that fails the check is refused, and the definition says why. Without it
	// the chart is not verified (unless the platform requires it, see the built-in
	// policy require-chart-verification).
	// +optional
	Verify *ChartVerification `json:"verify,omitempty"`
}

// ChartVerification names one way to check a chart's signature.
// +kubebuilder:validation:XValidation:rule="has(self.provenance) != has(self.cosign)",message="exactly one of provenance and cosign"
type ChartVerification struct {
	// Provenance checks the chart's Helm provenance file (.prov, written by helm
	// package --sign beside the archive) against an OpenPGP keyring. For charts of a
	// Helm repository, direct archive URLs and imported archives.
	// +optional
	Provenance *ProvenanceVerification `json:"provenance,omitempty"`

	// Cosign checks a cosign signature of an OCI chart (a Sigstore bundle among the
	// manifest's referrers, or the legacy sha256-<digest>.sig tag), or the Sigstore
	// bundle of an imported archive.
	// +optional
	Cosign *CosignVerification `json:"cosign,omitempty"`
}

// ProvenanceVerification checks a .prov file against an OpenPGP keyring.
type ProvenanceVerification struct {
	// KeyringRef points at the key of a Secret, in the definition's namespace, holding
	// the OpenPGP public keys (armored or binary) the chart may be signed with.
	KeyringRef SecretKeySelector `json:"keyringRef"`
}

// CosignVerification checks a cosign signature with a public key or keyless.
// +kubebuilder:validation:XValidation:rule="has(self.keyRef) != has(self.keyless)",message="exactly one of keyRef and keyless"
type CosignVerification struct {
	// KeyRef points at the key of a Secret, in the definition's namespace, holding the
	// PEM public key the chart must be signed with.
	// +optional
	KeyRef *SecretKeySelector `json:"keyRef,omitempty"`

	// Keyless accepts a signature whose certificate chains to a trusted root and names
	// the expected issuer and subject.
	// +optional
	Keyless *CosignKeyless `json:"keyless,omitempty"`
}

// CosignKeyless is the identity a keyless signature's certificate must name.
// +kubebuilder:validation:XValidation:rule="has(self.subject) != has(self.subjectRegExp)",message="exactly one of subject and subjectRegExp"
type CosignKeyless struct {
	// Issuer is the OIDC issuer the certificate names, exactly.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Issuer string `json:"issuer"`

	// Subject is the certificate's subject (its SAN: an email or URI), exactly.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Subject string `json:"subject,omitempty"`

	// SubjectRegExp is a regular expression (Go syntax) the whole subject must match.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	SubjectRegExp string `json:"subjectRegExp,omitempty"`

	// TrustedRootRef points at the key of a Secret, in the definition's namespace,
	// holding the Sigstore trusted root (trusted_root.json: certificate authorities,
	// transparency logs, timestamp authorities) the signature is checked against,
	// offline.
	TrustedRootRef SecretKeySelector `json:"trustedRootRef"`
}

// ChartVerificationStatus is what the check of the served chart's signature proved.
type ChartVerificationStatus struct {
	// Method is Provenance, CosignKey or CosignKeyless.
	Method string `json:"method"`
	// Digest of the chart archive the signature covers.
	Digest string `json:"digest"`
	// ManifestDigest is the OCI manifest a cosign signature names.
	// +optional
	ManifestDigest string `json:"manifestDigest,omitempty"`
	// KeyFingerprint of the signing key: the OpenPGP fingerprint, or sha256 of a
	// cosign public key.
	// +optional
	KeyFingerprint string `json:"keyFingerprint,omitempty"`
	// Signer is the OpenPGP identity of the signing key.
	// +optional
	Signer string `json:"signer,omitempty"`
	// Subject and Issuer of a keyless signature's certificate.
	// +optional
	Subject string `json:"subject,omitempty"`
	// +optional
	Issuer string `json:"issuer,omitempty"`
	// SignedAt is when the signature was made, as far as it proves it.
	// +optional
	SignedAt *metav1.Time `json:"signedAt,omitempty"`
}

// Credentials authenticate to a chart repository or registry with basic auth.
type Credentials struct {
	// Username for basic auth.
	// +kubebuilder:validation:MinLength=1
	Username string `json:"username"`

	// PasswordRef points at the key of a Secret that holds the password or token.
	PasswordRef SecretKeySelector `json:"passwordRef"`
}

// SecretKeySelector selects one key of a Secret.
type SecretKeySelector struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// Namespace of the Secret.
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`

	// Key inside the Secret's data.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// CompositionDefinitionSpec is the desired state of a CompositionDefinition.
type CompositionDefinitionSpec struct {
	// Chart is the Helm chart whose values.schema.json becomes the generated API.
	Chart ChartInfo `json:"chart"`

	// Conversions between the values of earlier chart versions and this one, added to
	// those the chart declares in values.conversions.yaml; a step here replaces the
	// chart's step between the same versions.
	// +optional
	Conversions []ConversionStep `json:"conversions,omitempty"`

	// Upgrade says how compositions move when the chart version changes: a plan
	// first, approval, a canary and batches, automatic rollback, revisions kept.
	// +optional
	Upgrade *UpgradePolicy `json:"upgrade,omitempty"`

	// FieldValidation Strict refuses every write of a composition that holds a key of
	// the values its chart neither declares nor reads (a typo, most of the time),
	// whatever field validation the client asks for (kubectl --validate=warn or
	// false, client-go's defaults). Unset, each write's own decides: kubectl apply's
	// default is Strict.
	// +kubebuilder:validation:Enum=Strict
	// +optional
	FieldValidation string `json:"fieldValidation,omitempty"`
}

// VersionInfo describes one version of the generated CRD.
type VersionInfo struct {
	// Version is the CRD version name, e.g. v1-1-5.
	Version string `json:"version"`
	// Served is true when the API server serves this version.
	Served bool `json:"served"`
	// Stored is true when objects are stored through this version.
	Stored bool `json:"stored"`
	// Chart is the chart version this CRD version was generated from.
	// +optional
	Chart string `json:"chart,omitempty"`
}

// Managed describes the API generated for a definition.
type Managed struct {
	// Group of the generated CRD.
	// +optional
	Group string `json:"group,omitempty"`
	// Kind of the generated CRD.
	// +optional
	Kind string `json:"kind,omitempty"`
	// VersionInfo lists the versions of the generated CRD.
	// +optional
	// +listType=map
	// +listMapKey=version
	VersionInfo []VersionInfo `json:"versionInfo,omitempty"`
}

// CompositionDefinitionStatus is the observed state of a CompositionDefinition.
type CompositionDefinitionStatus struct {
	// Conditions Ready and Synced.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// APIVersion of the generated API, e.g. composition.krateo.io/v1-1-5.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`

	// Kind of the generated API.
	// +optional
	Kind string `json:"kind,omitempty"`

	// Resource is the plural resource name of the generated API.
	// +optional
	Resource string `json:"resource,omitempty"`

	// PackageURL is the URL the chart archive was downloaded from.
	// +optional
	PackageURL string `json:"packageUrl,omitempty"`

	// Digest of the chart archive.
	// +optional
	Digest string `json:"digest,omitempty"`

	// Managed describes the generated CRD.
	// +optional
	Managed Managed `json:"managed,omitempty"`

	// ConversionLosses are what the acknowledged conversion rules between the served
	// versions lose.
	// +optional
	ConversionLosses []ConversionLoss `json:"conversionLosses,omitempty"`

	// Retained are the versions the definition served before and still serves,
	// because compositions are pinned to them: those a rollout has not moved yet, or
	// that the new version refused.
	// +optional
	Retained []ServedChart `json:"retained,omitempty"`

	// Rollout is the last move of the compositions to a new chart version.
	// +optional
	Rollout *Rollout `json:"rollout,omitempty"`

	// Verification is what the check of the chart's signature proved, when
	// spec.chart.verify asks for one: it describes the chart of Digest.
	// +optional
	Verification *ChartVerificationStatus `json:"verification,omitempty"`
}

// CompositionDefinition turns a Helm chart into a Kubernetes API: a CRD generated from
// the chart's values.schema.json and a controller that installs one Helm release per
// object of that API.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories={krateo,compositions},shortName=compdef
// +kubebuilder:printcolumn:name="READY",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="SYNCED",type="string",JSONPath=".status.conditions[?(@.type=='Synced')].status"
// +kubebuilder:printcolumn:name="AGE",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="API VERSION",type="string",JSONPath=".status.apiVersion",priority=1
// +kubebuilder:printcolumn:name="KIND",type="string",JSONPath=".status.kind",priority=1
// +kubebuilder:printcolumn:name="PACKAGE URL",type="string",JSONPath=".status.packageUrl",priority=1
// +kubebuilder:printcolumn:name="ROLLOUT",type="string",JSONPath=".status.rollout.phase",priority=1
// +kubebuilder:printcolumn:name="TO MOVE",type="integer",JSONPath=".status.rollout.plan.toMove",priority=1
// +kubebuilder:printcolumn:name="REFUSED",type="integer",JSONPath=".status.rollout.plan.refused",priority=1
// +kubebuilder:printcolumn:name="DELETIONS",type="integer",JSONPath=".status.rollout.plan.deletions",priority=1
// +kubebuilder:printcolumn:name="MOVED READY",type="integer",JSONPath=".status.rollout.ready",priority=1
type CompositionDefinition struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CompositionDefinitionSpec   `json:"spec"`
	Status CompositionDefinitionStatus `json:"status,omitempty"`
}

// CompositionDefinitionList is a list of CompositionDefinitions.
//
// +kubebuilder:object:root=true
type CompositionDefinitionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CompositionDefinition `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CompositionDefinition{}, &CompositionDefinitionList{})
}
