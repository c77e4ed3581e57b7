package composition

import (
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/release"
	helmtime "helm.sh/helm/v3/pkg/time"
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
// (stillRunning waits for that). Helm itself would refuse every later operation on
// the release ("another operation is in progress"), forever.
func (h *Helm) recoverInterrupted(namespace string, last *release.Release) (release.Status, error) {
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
	info.Status = release.StatusFailed
	info.Description = fmt.Sprintf(interruptedDescription, stuck)
	info.LastDeployed = helmtime.Now()
	marked.Info = &info
	if err := cfg.Releases.Update(&marked); err != nil {
		return "", fmt.Errorf("marking the interrupted revision %d of release %s/%s failed: %w", last.Version, namespace, last.Name, err)
	}
	*last = marked
	return stuck, nil
}

// stillRunning holds an attempt on s, a target cluster shared among replicas, while
// the last revision there is pending and younger than s.handover: the replica that
// held the cluster before this one may still be running that operation (Helm runs it
// to its end once started), and two at once would leave the release in a state
// neither meant.
func stillRunning(s site, last *release.Release) (attempt, bool) {
	if s.handover <= 0 || last == nil || last.Info == nil || !last.Info.Status.IsPending() {
		return attempt{}, false
	}
	age := time.Since(last.Info.LastDeployed.Time)
	if age >= s.handover {
		return attempt{}, false
	}
	wait := s.handover - age
	message := fmt.Sprintf("release %s%s has been %s since %s, perhaps still by the replica of Compositor that held the cluster before this one: it is looked at again in %s",
		last.Name, s.on(), last.Info.Status, last.Info.LastDeployed.UTC().Format(time.RFC3339), wait.Round(time.Second))
	return attempt{reason: ReasonInstalling, message: message, requeue: wait}, true
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
