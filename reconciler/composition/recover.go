package composition

import (
	"context"
	"fmt"
	"time"

	releasecommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"

	"github.com/compositor-dev/compositor/api/vocab"
)

// EventReleaseRecovered says that a release left pending by a process that ended in
// the middle of an operation was marked failed, so that the operation runs again.
const EventReleaseRecovered = "ReleaseRecovered"

// interruptedDescription is the description of a revision Compositor found pending and
// marked failed.
const interruptedDescription = "Interrupted while %s: the process running the operation ended before it; marked failed by Compositor, which runs the operation again"

// recoverInterrupted marks last failed when Helm left it pending (pending-install,
// pending-upgrade or pending-rollback), and returns the status it had; "" when it was
// not pending. Only the caller's process acts on the release: the work queue never
// runs one composition twice at once, only the leader runs controllers in the local
// cluster, and only the replica that engages a target cluster acts there; a pending
// revision seen before this process has started an operation was therefore left by a
// process that ended in the middle of one, but for a target cluster that just moved
// from another replica, which may still be running its last operation there
// (stillRunning waits for it). Helm itself would refuse every later operation on
// the release ("another operation is in progress"), forever.
func (h *Helm) recoverInterrupted(namespace string, last *release.Release) (releasecommon.Status, error) {
	if last == nil || last.Info == nil || !last.Info.Status.IsPending() {
		return "", nil
	}
	cfg, err := h.Actions(namespace)
	if err != nil {
		return "", err
	}
	stuck := last.Info.Status
	marked := *last
	info := *last.Info
	info.Status = releasecommon.StatusFailed
	info.Description = fmt.Sprintf(interruptedDescription, stuck)
	info.LastDeployed = time.Now()
	marked.Info = &info
	if err := cfg.Releases.Update(&marked); err != nil {
		return "", fmt.Errorf("marking the interrupted revision %d of release %s/%s failed: %w", last.Version, namespace, last.Name, err)
	}
	*last = marked
	return stuck, nil
}

// maxPending is how long a revision may stay pending on a shared target while the
// replica that started it runs still; past that it is taken for interrupted.
const maxPending = 30 * time.Minute

// stillRunning holds an attempt on s, a target cluster shared among replicas, while
// its last revision is pending and may still be running: the cluster moved here from
// the replica that started the operation (LabelReplica), which runs it to its end,
// and that replica still renews its Lease. Two operations at once would leave the
// release in a state neither meant. A revision this replica started, or one whose
// replica is gone, was interrupted.
func stillRunning(ctx context.Context, s site, last *release.Release) (attempt, bool) {
	if s.shared == nil || last == nil || last.Info == nil || !last.Info.Status.IsPending() {
		return attempt{}, false
	}
	by := last.Labels[vocab.LabelReplica]
	since := last.Info.LastDeployed
	if by == "" || by == s.shared.self || time.Since(since) > maxPending || !s.shared.alive(ctx, by) {
		return attempt{}, false
	}
	message := fmt.Sprintf("release %s%s has been %s since %s by replica %s of Compositor, which held the cluster before this one and runs still: it is looked at again in %s",
		last.Name, s.on(), last.Info.Status, since.UTC().Format(time.RFC3339), by, retryTarget)
	return attempt{reason: ReasonInstalling, message: message, requeue: retryTarget}, true
}

// hasInstallHooks reports whether rel's chart runs hooks on install, which an upgrade
// would not run.
func hasInstallHooks(rel *release.Release) bool {
	for _, hook := range rel.Hooks {
		for _, event := range hook.Events {
			if event == release.HookPreInstall || event == release.HookPostInstall {
				return true
			}
		}
	}
	return false
}
