package constraints

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// openWatches counts the requests a client sends and the watches it holds open, by
// the resource.
type openWatches struct {
	mu       sync.Mutex
	open     map[string]int
	requests map[string]int
}

func (w *openWatches) sent(resource string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.requests[resource]
}

func (w *openWatches) count(resource string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open[resource]
}

// wrap is a rest.Config's WrapTransport: a request with watch=true counts until its
// response body is closed.
func (w *openWatches) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resource := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
		w.mu.Lock()
		w.requests[resource]++
		w.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		if err != nil || req.URL.Query().Get("watch") != "true" {
			return resp, err
		}
		w.mu.Lock()
		w.open[resource]++
		w.mu.Unlock()
		resp.Body = &closeCounter{ReadCloser: resp.Body, close: func() {
			w.mu.Lock()
			w.open[resource]--
			w.mu.Unlock()
		}}
		return resp, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type closeCounter struct {
	io.ReadCloser
	once  sync.Once
	close func()
}

func (c *closeCounter) Close() error {
	c.once.Do(c.close)
	return c.ReadCloser.Close()
}

// events records the reasons of the events the controller sends, by object name.
type events struct {
	mu      sync.Mutex
	reasons map[string][]string
}

func (e *events) Eventf(regarding runtime.Object, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	name := regarding.(metav1.Object).GetName()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reasons[name] = append(e.reasons[name], reason)
}

func (e *events) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	e.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (e *events) of(name string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.reasons[name]...)
}

// createEventually creates doc with r, again until the API server serves its kind.
func createEventually(t *testing.T, r dynamic.ResourceInterface, doc string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := r.Create(context.Background(), fromYAML(t, doc), metav1.CreateOptions{})
		assert.NoError(c, err)
	}, time.Minute, 100*time.Millisecond)
}

// updateTemplate makes template name doc, again until the update does not conflict.
func updateTemplate(t *testing.T, templates dynamic.ResourceInterface, name, doc string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		u, err := templates.Get(context.Background(), name, metav1.GetOptions{})
		if !assert.NoError(c, err) {
			return
		}
		next := fromYAML(t, doc)
		next.SetResourceVersion(u.GetResourceVersion())
		_, err = templates.Update(context.Background(), next, metav1.UpdateOptions{})
		assert.NoError(c, err)
	}, time.Minute, 100*time.Millisecond)
}

// A deleted template's constraints are no longer watched: the informer of its kind
// stops. It used to run on for as long as the process, listing a CRD that was gone
// again and again (its reflector backs off from 0.8 s, so a few seconds see several
// lists). A template of that kind made again is watched again.
func TestADeletedTemplatesConstraintsAreNoLongerWatched(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, EnsureTemplateCRD(ctx, cp.Client))
	watches := &openWatches{open: map[string]int{}, requests: map[string]int{}}
	cfg := rest.CopyConfig(cp.Config)
	cfg.Wrap(watches.wrap)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	engine, err := policies.NewEngine(ctx, policies.Options{})
	require.NoError(t, err)
	startController(t, cp, engine, func(c *Controller) { c.Dynamic = dyn })
	templates := dyn.Resource(TemplatesGVR)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := templates.List(ctx, metav1.ListOptions{Limit: 1})
		assert.NoError(c, err)
	}, time.Minute, 100*time.Millisecond)

	create := func() {
		t.Helper()
		createEventually(t, templates, plainTemplate)
		createEventually(t, dyn.Resource(constraintsGVR("CtPlain")), constraintDoc("CtPlain", "no-forbidden", "{}"))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Contains(c, enforced(engine), "CtPlain/no-forbidden")
			assert.Equal(c, 1, watches.count("ctplain"))
		}, time.Minute, 50*time.Millisecond)
	}
	create()

	require.NoError(t, templates.Delete(ctx, "ctplain", metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, enforced(engine))
		assert.Zero(c, watches.count("ctplain"), "the watch of the deleted template's constraints")
		err := cp.Client.Get(ctx, client.ObjectKey{Name: crdName("CtPlain")}, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}})
		assert.True(c, apierrors.IsNotFound(err), "the CRD goes with its template: %v", err)
	}, time.Minute, 50*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // a request under way when the informer stopped
	before := watches.sent("ctplain")
	time.Sleep(5 * time.Second)
	assert.Equal(t, before, watches.sent("ctplain"), "requests for the constraints of a template that is gone")

	create()
}

// When the API server refuses for good to update a template's constraint CRD (the new
// version's schema is too large, say), the constraints the CRD already serves stay
// enforced, with the new version's code, as Gatekeeper keeps them; the template's
// status says the CRD was refused and that they stay.
func TestARefusedCRDUpdateKeepsTheConstraintsItServes(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, EnsureTemplateCRD(ctx, cp.Client))
	dyn, err := dynamic.NewForConfig(cp.Config)
	require.NoError(t, err)
	engine, err := policies.NewEngine(ctx, policies.Options{})
	require.NoError(t, err)
	recorded := &events{reasons: map[string][]string{}}
	ctl := startController(t, cp, engine, func(c *Controller) { c.Recorder = recorded })
	templates := dyn.Resource(TemplatesGVR)
	createEventually(t, templates, labelsTemplate)
	createEventually(t, dyn.Resource(constraintsGVR("CtLabels")), constraintDoc("CtLabels", "need-team", "{labels: [team]}"))
	// review is the messages the library in force gives a Pod without labels.
	review := func() []string {
		pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "namespace": "team-a"}}
		var out []string
		for _, r := range engine.Constraints(policies.OriginObject).Review(ctx, gatekeeper.SubjectOf(pod), &gatekeeper.Request{Operation: "CREATE"}) {
			out = append(out, r.Constraint.Name+": "+r.Msg)
		}
		return out
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"need-team: missing"}, review())
	}, time.Minute, 50*time.Millisecond)

	ctl.writes.failUpdate(crdName("CtLabels"), apierrors.NewRequestEntityTooLargeError("limit is 3145728"))
	edited := strings.Replace(labelsTemplate, `violation[{"msg": "missing"}]`, `violation[{"msg": "a label is missing"}]`, 1)
	edited = strings.Replace(edited, "labels: {type: array, items: {type: string}}", "labels: {type: array, items: {type: string}}\n            why: {type: string}", 1)
	updateTemplate(t, templates, "ctlabels", edited)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, []string{"need-team: a label is missing"}, review(), "the constraint, with the new code")
		created, errs, err := templateStatus(ctx, dyn, "ctlabels")
		if assert.NoError(c, err) && assert.Len(c, errs, 1) {
			assert.False(c, created)
			assert.Contains(c, errs[0], "create_error: cannot serve its constraints: ")
			assert.Contains(c, errs[0], "limit is 3145728")
			assert.Contains(c, errs[0], "the constraints its CRD already serves stay enforced")
		}
		assert.NoError(c, ctl.Ready(nil))
	}, time.Minute, 50*time.Millisecond)
	// The first version was said to be enforced; the second is said to be refused, and
	// not to be enforced as well.
	got := recorded.of("ctlabels")
	assert.Equal(t, 1, countOf(got, EventTemplateEnforced), "%v", got)
	assert.Positive(t, countOf(got, EventTemplateRefused), "%v", got)
	assert.Equal(t, EventTemplateRefused, got[len(got)-1])

	// Once the CRD can be written again, the status is clear, and the version is said
	// to be enforced.
	ctl.writes.failUpdate("", nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		created, errs, err := templateStatus(ctx, dyn, "ctlabels")
		if assert.NoError(c, err) {
			assert.True(c, created)
			assert.Empty(c, errs)
		}
		assert.Equal(c, []string{"need-team: a label is missing"}, review())
		assert.Equal(c, 2, countOf(recorded.of("ctlabels"), EventTemplateEnforced))
	}, time.Minute, 50*time.Millisecond)
}

func countOf(list []string, s string) int {
	n := 0
	for _, e := range list {
		if e == s {
			n++
		}
	}
	return n
}

// A template whose kind changes (here only its case, so its CRD's name stays) cannot
// have its CRD follow: the API server refuses to change a CRD's kind. The constraints
// that CRD serves are of the old kind, which no template has any more: they are not
// enforced, and their status and the template's say so, rather than saying they are
// enforced while the library drops them.
func TestAKindThatChangesLeavesNoConstraintSaidEnforced(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, EnsureTemplateCRD(ctx, cp.Client))
	dyn, err := dynamic.NewForConfig(cp.Config)
	require.NoError(t, err)
	engine, err := policies.NewEngine(ctx, policies.Options{})
	require.NoError(t, err)
	startController(t, cp, engine)
	templates := dyn.Resource(TemplatesGVR)
	createEventually(t, templates, plainTemplate)
	createEventually(t, dyn.Resource(constraintsGVR("CtPlain")), constraintDoc("CtPlain", "no-forbidden", "{}"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, enforced(engine), "CtPlain/no-forbidden")
	}, time.Minute, 50*time.Millisecond)

	updateTemplate(t, templates, "ctplain", strings.Replace(plainTemplate, "names: {kind: CtPlain}", "names: {kind: CtPLAIN}", 1))

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Empty(c, enforced(engine))
		created, errs, err := templateStatus(ctx, dyn, "ctplain")
		if assert.NoError(c, err) && assert.Len(c, errs, 1) {
			assert.False(c, created)
			assert.Contains(c, errs[0], "create_error: cannot serve its constraints: ")
			assert.Contains(c, errs[0], "its CRD still serves kind CtPlain, and constraints of that kind are not enforced")
		}
		got, err := dyn.Resource(constraintsGVR("CtPlain")).Get(ctx, "no-forbidden", metav1.GetOptions{})
		if !assert.NoError(c, err) {
			return
		}
		pods, _, _ := unstructured.NestedSlice(got.Object, "status", "byPod")
		if assert.Len(c, pods, 1) {
			pod := pods[0].(map[string]any)
			assert.Equal(c, false, pod["enforced"])
			assert.Contains(c, fmt.Sprint(pod["errors"]), "its kind CtPlain is not its template's, CtPLAIN")
		}
	}, time.Minute, 50*time.Millisecond)
}
