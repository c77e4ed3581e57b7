package constraints

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// crdWrites counts the requests that write CRDs, dry runs apart, and the reads of
// CRDs, which tell how many syncs ran: every sync reads each constraint CRD once.
type crdWrites struct {
	client.Client

	mu      sync.Mutex
	writes  []string // "update name", one per write request, refused ones included
	dryRuns []string // the same, of dry runs
	gets    int
	// failing is a CRD whose creation fails as an API server in trouble answers.
	failing string
	// refusing is a CRD whose updates, dry runs included, fail with refusal.
	refusing string
	refusal  error
}

func (w *crdWrites) failUpdate(name string, refusal error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refusing, w.refusal = name, refusal
}

func (w *crdWrites) failCreate(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failing = name
}

func (w *crdWrites) record(verb string, obj client.Object, dryRun []string) {
	if _, ok := obj.(*apiextensionsv1.CustomResourceDefinition); !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(dryRun) > 0 {
		w.dryRuns = append(w.dryRuns, verb+" "+obj.GetName())
		return
	}
	w.writes = append(w.writes, verb+" "+obj.GetName())
}

func (w *crdWrites) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
		w.mu.Lock()
		w.gets++
		w.mu.Unlock()
	}
	return w.Client.Get(ctx, key, obj, opts...)
}

func (w *crdWrites) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	o := (&client.CreateOptions{}).ApplyOptions(opts)
	w.record("create", obj, o.DryRun)
	w.mu.Lock()
	failing := w.failing != "" && w.failing == obj.GetName()
	w.mu.Unlock()
	if failing {
		return apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	}
	return w.Client.Create(ctx, obj, opts...)
}

func (w *crdWrites) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	o := (&client.UpdateOptions{}).ApplyOptions(opts)
	w.record("update", obj, o.DryRun)
	w.mu.Lock()
	refusal := w.refusal
	if w.refusing != obj.GetName() {
		refusal = nil
	}
	w.mu.Unlock()
	if refusal != nil {
		return refusal
	}
	return w.Client.Update(ctx, obj, opts...)
}

func (w *crdWrites) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	o := (&client.PatchOptions{}).ApplyOptions(opts)
	w.record("patch", obj, o.DryRun)
	return w.Client.Patch(ctx, obj, patch, opts...)
}

func (w *crdWrites) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	o := (&client.DeleteOptions{}).ApplyOptions(opts)
	w.record("delete", obj, o.DryRun)
	return w.Client.Delete(ctx, obj, opts...)
}

// reset forgets what was counted.
func (w *crdWrites) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes, w.dryRuns = nil, nil
}

func (w *crdWrites) counts() (writes, dryRuns []string, gets int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes), slices.Clone(w.dryRuns), w.gets
}

// The library of the test: a template whose parameters have a structural schema, one
// without parameters, and one whose schema the API server refuses in a CRD (a property
// without a type), whose parameters the engine checks instead.
const (
	labelsTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: ctlabels}
spec:
  crd:
    spec:
      names: {kind: CtLabels}
      validation:
        openAPIV3Schema:
          type: object
          properties:
            labels: {type: array, items: {type: string}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package ctlabels
        violation[{"msg": "missing"}] {
          l := input.parameters.labels[_]
          not input.review.object.metadata.labels[l]
        }
`
	plainTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: ctplain}
spec:
  crd:
    spec:
      names: {kind: CtPlain}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package ctplain
        violation[{"msg": "no"}] { input.review.object.metadata.name == "forbidden" }
`
	looseTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: ctloose}
spec:
  crd:
    spec:
      names: {kind: CtLoose}
      validation:
        openAPIV3Schema:
          type: object
          properties:
            limit: {type: integer}
            anything: {}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package ctloose
        violation[{"msg": "over"}] { count(input.review.object.metadata.name) > input.parameters.limit }
`
)

func constraintsGVR(kind string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: gatekeeper.ConstraintsGroup, Version: constraintVersion, Resource: constraintResource(kind)}
}

func fromYAML(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
	return u
}

func constraintDoc(kind, name, params string) string {
	return fmt.Sprintf("apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: %s\nmetadata: {name: %s}\nspec:\n  match: {kinds: [{apiGroups: [\"\"], kinds: [Pod]}]}\n  parameters: %s\n", kind, name, params)
}

// running is a Controller started on a control plane.
type running struct {
	*Controller
	writes *crdWrites
	stop   func() // stops the controller and waits for Start to return
}

func startController(t *testing.T, cp *controlplane.ControlPlane, engine *policies.Engine, opts ...func(*Controller)) *running {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config)
	require.NoError(t, err)
	writes := &crdWrites{Client: cp.Client}
	c := &Controller{Dynamic: dyn, Client: writes, Engine: engine, Resync: 100 * time.Millisecond}
	for _, opt := range opts {
		opt(c)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		assert.NoError(t, <-done)
	}
	t.Cleanup(stop)
	return &running{Controller: c, writes: writes, stop: stop}
}

// waitSyncs waits until the controller has read the n constraint CRDs `syncs` more
// times, that is until at least that many syncs ran.
func (r *running) waitSyncs(t *testing.T, n, syncs int) {
	t.Helper()
	_, _, from := r.writes.counts()
	require.Eventually(t, func() bool {
		_, _, gets := r.writes.counts()
		return gets-from >= n*syncs
	}, 30*time.Second, 20*time.Millisecond, "%d syncs did not run", syncs)
}

func crdName(kind string) string { return constraintResource(kind) + "." + gatekeeper.ConstraintsGroup }

// resourceVersions are those of the constraint CRDs of kinds.
func resourceVersions(t *testing.T, c client.Client, kinds ...string) map[string]string {
	t.Helper()
	rvs := map[string]string{}
	for _, kind := range kinds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: crdName(kind)}, crd))
		rvs[kind] = crd.ResourceVersion
	}
	return rvs
}

// enforced is the engine's constraints, by kind/name.
func enforced(e *policies.Engine) map[string]*gatekeeper.Constraint {
	out := map[string]*gatekeeper.Constraint{}
	for _, c := range e.Constraints(policies.OriginObject).Constraints() {
		out[c.Kind+"/"+c.Name] = c
	}
	return out
}

// editCRD changes the constraint CRD of kind as someone other than Compositor would.
func editCRD(t *testing.T, c client.Client, kind string, edit func(*apiextensionsv1.CustomResourceDefinition)) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if !assert.NoError(ct, c.Get(context.Background(), client.ObjectKey{Name: crdName(kind)}, crd)) {
			return
		}
		edit(crd)
		assert.NoError(ct, c.Update(context.Background(), crd))
	}, 30*time.Second, 50*time.Millisecond)
}

// TestConstraintCRDsAreWrittenOnlyWhenWhatCompositorWantsChanges runs the controller
// against a real API server. Once the library is in force, syncs write no CRD: their
// resourceVersions stay, and no write request is sent at all, not even one the API
// server would find a no-op (a PUT of the spec it already stores leaves the
// resourceVersion as it was, so only the count of requests sees it); and they parse
// no constraint again. A constraint CRD edited by hand (a version no longer served,
// its schema, its labels, owner and names) is put back, with one write; a template's
// change is one write of its CRD; a controller that starts again writes nothing but a
// CRD written before the stored spec hash; a deleted constraint leaves the cache.
func TestConstraintCRDsAreWrittenOnlyWhenWhatCompositorWantsChanges(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, EnsureTemplateCRD(ctx, cp.Client))
	dyn, err := dynamic.NewForConfig(cp.Config)
	require.NoError(t, err)
	templates := dyn.Resource(TemplatesGVR)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := templates.List(ctx, metav1.ListOptions{Limit: 1})
		assert.NoError(c, err)
	}, time.Minute, 100*time.Millisecond)

	outer := t
	engine, err := policies.NewEngine(ctx, policies.Options{})
	require.NoError(t, err)
	ctl := startController(t, cp, engine)

	kinds := []string{"CtLabels", "CtPlain", "CtLoose"}
	for _, doc := range []string{labelsTemplate, plainTemplate, looseTemplate} {
		_, err := templates.Create(ctx, fromYAML(t, doc), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	constraintDocs := []string{
		constraintDoc("CtLabels", "need-team", "{labels: [team]}"),
		constraintDoc("CtPlain", "no-forbidden", "{}"),
		constraintDoc("CtLoose", "short-names", "{limit: 40}"),
		// The API server takes it (CtLoose's CRD has no parameters schema); the engine
		// refuses it.
		constraintDoc("CtLoose", "bad-limit", "{limit: many}"),
	}
	for _, doc := range constraintDocs {
		u := fromYAML(t, doc)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := dyn.Resource(constraintsGVR(u.GetKind())).Create(ctx, u, metav1.CreateOptions{})
			assert.NoError(c, err)
		}, time.Minute, 100*time.Millisecond)
	}
	require.Eventually(t, func() bool {
		return ctl.Ready(nil) == nil && len(enforced(engine)) == 3
	}, time.Minute, 50*time.Millisecond, "the library is not in force")
	assert.ElementsMatch(t, []string{"CtLabels/need-team", "CtPlain/no-forbidden", "CtLoose/short-names"}, mapsKeys(enforced(engine)))

	// stable asserts that `syncs` syncs write no CRD, change none and parse no
	// constraint again.
	stable := func(t *testing.T, r *running, syncs int) {
		t.Helper()
		r.waitSyncs(t, len(kinds), 2) // what was under way when called has ended
		r.writes.reset()
		before := resourceVersions(t, cp.Client, kinds...)
		parsed := enforced(engine)
		r.waitSyncs(t, len(kinds), syncs)
		writes, dryRuns, _ := r.writes.counts()
		assert.Empty(t, writes, "CRD writes at rest")
		assert.Empty(t, dryRuns, "CRD dry runs at rest")
		assert.Equal(t, before, resourceVersions(t, cp.Client, kinds...), "the CRDs changed at rest")
		for key, c := range enforced(engine) {
			assert.Same(t, parsed[key], c, "constraint %s was parsed again", key)
		}
	}

	t.Run("at rest, syncs write nothing", func(t *testing.T) {
		stable(t, ctl, 20)
	})

	t.Run("a CRD edited by hand is put back", func(t *testing.T) {
		ctl.writes.reset()
		editCRD(t, cp.Client, "CtLabels", func(crd *apiextensionsv1.CustomResourceDefinition) {
			for i := range crd.Spec.Versions {
				if crd.Spec.Versions[i].Name == "v1" {
					crd.Spec.Versions[i].Served = false
				}
			}
		})
		editCRD(t, cp.Client, "CtPlain", func(crd *apiextensionsv1.CustomResourceDefinition) {
			for i := range crd.Spec.Versions {
				spec := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"]
				ea := spec.Properties["enforcementAction"]
				ea.Enum = append(ea.Enum, apiextensionsv1.JSON{Raw: []byte(`"ignore"`)})
				spec.Properties["enforcementAction"] = ea
				crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"] = spec
			}
		})
		editCRD(t, cp.Client, "CtLoose", func(crd *apiextensionsv1.CustomResourceDefinition) {
			delete(crd.Labels, "gatekeeper.sh/constraint")
			crd.OwnerReferences = nil
			crd.Spec.Names.Categories = nil
		})
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, kind := range kinds {
				crd := &apiextensionsv1.CustomResourceDefinition{}
				if !assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Name: crdName(kind)}, crd)) {
					return
				}
				for _, v := range crd.Spec.Versions {
					assert.True(c, v.Served, "%s %s served", kind, v.Name)
					assert.Len(c, v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["enforcementAction"].Enum, 4, "%s %s enforcementAction", kind, v.Name)
				}
				assert.Equal(c, []string{"constraint", "constraints"}, crd.Spec.Names.Categories, kind)
				assert.Equal(c, "yes", crd.Labels["gatekeeper.sh/constraint"], kind)
				assert.Len(c, crd.OwnerReferences, 1, kind)
			}
		}, 30*time.Second, 50*time.Millisecond)
		writes, _, _ := ctl.writes.counts()
		assert.ElementsMatch(t, []string{"update " + crdName("CtLabels"), "update " + crdName("CtPlain"), "update " + crdName("CtLoose")}, writes,
			"one write puts each edited CRD back")
		stable(t, ctl, 10)
	})

	t.Run("a template's change is one write of its CRD", func(t *testing.T) {
		ctl.writes.reset()
		u, err := templates.Get(ctx, "ctlabels", metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, unstructured.SetNestedField(u.Object, map[string]any{"type": "integer"},
			"spec", "crd", "spec", "validation", "openAPIV3Schema", "properties", "minimum"))
		_, err = templates.Update(ctx, u, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Name: crdName("CtLabels")}, crd)) {
				params := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["parameters"]
				assert.Contains(c, params.Properties, "minimum")
			}
		}, 30*time.Second, 50*time.Millisecond)
		ctl.waitSyncs(t, len(kinds), 2)
		writes, dryRuns, _ := ctl.writes.counts()
		assert.Equal(t, []string{"update " + crdName("CtLabels")}, writes)
		assert.Equal(t, []string{"update " + crdName("CtLabels")}, dryRuns)
		stable(t, ctl, 10)
	})

	t.Run("a controller that starts again writes only a CRD of the version before", func(t *testing.T) {
		ctl.stop()
		// CtPlain's CRD as the version before annotationStoredSpecHash left it: it is
		// written once.
		editCRD(t, cp.Client, "CtPlain", func(crd *apiextensionsv1.CustomResourceDefinition) {
			delete(crd.Annotations, annotationStoredSpecHash)
		})
		rvs := resourceVersions(t, cp.Client, kinds...)
		ctl = startController(outer, cp, engine) // it runs on, for the next subtest
		require.Eventually(t, func() bool { return ctl.Ready(nil) == nil }, time.Minute, 50*time.Millisecond)
		ctl.waitSyncs(t, len(kinds), 10)
		writes, dryRuns, _ := ctl.writes.counts()
		assert.Equal(t, []string{"update " + crdName("CtPlain")}, writes)
		// The other request that is not a read: a new process does not know that the
		// API server refuses CtLoose's schema until it has tried, with a dry run.
		assert.ElementsMatch(t, []string{"update " + crdName("CtPlain"), "update " + crdName("CtLoose")}, dryRuns)
		now := resourceVersions(t, cp.Client, kinds...)
		assert.NotEqual(t, rvs["CtPlain"], now["CtPlain"])
		delete(rvs, "CtPlain")
		delete(now, "CtPlain")
		assert.Equal(t, rvs, now)
		stable(t, ctl, 10)
	})

	t.Run("a deleted constraint leaves the cache", func(t *testing.T) {
		require.NoError(t, dyn.Resource(constraintsGVR("CtLoose")).Delete(ctx, "bad-limit", metav1.DeleteOptions{}))
		require.NoError(t, dyn.Resource(constraintsGVR("CtPlain")).Delete(ctx, "no-forbidden", metav1.DeleteOptions{}))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.ElementsMatch(c, []string{"CtLabels/need-team", "CtLoose/short-names"}, mapsKeys(enforced(engine)))
		}, 30*time.Second, 50*time.Millisecond)
		ctl.waitSyncs(t, len(kinds), 2)
		ctl.stop() // the cache is the sync loop's: read it once that loop has ended
		var uids []types.UID
		for _, kind := range []string{"CtLabels", "CtLoose"} {
			list, err := dyn.Resource(constraintsGVR(kind)).List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			for _, item := range list.Items {
				uids = append(uids, item.GetUID())
			}
		}
		assert.ElementsMatch(t, uids, mapsKeys(ctl.parsed))
	})
}

func mapsKeys[K comparable, V any](m map[K]V) []K {
	var keys []K
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
