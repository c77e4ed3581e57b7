// Package vocab is Compositor's vocabulary on the Kubernetes objects it reads and
// writes: API groups, labels, annotations and finalizers, each declared once. Users
// and tools meet these names in kubectl; the code reads them from here.
package vocab

// API groups and resources.
const (
	// CompositionGroup is the API group of every generated kind (one CRD per chart).
	CompositionGroup = "composition.krateo.io"
	// DefinitionGroup holds CompositionDefinitions.
	DefinitionGroup = "core.krateo.io"
	// DefinitionResource is the resource of CompositionDefinitions.
	DefinitionResource = "compositiondefinitions"
	// PolicyGroup holds CompositionPolicies.
	PolicyGroup = "policy.compositor.dev"
	// PolicyResource is the resource of CompositionPolicies.
	PolicyResource = "compositionpolicies"
	// RevisionResource is the resource of CompositionRevisions (DefinitionGroup).
	RevisionResource = "compositionrevisions"
)

// Annotations users write.
const (
	// AnnotationPaused set to "true" on a composition or its definition stops all
	// reconciliation of it, deletion included.
	AnnotationPaused = "krateo.io/paused"
	// AnnotationReleaseName is a composition's Helm release name; on a definition it is
	// the default for compositions that carry none.
	AnnotationReleaseName = "krateo.io/release-name"
	// AnnotationConnectorVerbose set to "true" turns on verbose logs for a definition.
	AnnotationConnectorVerbose = "krateo.io/connector-verbose"
	// AnnotationAcceptChartDigest names the digest a person accepts for a chart version
	// whose source now serves other bytes than the ones recorded in status.digest.
	AnnotationAcceptChartDigest = "compositor.dev/accept-chart-digest"
	// AnnotationAllowClusterScoped, on a definition, lists the cluster-scoped kinds
	// (Kind.group, comma-separated) its compositions may create.
	AnnotationAllowClusterScoped = "compositor.dev/allow-cluster-scoped"
	// AnnotationPlacement, on a composition, is the label selector over the target
	// clusters it is installed on.
	AnnotationPlacement = "compositor.dev/placement"
	// AnnotationNamespaceSelector, on a target cluster's kubeconfig Secret, selects the
	// namespaces whose compositions may be placed there.
	AnnotationNamespaceSelector = "compositor.dev/namespace-selector"
	// AnnotationApprovePlan, on a definition, approves the upgrade plan whose hash it
	// names (status.rollout.plan.hash).
	AnnotationApprovePlan = "compositor.dev/approve-plan"
	// AnnotationRolloutPaused set to "true" on a definition stops its rollout from
	// moving more compositions until it is removed or "false".
	AnnotationRolloutPaused = "compositor.dev/rollout-paused"
	// AnnotationRollbackTo, on a composition, asks for its spec and chart version to
	// be restored from the revision it names (a number, or "previous"); the mutating
	// webhook does it and removes the annotation, and the write is judged like any.
	AnnotationRollbackTo = "compositor.dev/rollback-to"
)

// Annotations Compositor writes.
const (
	// AnnotationConversionStash holds, on an object read through a served version, the
	// values that version cannot show, so that nothing is lost in a round trip.
	AnnotationConversionStash = "compositor.dev/conversion-data"
	// AnnotationConversionOrigin holds, on an object converted by declared conversion
	// rules, the values of the version it was converted from that the rules cannot give
	// back, so that converting it back loses nothing the other side did not change.
	AnnotationConversionOrigin = "compositor.dev/conversion-origin"
	// AnnotationPrefixConversions, followed by a served version's name, names the
	// annotation of a generated CRD that holds what that version's definition declares
	// about conversion: its chart version and its conversion steps, as JSON.
	AnnotationPrefixConversions = "conversions.compositor.dev/"
	// AnnotationReleaseSeal holds a Helm release record's seal: "v1:" and the hex
	// HMAC-SHA256 of what Compositor wrote.
	AnnotationReleaseSeal = "compositor.dev/release-seal"
	// AnnotationChartDigest holds the digest of the chart archive a Secret keeps.
	AnnotationChartDigest = "compositor.dev/chart-digest"
	// AnnotationChartName and AnnotationChartVersion name the chart an imported
	// chart's Secret holds.
	AnnotationChartName    = "compositor.dev/chart-name"
	AnnotationChartVersion = "compositor.dev/chart-version"
	// AnnotationKubeconfigRefused, on a target cluster's kubeconfig Secret, says why
	// the kubeconfig is refused.
	AnnotationKubeconfigRefused = "compositor.dev/kubeconfig-refused"
	// AnnotationSpecAuthor, on a composition, is the user who last changed its spec, as
	// the API server authenticated them: the mutating webhook writes it on every write
	// that changes the spec and keeps it on any other, whatever the write says. The
	// CompositionRevision of an install records it as its author.
	AnnotationSpecAuthor = "compositor.dev/spec-author"
)

// Labels.
const (
	// LabelCompositionVersion is the served version a composition is pinned to, which
	// selects the controller that owns it and so the chart it runs: set when it is
	// created, changed only by an explicit move of the label (see the mutating webhook).
	LabelCompositionVersion = "krateo.io/composition-version"
	// LabelManagedBy and ManagedBy mark the objects Compositor generates.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "compositor"
	// LabelName is the app.kubernetes.io/name of every generated controller pod.
	LabelName = "app.kubernetes.io/name"
	// LabelManaged marks the CRDs Compositor generates.
	LabelManaged = "compositor.dev/managed"
	// LabelDefinitionNamespace, LabelResource and LabelVersion together select the
	// generated objects of one definition version; LabelDefinitionName names the
	// definition.
	LabelDefinitionNamespace = "compositor.dev/definition-namespace"
	LabelDefinitionName      = "compositor.dev/definition-name"
	LabelResource            = "compositor.dev/resource"
	LabelVersion             = "compositor.dev/version"
	// LabelChartArchive marks the Secrets that keep chart archives.
	LabelChartArchive = "compositor.dev/chart-archive"
	// LabelImportedChart marks the Secrets that hold charts imported with compositor
	// import (imported://NAME charts); they are never pruned.
	LabelImportedChart = "compositor.dev/imported-chart"
	// LabelCompositionUID, on a Helm release record or a CompositionRevision, names
	// the composition whose release or revision it is.
	LabelCompositionUID = "compositor.dev/composition-uid"
	// LabelFingerprint, on a Helm release record, is the fingerprint of what the
	// release was installed from (the chart digest and the values).
	LabelFingerprint = "compositor.dev/fingerprint"
	// LabelCompositionName and LabelCompositionKind, with LabelCompositionUID, select
	// the CompositionRevisions of one composition (kubectl get compositionrevisions -l).
	LabelCompositionName = "compositor.dev/composition-name"
	LabelCompositionKind = "compositor.dev/composition-kind"
	// LabelReplica, on a Helm release record on a shared target cluster, names the
	// replica of Compositor that runs the operation.
	LabelReplica = "compositor.dev/replica"
)

// Finalizers.
const (
	// DefinitionFinalizer holds a CompositionDefinition until its generated objects
	// are removed.
	DefinitionFinalizer = "compositor.dev/definition"
	// CompositionFinalizer holds a composition until its releases are uninstalled.
	CompositionFinalizer = "compositor.dev/composition"
)

// FieldManager is Compositor's name in the managedFields of every object it writes:
// its own (CRDs, RBAC, webhook configurations) and those Helm applies for a release.
// It is the name Helm 3 gave the objects of releases it installed for Compositor (the
// binary's name), so that Helm 4's server-side apply takes those fields over.
const FieldManager = "compositor"
