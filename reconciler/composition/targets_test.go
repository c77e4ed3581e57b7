package composition

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/multicluster"
)

// A cluster that does not answer is held, for longer each time, and answers end the
// hold; what is not a silence (an answer that refuses) never holds it.
func TestTargetsHoldAClusterThatDoesNotAnswer(t *testing.T) {
	targets := &Targets{}
	cl := multicluster.Cluster{Name: "eu-1"}
	_, held := targets.held(cl, ReasonInstallFailed)
	assert.False(t, held)

	refused := &url.Error{Op: "Get", URL: "https://eu-1:6443/api", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	a := targets.observe(cl, failed(ReasonInstallFailed, fmt.Errorf("reading the history: %w", refused)))
	assert.Equal(t, retryTarget, a.requeue)
	fast, held := targets.held(cl, ReasonInstallFailed)
	require.True(t, held)
	assert.Contains(t, fast.message, "the cluster did not answer (reading the history: Get \"https://eu-1:6443/api\": dial tcp: connection refused); it is asked again after ")
	assert.Error(t, fast.err)
	assert.Equal(t, 2*retryTarget, targets.observe(cl, fast).requeue, "the hold doubles")
	for range 10 {
		a = targets.observe(cl, fast)
	}
	assert.Equal(t, maxHold, a.requeue, "up to maxHold")

	targets.observe(cl, attempt{ready: true})
	_, held = targets.held(cl, ReasonInstallFailed)
	assert.False(t, held, "an answer ends the hold")

	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "x", errors.New("no"))
	a = targets.observe(cl, failed(ReasonInstallFailed, forbidden))
	assert.Zero(t, a.requeue)
	_, held = targets.held(cl, ReasonInstallFailed)
	assert.False(t, held, "a refusal is an answer")
	for _, err := range []error{apierrors.NewServiceUnavailable("down"), apierrors.NewTimeoutError("slow", 1), context.DeadlineExceeded} {
		assert.True(t, unanswered(fmt.Errorf("wrapped: %w", err)), "%v", err)
	}
}
