package constraints

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// A library where one template is refused: its kind names no CRD (it does not
// compile), a CRD of its kind's name is someone else's (its constraints cannot be
// served), its Rego stops compiling after a version that did, or it reads
// data.inventory before it opts in.
const (
	badKindTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8s.bad}
spec:
  crd: {spec: {names: {kind: K8s.Bad}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package k8sbad
        violation[{"msg": "bad"}] { true }
`
	foreignTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: ctforeign}
spec:
  crd: {spec: {names: {kind: CtForeign}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package ctforeign
        violation[{"msg": "foreign"}] { true }
`
	evolvingTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: ctevolving}
spec:
  crd: {spec: {names: {kind: CtEvolving}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package ctevolving
        violation[{"msg": "evolving"}] { input.review.object.metadata.name == "x" }
`
	inventoryTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: ctinventory}
spec:
  crd: {spec: {names: {kind: CtInventory}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package ctinventory
        violation[{"msg": "twice"}] {
          other := data.inventory.namespace[input.review.namespace][_].Pod[input.review.object.metadata.name]
          other.metadata.uid != input.review.object.metadata.uid
        }
`
)

// templateStatus is the errors of template name's status, as "code: message", and
// its created.
func templateStatus(ctx context.Context, dyn dynamic.Interface, name string) (created bool, errs []string, err error) {
	u, err := dyn.Resource(TemplatesGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, nil, err
	}
	created, _, _ = unstructured.NestedBool(u.Object, "status", "created")
	pods, _, _ := unstructured.NestedSlice(u.Object, "status", "byPod")
	for _, p := range pods {
		list, _, _ := unstructured.NestedSlice(p.(map[string]any), "errors")
		for _, e := range list {
			e := e.(map[string]any)
			errs = append(errs, e["code"].(string)+": "+e["message"].(string))
		}
	}
	return created, errs, nil
}

// TestARefusedTemplateHoldsUpNothingElse: each way a template can be refused is said
// in its status, and the controller is ready, enforces the other templates'
// constraints and writes them to the mirror all the same. A template that stops
// compiling stays in force in its last good version, after a restart too; adding the
// inventory annotation takes effect without a change of spec. Constraints say in
// their status whether they are enforced, and their CRDs refuse what Gatekeeper's do.
func TestARefusedTemplateHoldsUpNothingElse(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, EnsureTemplateCRD(ctx, cp.Client))
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "compositor-system"}}))
	dyn, err := dynamic.NewForConfig(cp.Config)
	require.NoError(t, err)
	templates := dyn.Resource(TemplatesGVR)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := templates.List(ctx, metav1.ListOptions{Limit: 1})
		assert.NoError(c, err)
	}, time.Minute, 100*time.Millisecond)

	// Someone else's CRD where CtForeign's constraints would be served.
	foreign := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: crdName("CtForeign")},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gatekeeper.ConstraintsGroup, Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "CtForeign", ListKind: "CtForeignList", Plural: "ctforeign", Singular: "ctforeign"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1beta1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}},
			}},
		},
	}
	require.NoError(t, cp.Client.Create(ctx, foreign))

	start := func() (*running, *policies.Engine) {
		engine, err := policies.NewEngine(ctx, policies.Options{})
		require.NoError(t, err)
		r := startController(t, cp, engine, func(c *Controller) { c.MirrorNamespace = "compositor-system" })
		return r, engine
	}
	ctl, engine := start()
	for _, doc := range []string{badKindTemplate, foreignTemplate, plainTemplate, evolvingTemplate, inventoryTemplate} {
		_, err := templates.Create(ctx, fromYAML(t, doc), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	createConstraint := func(doc string) {
		t.Helper()
		u := fromYAML(t, doc)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := dyn.Resource(constraintsGVR(u.GetKind())).Create(ctx, u, metav1.CreateOptions{})
			assert.NoError(c, err)
		}, time.Minute, 100*time.Millisecond)
	}
	createConstraint(constraintDoc("CtPlain", "no-forbidden", "{}"))
	createConstraint(constraintDoc("CtEvolving", "no-x", "{}"))

	t.Run("the refusals are in the templates' status, and the rest is in force", func(t *testing.T) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NoError(c, ctl.Ready(nil))
			assert.ElementsMatch(c, []string{"CtPlain/no-forbidden", "CtEvolving/no-x"}, mapsKeys(enforced(engine)))
			created, errs, err := templateStatus(ctx, dyn, "k8s.bad")
			if assert.NoError(c, err) && assert.Len(c, errs, 1) {
				assert.False(c, created)
				assert.Contains(c, errs[0], "compile_error: spec.crd.spec.names.kind \"K8s.Bad\" cannot name a CRD")
			}
			created, errs, err = templateStatus(ctx, dyn, "ctforeign")
			if assert.NoError(c, err) && assert.Len(c, errs, 1) {
				assert.False(c, created)
				assert.Contains(c, errs[0], "create_error: cannot serve its constraints: CRD ctforeign.constraints.gatekeeper.sh exists and is not Compositor's")
			}
			created, errs, err = templateStatus(ctx, dyn, "ctinventory")
			if assert.NoError(c, err) && assert.Len(c, errs, 1) {
				assert.False(c, created)
				assert.Contains(c, errs[0], "unsupported: ")
				assert.Contains(c, errs[0], gatekeeper.AnnotationInventory)
			}
			created, errs, err = templateStatus(ctx, dyn, "ctplain")
			if assert.NoError(c, err) {
				assert.True(c, created)
				assert.Empty(c, errs)
			}
		}, time.Minute, 100*time.Millisecond)
		lib, err := DecodeMirror(readMirror(t, cp.Client))
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"CtPlain/no-forbidden", "CtEvolving/no-x"}, libraryKeys(lib), "the mirror is written")
	})

	t.Run("constraints say whether they are enforced", func(t *testing.T) {
		// The API server takes it (labelSelector is not typed in the CRD, as in
		// Gatekeeper's); the engine refuses it.
		refused := fromYAML(t, constraintDoc("CtPlain", "bad-selector", "{}"))
		require.NoError(t, unstructured.SetNestedField(refused.Object, map[string]any{
			"matchExpressions": []any{map[string]any{"key": "team", "operator": "Near"}},
		}, "spec", "match", "labelSelector"))
		_, err := dyn.Resource(constraintsGVR("CtPlain")).Create(ctx, refused, metav1.CreateOptions{})
		require.NoError(t, err)
		u := fromYAML(t, constraintDoc("CtPlain", "bad-namespace", "{}"))
		require.NoError(t, unstructured.SetNestedStringSlice(u.Object, []string{"Kube*System"}, "spec", "match", "namespaces"))
		_, err = dyn.Resource(constraintsGVR("CtPlain")).Create(ctx, u, metav1.CreateOptions{})
		require.True(t, apierrors.IsInvalid(err), "a glob Gatekeeper's CRDs refuse is refused by the API server: %v", err)
		assert.ErrorContains(t, err, "spec.match.namespaces[0]")

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for name, want := range map[string]bool{"no-forbidden": true, "bad-selector": false} {
				got, err := dyn.Resource(constraintsGVR("CtPlain")).Get(ctx, name, metav1.GetOptions{})
				if !assert.NoError(c, err) {
					return
				}
				pods, _, _ := unstructured.NestedSlice(got.Object, "status", "byPod")
				if assert.Len(c, pods, 1, name) {
					assert.Equal(c, want, pods[0].(map[string]any)["enforced"], name)
					assert.Equal(c, string(got.GetUID()), pods[0].(map[string]any)["constraintUID"], name)
					errs, _, _ := unstructured.NestedSlice(pods[0].(map[string]any), "errors")
					if want {
						assert.Empty(c, errs, name)
					} else if assert.Len(c, errs, 1, name) {
						assert.Contains(c, errs[0].(map[string]any)["message"], "spec.match.labelSelector", name)
					}
				}
			}
		}, time.Minute, 100*time.Millisecond)
	})

	t.Run("the inventory annotation takes effect without a change of spec", func(t *testing.T) {
		u, err := templates.Get(ctx, "ctinventory", metav1.GetOptions{})
		require.NoError(t, err)
		generation := u.GetGeneration()
		u.SetAnnotations(map[string]string{gatekeeper.AnnotationInventory: "release"})
		u, err = templates.Update(ctx, u, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.Equal(t, generation, u.GetGeneration(), "an annotation is not a new generation")
		createConstraint(constraintDoc("CtInventory", "unique-pods", "{}"))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Contains(c, mapsKeys(enforced(engine)), "CtInventory/unique-pods")
			created, errs, err := templateStatus(ctx, dyn, "ctinventory")
			if assert.NoError(c, err) {
				assert.True(c, created)
				assert.Empty(c, errs)
			}
		}, time.Minute, 100*time.Millisecond)

		// Taking the opt-in away is the administrator's decision: the version that
		// had it does not stay in force.
		u, err = templates.Get(ctx, "ctinventory", metav1.GetOptions{})
		require.NoError(t, err)
		u.SetAnnotations(nil)
		_, err = templates.Update(ctx, u, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NotContains(c, mapsKeys(enforced(engine)), "CtInventory/unique-pods")
			created, errs, err := templateStatus(ctx, dyn, "ctinventory")
			if assert.NoError(c, err) && assert.Len(c, errs, 1) {
				assert.False(c, created)
				assert.Contains(c, errs[0], "unsupported: ")
				assert.NotContains(c, errs[0], "stays in force")
			}
		}, time.Minute, 100*time.Millisecond)
	})

	t.Run("a template that stops compiling stays in force in its last good version, after a restart too", func(t *testing.T) {
		u, err := templates.Get(ctx, "ctevolving", metav1.GetOptions{})
		require.NoError(t, err)
		good := u.GetGeneration()
		require.NoError(t, unstructured.SetNestedField(u.Object, []any{map[string]any{
			"target": gatekeeper.AdmissionTarget, "rego": "package ctevolving\nviolation[{\"msg\": \"x\"}] {\n",
		}}, "spec", "targets"))
		_, err = templates.Update(ctx, u, metav1.UpdateOptions{})
		require.NoError(t, err)
		inForce := func() {
			t.Helper()
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				assert.NoError(c, ctl.Ready(nil))
				assert.Contains(c, mapsKeys(enforced(engine)), "CtEvolving/no-x")
				created, errs, err := templateStatus(ctx, dyn, "ctevolving")
				if assert.NoError(c, err) && assert.Len(c, errs, 1) {
					assert.False(c, created)
					assert.Contains(c, errs[0], "compile_error: rego:")
					// The same on every replica, whether it kept that version in
					// memory or read it from the mirror at start.
					assert.Contains(c, errs[0], "(generation "+strconv.FormatInt(good, 10)+", the last version that compiled, stays in force)")
				}
			}, time.Minute, 100*time.Millisecond)
		}
		inForce()

		ctl.stop()
		ctl, engine = start()
		inForce()
		// What the new process enforces is that version, not merely a name.
		v := engine.Constraints(policies.OriginObject)
		require.NotNil(t, v)
		assert.Contains(t, libraryKeys(v), "CtEvolving/no-x")
	})

	t.Run("a CRD write that fails for now holds up nothing", func(t *testing.T) {
		ctl.writes.failCreate(crdName("CtFlaky"))
		flaky := strings.NewReplacer("ctforeign", "ctflaky", "CtForeign", "CtFlaky").Replace(foreignTemplate)
		_, err := templates.Create(ctx, fromYAML(t, flaky), metav1.CreateOptions{})
		require.NoError(t, err)
		ctl.waitSyncs(t, 1, 3)
		// The library is complete all the same: a new constraint reaches the mirror.
		createConstraint(constraintDoc("CtEvolving", "no-x-again", "{}"))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			lib, err := DecodeMirror(readMirror(t, cp.Client))
			if assert.NoError(c, err) {
				assert.Contains(c, libraryKeys(lib), "CtEvolving/no-x-again")
			}
		}, time.Minute, 100*time.Millisecond)
		err = cp.Client.Get(ctx, client.ObjectKey{Name: crdName("CtFlaky")}, &apiextensionsv1.CustomResourceDefinition{})
		require.True(t, apierrors.IsNotFound(err), "the CRD could not be written: %v", err)

		// Once the API server takes it, the kind is served and its constraints enforced.
		ctl.writes.failCreate("")
		createConstraint(constraintDoc("CtFlaky", "flaky", "{}"))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Contains(c, mapsKeys(enforced(engine)), "CtFlaky/flaky")
		}, time.Minute, 100*time.Millisecond)
	})

	t.Run("a deleted template's constraint CRD goes, without a garbage collector", func(t *testing.T) {
		// envtest runs no kube-controller-manager, as compositor dev does not.
		require.NoError(t, templates.Delete(ctx, "ctplain", metav1.DeleteOptions{}))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			err := cp.Client.Get(ctx, client.ObjectKey{Name: crdName("CtPlain")}, &apiextensionsv1.CustomResourceDefinition{})
			assert.True(c, apierrors.IsNotFound(err), "CRD still there: %v", err)
			assert.NotContains(c, mapsKeys(enforced(engine)), "CtPlain/no-forbidden")
		}, time.Minute, 100*time.Millisecond)
		// Someone else's CRD of a deleted template's kind stays.
		require.NoError(t, templates.Delete(ctx, "ctforeign", metav1.DeleteOptions{}))
		ctl.waitSyncs(t, 1, 3)
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: crdName("CtForeign")}, &apiextensionsv1.CustomResourceDefinition{}))
	})
}

func readMirror(t *testing.T, c client.Client) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "compositor-system", Name: rbac.ConstraintsConfigMap}, cm))
	return cm
}

func libraryKeys(lib *gatekeeper.Library) []string {
	var keys []string
	for _, c := range lib.Constraints() {
		keys = append(keys, c.Kind+"/"+c.Name)
	}
	return keys
}

// Which failures to write a constraint CRD are the template's for good (the API server
// refused the request itself: it is said in the status, and the other templates go on)
// and which may pass on a later sync.
func TestCRDRefusals(t *testing.T) {
	gr := schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}
	for err, refused := range map[error]bool{
		apierrors.NewRequestEntityTooLargeError("limit is 3145728"):                    true,
		apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "CRD"}, "x", nil): true,
		apierrors.NewBadRequest("bad"):                                                 true,
		apierrors.NewForbidden(gr, "x", errors.New("no")):                              true,
		fmt.Errorf("CRD x %w", errNotCompositors):                                      true,
		fmt.Errorf("CRD x: %w", errNamesNotAccepted):                                   true,
		apierrors.NewConflict(gr, "x", errors.New("changed")):                          false,
		apierrors.NewTooManyRequests("later", 1):                                       false,
		apierrors.NewTimeoutError("slow", 1):                                           false,
		apierrors.NewInternalError(errors.New("etcd")):                                 false,
		apierrors.NewServiceUnavailable("starting"):                                    false,
		errors.New("connection refused"):                                               false,
	} {
		assert.Equal(t, refused, crdRefused(err), "%v", err)
	}
}
