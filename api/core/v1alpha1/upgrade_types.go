package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Approval policies of an upgrade (UpgradePolicy.Approval).
const (
	// ApprovalOnRisk: a plan with compositions the new version refuses, or objects
	// the upgrade would delete, waits for approval; any other moves at once.
	ApprovalOnRisk = "OnRisk"
	// ApprovalAlways: every plan waits for approval.
	ApprovalAlways = "Always"
	// ApprovalNever: no plan waits.
	ApprovalNever = "Never"
)

// Phases of a rollout (Rollout.Phase).
const (
	// RolloutAwaitingApproval: the plan waits for compositor.dev/approve-plan to
	// name its hash.
	RolloutAwaitingApproval = "AwaitingApproval"
	// RolloutProgressing: compositions are being moved, batch after batch.
	RolloutProgressing = "Progressing"
	// RolloutPaused: compositor.dev/rollout-paused is "true"; nothing more moves.
	RolloutPaused = "Paused"
	// RolloutComplete: every composition the new version admits has moved and is
	// Ready on it.
	RolloutComplete = "Complete"
	// RolloutRollingBack: more moved compositions failed than the policy tolerates;
	// those moved are being moved back.
	RolloutRollingBack = "RollingBack"
	// RolloutRolledBack: the compositions the rollout moved were moved back. Nothing
	// moves again until the chart version changes.
	RolloutRolledBack = "RolledBack"
)

// UpgradePolicy says how the compositions of a definition move to a new chart
// version: when the move waits for a person, how many move at a time, what stops it,
// and how many revisions each composition keeps. Every field has a default, so a
// definition without it upgrades as the defaults say.
type UpgradePolicy struct {
	// Approval is when a plan waits for compositor.dev/approve-plan to name its hash:
	// OnRisk (the default) when the new version refuses compositions or the upgrade
	// deletes objects, Always, or Never.
	// +kubebuilder:validation:Enum=OnRisk;Always;Never
	// +optional
	Approval string `json:"approval,omitempty"`

	// Canary is how many compositions move first; the rest wait until they are Ready
	// on the new version. Default 1.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Canary *int32 `json:"canary,omitempty"`

	// BatchSize is how many compositions move in each later step. Default 10.
	// +kubebuilder:validation:Minimum=1
	// +optional
	BatchSize *int32 `json:"batchSize,omitempty"`

	// MaxFailures is how many moved compositions may fail before the rollout stops and
	// moves back every composition it moved. Default 0: the first failure stops it.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxFailures *int32 `json:"maxFailures,omitempty"`

	// ProgressDeadlineSeconds is how long a moved composition may take to be Ready on
	// the new version before it counts as failed. Default 600.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`

	// RevisionHistoryLimit is how many revisions each composition keeps
	// (CompositionRevisions). Default 10.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`

	// DeprecatedVersionGracePeriod is how long a served version the definition no
	// longer uses stays served, deprecated, for the clients that still speak it: counted
	// from when its last composition moved to the version served now (or, for a version
	// that had none, from when the definition moved on). Writes through it land on the
	// version served now. Default 72h: past kubectl's 6-hour discovery cache and past a
	// weekend, so that an upgrade made on a Friday breaks no GitOps sync or script on
	// Monday. 0s removes it at once.
	// +optional
	DeprecatedVersionGracePeriod *metav1.Duration `json:"deprecatedVersionGracePeriod,omitempty"`
}

// DefaultDeprecatedVersionGracePeriod is UpgradePolicy.DeprecatedVersionGracePeriod's
// default.
const DefaultDeprecatedVersionGracePeriod = 72 * time.Hour

// DeprecatedVersionGracePeriod is def's UpgradePolicy.DeprecatedVersionGracePeriod, or
// its default; never negative.
func (def *CompositionDefinition) DeprecatedVersionGracePeriod() time.Duration {
	if def.Spec.Upgrade == nil || def.Spec.Upgrade.DeprecatedVersionGracePeriod == nil {
		return DefaultDeprecatedVersionGracePeriod
	}
	return max(def.Spec.Upgrade.DeprecatedVersionGracePeriod.Duration, 0)
}

// ServedChart is a served version of a definition and the chart it serves it from.
type ServedChart struct {
	// APIVersion is the served version, e.g. composition.krateo.io/v1-1-5.
	APIVersion string `json:"apiVersion"`
	// Chart is the chart version, e.g. 1.1.5.
	Chart string `json:"chart"`
	// Digest of the chart archive.
	Digest string `json:"digest"`
	// PackageURL is the URL the archive was downloaded from.
	// +optional
	PackageURL string `json:"packageUrl,omitempty"`
	// Verification is what the check of this chart's signature proved, when the
	// definition asks for one.
	// +optional
	Verification *ChartVerificationStatus `json:"verification,omitempty"`
	// DeprecatedSince, on a retained version, is when its last composition moved to
	// the version served now: since then it stays served, deprecated, for the clients
	// that still speak it, with no controller, RBAC or kept chart archive.
	// +optional
	DeprecatedSince *metav1.Time `json:"deprecatedSince,omitempty"`
	// RemoveAfter is when a deprecated version stops being served: DeprecatedSince
	// plus spec.upgrade.deprecatedVersionGracePeriod.
	// +optional
	RemoveAfter *metav1.Time `json:"removeAfter,omitempty"`
}

// Deprecated tells whether the version is only kept served for its clients
// (DeprecatedSince is set).
func (s ServedChart) Deprecated() bool { return s.DeprecatedSince != nil }

// PlanSummary is what moving the compositions to the new chart version would do (the
// whole plan: compositor plan DEFINITION).
type PlanSummary struct {
	// Hash names the plan: compositor.dev/approve-plan approves it by this value.
	Hash string `json:"hash"`
	// ViewDigest is the digest of the view of the plan Compositor wrote in the
	// definition's namespace (ConfigMap compositor-plan-<definition>), which that
	// namespace's tenants may write: compositor plan shows the view only when it
	// digests to this value, which only Compositor writes.
	// +optional
	ViewDigest string `json:"viewDigest,omitempty"`
	// ToMove is the number of compositions the plan moves.
	ToMove int32 `json:"toMove"`
	// Refused is the number the new version refuses: they stay where they are.
	Refused int32 `json:"refused"`
	// Additions, Deletions and Changes count the objects the upgrades would create,
	// delete and change.
	Additions int32 `json:"additions"`
	Deletions int32 `json:"deletions"`
	Changes   int32 `json:"changes"`
	// RefusedCompositions are "namespace/name: why" of the first refused ones.
	// +optional
	RefusedCompositions []string `json:"refusedCompositions,omitempty"`
	// DeletedObjects are "namespace/name: Kind namespace/name" of the first objects
	// the upgrades would delete.
	// +optional
	DeletedObjects []string `json:"deletedObjects,omitempty"`
	// RBACGained and RBACLost are the resource types the new version's controller
	// may manage and the old one's could, and the reverse.
	// +optional
	RBACGained []string `json:"rbacGained,omitempty"`
	// +optional
	RBACLost []string `json:"rbacLost,omitempty"`
	// Truncated is true when the lists above hold only the first entries.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
}

// MovedComposition is a composition a rollout moved.
type MovedComposition struct {
	// Name is "namespace/name".
	Name string `json:"name"`
	// Generation is its metadata.generation once moved: a composition whose spec
	// changed since is its owner's to fix, and its failure does not count against the
	// rollout.
	Generation int64 `json:"generation"`
	// At is when it moved: its deadline runs from then.
	At metav1.Time `json:"at"`
}

// Rollout is the progress of moving a definition's compositions from one chart
// version to another.
type Rollout struct {
	// From and To are the chart versions; FromVersion and ToVersion their served
	// versions.
	From        string `json:"from"`
	To          string `json:"to"`
	FromVersion string `json:"fromVersion"`
	ToVersion   string `json:"toVersion"`
	// ToDigest is the digest of the chart moved to: a rollout that was rolled back
	// starts again only for other content.
	ToDigest string `json:"toDigest"`

	// Phase is AwaitingApproval, Progressing, Paused, Complete, RollingBack or
	// RolledBack.
	Phase string `json:"phase"`
	// Message says what the rollout waits for, or why it stopped.
	// +optional
	Message string `json:"message,omitempty"`

	// Plan summarizes the plan the rollout follows.
	Plan PlanSummary `json:"plan"`

	// Record is the ConfigMap ("namespace/name") of Compositor's namespace that keeps
	// the rollout's every composition, of every namespace: those still to move, those
	// moved (and when), failed and stayed, with the reasons. Only the platform reads it;
	// Compositor reads the rollout back from it, never from the lists below. Set once
	// the rollout moves.
	// +optional
	Record string `json:"record,omitempty"`

	// Pending are "namespace/name" of the compositions of the definition's namespace
	// still to move, in the order they move; PendingCount counts those of every
	// namespace. A composition created after the plan is not in it, and stays where
	// it is.
	// +optional
	Pending []string `json:"pending,omitempty"`
	// +optional
	PendingCount int32 `json:"pendingCount,omitempty"`
	// Moved are the compositions of the definition's namespace this rollout moved;
	// MovedCount counts those of every namespace.
	// +optional
	Moved []MovedComposition `json:"moved,omitempty"`
	// +optional
	MovedCount int32 `json:"movedCount,omitempty"`
	// Ready is how many of the moved compositions, of every namespace, are Ready on the
	// new version.
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// Failed are "namespace/name: why" of moved compositions of the definition's
	// namespace that failed; FailedCount counts those of every namespace.
	// +optional
	Failed []string `json:"failed,omitempty"`
	// +optional
	FailedCount int32 `json:"failedCount,omitempty"`
	// Stayed are "namespace/name: why" of compositions of the definition's namespace
	// that stay on the old version: the new version refused their move; StayedCount
	// counts those of every namespace.
	// +optional
	Stayed []string `json:"stayed,omitempty"`
	// +optional
	StayedCount int32 `json:"stayedCount,omitempty"`

	// StartTime and CompletionTime bound the rollout.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}
