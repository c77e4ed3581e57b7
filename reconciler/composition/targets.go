// Target clusters, as the composition controller uses them (Targets): this file owns
// the Helm built per engaged cluster (helm, rebuilt when the cluster is engaged again),
// the hold of a cluster that does not answer (held, observe, unanswered: from
// retryTarget, doubling up to maxHold), what is said of a registered cluster that
// cannot be used (notEngaged, secret), and the replicas that share the clusters
// (replicas). The check of a target's rights is in rights.go, status.clusters in
// clusterstatus.go, installing and uninstalling there in placement.go, the work of a
// replica that does not lead in follow.go.

package composition

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/compositor-dev/compositor/multicluster"
)

const (
	// retryTarget is how soon a cluster that cannot be used yet (not engaged) is
	// looked at again, and the first hold of one that does not answer (observe).
	retryTarget = 10 * time.Second
	// targetTimeout bounds each request to a target cluster, so that one that does
	// not answer holds a worker at most that long, once per hold.
	targetTimeout = 30 * time.Second
)

// Targets are the target clusters compositions are placed on (package multicluster),
// with one Helm per engaged cluster, built on first use and rebuilt when the cluster is
// engaged again (its kubeconfig rotated).
type Targets struct {
	Clusters *multicluster.Clusters
	Log      logr.Logger
	// Sharded: the replicas of Compositor share the clusters (multicluster.Options.Shard),
	// each engaging its own. A registered cluster not engaged here, whose kubeconfig is
	// usable, is another replica's: that replica installs there and writes its entry of
	// status.clusters.
	Sharded bool
	// Seal seals the release records written on the target clusters.
	Seal *ReleaseSeal

	mu      sync.Mutex
	helms   map[string]targetHelm   // by cluster: helm
	granted map[rightsKey]time.Time // rights found sufficient: checkRights (rights.go)
	silent  map[string]silence      // by cluster, those held for not answering: held, observe
}

type targetHelm struct {
	done <-chan struct{}
	helm *Helm
}

// helm returns Helm acting as the identity of cl's kubeconfig.
func (t *Targets) helm(cl multicluster.Cluster) (*Helm, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.helms[cl.Name]; ok && h.done == cl.Done() {
		return h.helm, nil
	}
	cfg := cl.Config()
	if cfg.Timeout == 0 {
		cfg.Timeout = targetTimeout
	}
	log := t.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	h, err := NewHelm(cfg, t.Seal, log.WithValues("cluster", cl.Name))
	if err != nil {
		return nil, fmt.Errorf("building Helm for cluster %s: %w", cl.Name, err)
	}
	if t.helms == nil {
		t.helms = map[string]targetHelm{}
	}
	// What was built for engagements that ended goes.
	for name, old := range t.helms {
		select {
		case <-old.done:
			delete(t.helms, name)
		default:
		}
	}
	t.helms[cl.Name] = targetHelm{done: cl.Done(), helm: h}
	return h, nil
}

// A cluster that does not answer is not asked again for a while: every composition
// placed there would otherwise hold a worker for as long as a request takes to fail.
// The hold doubles from retryTarget up to maxHold while the cluster stays silent,
// and ends when it answers or is engaged again.
const maxHold = time.Minute

type silence struct {
	done     <-chan struct{}
	failures int
	until    time.Time
	err      error
}

// held returns a failed attempt at once while cl is held for not answering.
func (t *Targets) held(cl multicluster.Cluster, reason string) (attempt, bool) {
	t.mu.Lock()
	s, ok := t.silent[cl.Name]
	t.mu.Unlock()
	if !ok || s.done != cl.Done() || !time.Now().Before(s.until) {
		return attempt{}, false
	}
	err := fmt.Errorf("the cluster did not answer (%w); it is asked again after %s", s.err, s.until.UTC().Format(time.RFC3339))
	return attempt{reason: reason, message: err.Error(), err: err, requeue: time.Until(s.until)}, true
}

// observe notes whether an attempt on cl got an answer, and when cl did not, holds it
// and has the attempt retried when the hold ends.
func (t *Targets) observe(cl multicluster.Cluster, a attempt) attempt {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.err == nil || !unanswered(a.err) {
		delete(t.silent, cl.Name)
		return a
	}
	s := t.silent[cl.Name]
	if s.done != cl.Done() {
		s = silence{done: cl.Done()}
	}
	s.failures++
	s.err = a.err
	hold := min(retryTarget<<min(s.failures-1, 10), maxHold)
	s.until = time.Now().Add(hold)
	if t.silent == nil {
		t.silent = map[string]silence{}
	}
	t.silent[cl.Name] = s
	a.requeue = hold
	return a
}

// unanswered tells the errors of a cluster that did not answer (refused or timed-out
// connections, an unreachable address, an overloaded or unavailable API server) from
// its answers.
func unanswered(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.DeadlineExceeded) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)
}

// notEngaged says why a registered cluster cannot be used.
func (t *Targets) notEngaged(ctx context.Context, name string) string {
	if why := t.Clusters.Unusable(ctx, name); why != "" {
		return "the cluster cannot be used: " + why
	}
	return "the cluster's kubeconfig Secret is there, but the cluster is not engaged yet: its kubeconfig was just written or rotated"
}

// secret is the kubeconfig Secret of cluster name, as events name it.
func (t *Targets) secret(name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: t.Clusters.Namespace(), Name: name}}
}

// replicas are those sharing the clusters, nil when they are not shared.
func (t *Targets) replicas() *replicas {
	if !t.Sharded {
		return nil
	}
	return &replicas{self: t.Clusters.Replica(), alive: t.Clusters.ReplicaAlive}
}
