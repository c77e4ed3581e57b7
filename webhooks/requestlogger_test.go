package webhooks

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// A review's logger writes what controller-runtime's would, caller included, and adds
// nothing to the sink below until it writes.
func TestRequestLoggerWritesWhatTheDefaultWould(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{LogCaller: funcr.All})
	req := &admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "u-1", Namespace: "team-a", Name: "demo",
		Resource: metav1.GroupVersionResource{Group: "composition.krateo.io", Version: "v1", Resource: "fireworksapps"},
		UserInfo: authenticationv1.UserInfo{Username: "alice"},
	}}
	write := func(l logr.Logger) {
		l.WithName("check").WithValues("step", 1).Info("denied", "why", "x")
		l.Error(nil, "failed")
	}
	write(admission.DefaultLogConstructor(base, req))
	want := lines
	lines = nil
	write(requestLogger(base, req))
	assert.Equal(t, want, lines)
	assert.Len(t, lines, 2)

	counting := &countingSink{LogSink: base.GetSink()}
	_ = requestLogger(logr.New(counting), req).WithValues("step", 1)
	assert.Zero(t, counting.withValues, "nothing written, nothing added")
}

type countingSink struct {
	logr.LogSink
	withValues int
}

func (c *countingSink) WithValues(kv ...any) logr.LogSink {
	c.withValues++
	return c.LogSink.WithValues(kv...)
}
