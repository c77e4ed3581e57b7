package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/ownership"
)

// indexedDefinitions is a cache of definitions with ownership's index: List honours a
// field selector on ownership.ServedIndex as the manager's cache does, with the
// index function ownership.IndexServed registers.
type indexedDefinitions struct {
	client.Reader
	defs  []corev1alpha1.CompositionDefinition
	index client.IndexerFunc
	err   error
	lists int
}

func newIndexedDefinitions(t *testing.T, defs ...corev1alpha1.CompositionDefinition) *indexedDefinitions {
	t.Helper()
	d := &indexedDefinitions{defs: defs}
	require.NoError(t, ownership.IndexServed(context.Background(), d))
	return d
}

func (d *indexedDefinitions) IndexField(_ context.Context, _ client.Object, field string, fn client.IndexerFunc) error {
	if field != ownership.ServedIndex {
		return errors.New("unexpected index " + field)
	}
	d.index = fn
	return nil
}

func (d *indexedDefinitions) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	d.lists++
	if d.err != nil {
		return d.err
	}
	o := (&client.ListOptions{}).ApplyOptions(opts)
	key, ok := "", false
	if o.FieldSelector != nil {
		key, ok = o.FieldSelector.RequiresExactMatch(ownership.ServedIndex)
	}
	if !ok {
		return errors.New("the status guard lists definitions through the index only")
	}
	out := list.(*corev1alpha1.CompositionDefinitionList)
	for i := range d.defs {
		if slices.Contains(d.index(&d.defs[i]), key) {
			out.Items = append(out.Items, d.defs[i])
		}
	}
	return nil
}

// servingDefinition is a definition in namespace whose status reports serving
// resource (kind) at version.
func servingDefinition(namespace, name, kind, resource, version string) corev1alpha1.CompositionDefinition {
	def := corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	def.Status.APIVersion, def.Status.Kind, def.Status.Resource = vocab.CompositionGroup+"/"+version, kind, resource
	return def
}

// statusWrite is the admission request the API server sends when user writes the
// status of the FireworksApp team-a/web through version.
func statusWrite(user, version string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:         "5d1e3c7a-0a44-4d3e-9d7e-2f1f4b8c9a10",
		Kind:        metav1.GroupVersionKind{Group: vocab.CompositionGroup, Version: version, Kind: "FireworksApp"},
		Resource:    metav1.GroupVersionResource{Group: vocab.CompositionGroup, Version: version, Resource: "fireworksapps"},
		SubResource: "status",
		Namespace:   "team-a",
		Name:        "web",
		Operation:   admissionv1.Update,
		UserInfo:    authUser(user),
	}}
}

// controllerOf is the user a definition's controller of version acts as: its
// ServiceAccount in Compositor's namespace.
func controllerOf(definitionNamespace, version string) string {
	return "system:serviceaccount:compositor-system:" + rbac.ServiceAccountName(definitionNamespace, "fireworksapps", version)
}

// TestOnlyCompositorWritesTheStatusOfCompositions decides, for each user, whether its
// write of a composition's status is admitted: Compositor's own user and the
// ServiceAccount, in Compositor's namespace, of the controller of the definition that
// owns the composition (ownership.For) are; anyone else is refused with a message
// naming the user, including the controller of another definition of the same version
// (another team's), a ServiceAccount named like a generated controller in any other
// namespace (the definition's own, where its tenants write), the controller of
// another version or kind, and cluster administrators.
func TestOnlyCompositorWritesTheStatusOfCompositions(t *testing.T) {
	const compositor = "system:serviceaccount:compositor-system:compositor"
	controller := controllerOf("fireworksapp-system", "v1-1-5")
	leaving := servingDefinition("leaving", "fireworksapp", "FireworksApp", "fireworksapps", "v1-1-5")
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	gone := servingDefinition("gone", "fireworksapp", "FireworksApp", "fireworksapps", "v0-9-0")
	gone.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	defs := newIndexedDefinitions(t,
		// The owner of v1-1-5 (the oldest): the compositions of namespaces without a
		// definition of their own are its.
		servingDefinition("fireworksapp-system", "fireworksapp-1-1-5", "FireworksApp", "fireworksapps", "v1-1-5"),
		// Another team's definition of the same version: its controller owns the
		// compositions of its namespace, and only those.
		servingDefinition("team-b", "fireworksapp", "FireworksApp", "fireworksapps", "v1-1-5"),
		// Being deleted: it owns nothing while another serves the version.
		leaving,
		// Being deleted, and nothing else serves its version: its controller still
		// uninstalls, and says so in the status.
		gone,
		// A namespace whose definition serves another version, another one whose
		// definition serves another kind.
		servingDefinition("upgraded", "fireworksapp", "FireworksApp", "fireworksapps", "v1-1-6"),
		servingDefinition("others", "otherapp", "OtherApp", "otherapps", "v1-1-5"),
	)
	guard := &StatusGuard{Users: []string{compositor}, Definitions: defs, Namespace: "compositor-system"}

	for _, tc := range []struct {
		name, user, namespace, version string
		allowed                        bool
	}{
		{"Compositor itself", compositor, "team-a", "v1-1-5", true},
		{"the controller of the definition that owns the composition", controller, "team-a", "v1-1-5", true},
		{"another team's controller, in its own namespace", controllerOf("team-b", "v1-1-5"), "team-b", "v1-1-5", true},
		{"the controller of the version in the namespace that serves the next one", controllerOf("upgraded", "v1-1-6"), "team-a", "v1-1-6", true},
		{"the controller of a definition being deleted, when none serves its version", controllerOf("gone", "v0-9-0"), "team-a", "v0-9-0", true},

		{"the tenant", "alice", "team-a", "v1-1-5", false},
		{"a cluster administrator", "kubernetes-admin", "team-a", "v1-1-5", false},
		{"nobody", "", "team-a", "v1-1-5", false},
		{"another team's controller, for a composition its definition does not own", controllerOf("team-b", "v1-1-5"), "team-a", "v1-1-5", false},
		{"the owner's controller, in a namespace with a definition of its own", controller, "team-b", "v1-1-5", false},
		{"the controller of a definition being deleted while another serves", controllerOf("leaving", "v1-1-5"), "team-a", "v1-1-5", false},
		{"the controller's name in the definition's namespace", "system:serviceaccount:fireworksapp-system:" + rbac.ServiceAccountName("fireworksapp-system", "fireworksapps", "v1-1-5"), "team-a", "v1-1-5", false},
		{"the name the controller had in the definition's namespace", "system:serviceaccount:fireworksapp-system:fireworksapps-v1-1-5-controller", "team-a", "v1-1-5", false},
		{"a tenant's ServiceAccount named like the controller", "system:serviceaccount:team-a:fireworksapps-v1-1-5-controller", "team-a", "v1-1-5", false},
		{"another ServiceAccount of the definition's namespace", "system:serviceaccount:fireworksapp-system:default", "team-a", "v1-1-5", false},
		{"the controller writing through a version its definition does not serve", controller, "team-a", "v1-1-6", false},
		{"the controller of a version no longer served there", controllerOf("upgraded", "v1-1-5"), "team-a", "v1-1-5", false},
		{"the controller of another kind", "system:serviceaccount:compositor-system:" + rbac.ServiceAccountName("others", "otherapps", "v1-1-5"), "team-a", "v1-1-5", false},
		{"a name like the controller's for another kind", controllerOf("others", "v1-1-5"), "team-a", "v1-1-5", false},
		{"a user whose name only begins like the controller's", controller + ":x", "team-a", "v1-1-5", false},
		{"Compositor's namespace, another name", "system:serviceaccount:compositor-system:fireworksapps-v1-1-5-controller", "team-a", "v1-1-5", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := statusWrite(tc.user, tc.version)
			req.Namespace = tc.namespace
			resp := guard.Handle(context.Background(), req)
			if tc.allowed {
				assert.True(t, resp.Allowed, "refused: %+v", resp.Result)
				return
			}
			require.False(t, resp.Allowed)
			require.NotNil(t, resp.Result)
			assert.Equal(t, int32(http.StatusForbidden), resp.Result.Code)
			assert.Equal(t, metav1.StatusReasonForbidden, resp.Result.Reason)
			assert.Equal(t, `user "`+tc.user+`" may not write the status of FireworksApp `+tc.namespace+`/web: only Compositor writes the status of compositions`, resp.Result.Message)
		})
	}
}

func TestStatusGuardFailsClosed(t *testing.T) {
	ctx := context.Background()
	controller := controllerOf("fireworksapp-system", "v1-1-5")

	t.Run("definitions that cannot be read", func(t *testing.T) {
		defs := newIndexedDefinitions(t)
		defs.err = errors.New("cache not started")
		resp := (&StatusGuard{Definitions: defs}).Handle(ctx, statusWrite(controller, "v1-1-5"))
		require.False(t, resp.Allowed)
		assert.Equal(t, int32(http.StatusInternalServerError), resp.Result.Code)
		assert.Contains(t, resp.Result.Message, `cannot tell whether "`+controller+`" may write the status of FireworksApp team-a/web`)
		assert.Contains(t, resp.Result.Message, "cache not started")
	})
	t.Run("no definitions known: only Compositor's users", func(t *testing.T) {
		guard := &StatusGuard{Users: []string{"compositor"}}
		assert.False(t, guard.Handle(ctx, statusWrite(controller, "v1-1-5")).Allowed)
		assert.True(t, guard.Handle(ctx, statusWrite("compositor", "v1-1-5")).Allowed)
	})
	t.Run("Compositor's own writes need no read", func(t *testing.T) {
		defs := newIndexedDefinitions(t)
		assert.True(t, (&StatusGuard{Users: []string{"compositor"}, Definitions: defs}).Handle(ctx, statusWrite("compositor", "v1-1-5")).Allowed)
		assert.Zero(t, defs.lists)
	})
	t.Run("not a status write of a composition", func(t *testing.T) {
		req := statusWrite("compositor", "v1-1-5")
		req.Kind.Group = "apps"
		resp := (&StatusGuard{Users: []string{"compositor"}}).Handle(ctx, req)
		require.False(t, resp.Allowed)
		assert.Equal(t, int32(http.StatusBadRequest), resp.Result.Code)
		req = statusWrite("compositor", "v1-1-5")
		req.SubResource = ""
		assert.False(t, (&StatusGuard{Users: []string{"compositor"}}).Handle(ctx, req).Allowed)
	})
}

// TestStatusWritesSkipTheCompositionChecks sends a status write to /validate and
// /mutate, as a configuration whose rules named the status would: the composition
// checks, the schema and the policies never run on it (they judge what a status write
// cannot change), and the decision is the status guard's.
func TestStatusWritesSkipTheCompositionChecks(t *testing.T) {
	ctx := context.Background()
	defs := newIndexedDefinitions(t, servingDefinition("fireworksapp-system", "fireworksapp-1-1-5", "FireworksApp", "fireworksapps", "v1-1-5"))
	called := 0
	v := &Validator{
		Compositions: Chain{CheckFunc(func(context.Context, *Request) (field.ErrorList, admission.Warnings) {
			called++
			return field.ErrorList{field.Forbidden(field.NewPath("spec"), "checked")}, nil
		})},
		status: &StatusGuard{Users: []string{"compositor"}, Definitions: defs, Namespace: "compositor-system"},
	}
	write := func(user string) admission.Request {
		req := statusWrite(user, "v1-1-5")
		obj := []byte(`{"apiVersion":"composition.krateo.io/v1-1-5","kind":"FireworksApp","metadata":{"name":"web","namespace":"team-a"},"spec":{"replicaCount":2},"status":{"fingerprint":"x"}}`)
		req.Object.Raw, req.OldObject.Raw = obj, obj
		return req
	}

	assert.True(t, v.Handle(ctx, write(controllerOf("fireworksapp-system", "v1-1-5"))).Allowed)
	refused := v.Handle(ctx, write("alice"))
	require.False(t, refused.Allowed)
	assert.Contains(t, refused.Result.Message, `user "alice" may not write the status of FireworksApp team-a/web`)
	assert.Zero(t, called, "the composition checks ran on a status write")

	resp := (&Validator{Compositions: v.Compositions}).Handle(ctx, write("alice"))
	assert.False(t, resp.Allowed, "without a status guard, status writes are refused")
	assert.Zero(t, called)

	m := &Mutator{Definitions: noObjects{}, Screen: v}
	resp = m.Handle(ctx, write("alice"))
	assert.True(t, resp.Allowed)
	assert.Empty(t, resp.Patches, "a status write is not defaulted")
}

func TestStatusPathIsServed(t *testing.T) {
	defs := newIndexedDefinitions(t)
	handler := guard(&StatusGuard{Users: []string{"compositor"}, Definitions: defs})
	for user, allowed := range map[string]bool{"compositor": true, "alice": false} {
		req := compositionRequest("UPDATE", composition(nil), composition(nil))
		req["subResource"] = "status"
		req["userInfo"] = map[string]any{"username": user}
		code, review := serve(t, handler, review(t, req))
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, allowed, review.Response.Allowed, user)
	}
}

func authUser(name string) authenticationv1.UserInfo {
	return authenticationv1.UserInfo{Username: name}
}

// serve posts body to h and decodes the AdmissionReview it answers.
func serve(t *testing.T, h http.Handler, body []byte) (int, *admissionv1.AdmissionReview) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, StatusPath, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	out := &admissionv1.AdmissionReview{}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), out), w.Body.String())
	require.NotNil(t, out.Response, w.Body.String())
	return w.Code, out
}

// While Compositor's own record says a version's identity moves (its old controller
// Deployment hands over to the new one), the old controller, which runs as the
// ServiceAccount of the definition's namespace, writes the status of the compositions
// its definition owns as before: no window in which its writes are refused. Not
// before, not after, not for compositions its definition does not own, and never on
// the word of anything but that record in Compositor's namespace.
func TestFormerControllerWritesStatusOnlyWhileMoving(t *testing.T) {
	former := "system:serviceaccount:fireworksapp-system:fireworksapps-v1-1-5-controller"
	defs := newIndexedDefinitions(t,
		servingDefinition("fireworksapp-system", "fireworksapp-1-1-5", "FireworksApp", "fireworksapps", "v1-1-5"),
		servingDefinition("team-b", "fireworksapp", "FireworksApp", "fireworksapps", "v1-1-5"),
	)
	record := func(data map[string]string) client.Reader {
		return fake.NewClientBuilder().WithObjects(&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "compositor-system", Name: rbac.IdentityMovesConfigMap}, Data: data}).Build()
	}
	moving := record(map[string]string{
		rbac.MoveKey("fireworksapp-system", "fireworksapps", "v1-1-5"): "moving",
		rbac.MoveKey("team-b", "fireworksapps", "v1-1-5"):              "moving",
	})
	for _, tc := range []struct {
		name, user, namespace string
		records               client.Reader
		allowed               bool
	}{
		{"while it moves, for a composition its definition owns", former, "team-a", moving, true},
		{"while team-b's moves, team-b's former controller in team-b", "system:serviceaccount:team-b:fireworksapps-v1-1-5-controller", "team-b", moving, true},

		{"while it moves, for a composition its definition does not own", former, "team-b", moving, false},
		{"another team's former controller, while it moves", "system:serviceaccount:team-b:fireworksapps-v1-1-5-controller", "team-a", moving, false},
		{"after the move", former, "team-a", record(map[string]string{}), false},
		{"an identity the record only removes", former, "team-a", record(map[string]string{rbac.MoveKey("fireworksapp-system", "fireworksapps", "v1-1-5"): "remove"}), false},
		{"no record", former, "team-a", fake.NewClientBuilder().Build(), false},
		{"no reader of records", former, "team-a", nil, false},
		{"another ServiceAccount of the definition's namespace, while it moves", "system:serviceaccount:fireworksapp-system:default", "team-a", moving, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guard := &StatusGuard{Users: []string{"compositor"}, Definitions: defs, Namespace: "compositor-system", Records: tc.records}
			req := statusWrite(tc.user, "v1-1-5")
			req.Namespace = tc.namespace
			resp := guard.Handle(context.Background(), req)
			assert.Equal(t, tc.allowed, resp.Allowed, "%+v", resp.Result)
		})
	}
}
