package composition

import (
	"fmt"

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
// runs one composition twice at once, and only the leader runs controllers; a pending
// revision seen before this process has started an operation was therefore left by a
// process that ended in the middle of one. Helm itself would refuse every later
// operation on the release ("another operation is in progress"), forever.
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
