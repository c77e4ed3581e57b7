package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// noObjects is a reader of an empty cluster. Handlers need a reader to be built; the
// tests here stop before any read, or only need "nothing else exists".
type noObjects struct{ client.Reader }

func (noObjects) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

func (noObjects) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

func handlers() map[string]http.Handler {
	return map[string]http.Handler{
		MutatePath:   guard(&Mutator{Definitions: noObjects{}}),
		ValidatePath: guard(&Validator{Compositions: compositionChecks(noObjects{}, nil, "")}),
	}
}

// post sends body to the handler of path and decodes the AdmissionReview it answers.
func post(t testing.TB, path string, body []byte, contentType string) (int, *admissionv1.AdmissionReview) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	w := httptest.NewRecorder()
	handlers()[path].ServeHTTP(w, r)
	review := &admissionv1.AdmissionReview{}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), review), "the answer is not an AdmissionReview: %s", w.Body.String())
	require.NotNil(t, review.Response, "the answer has no response: %s", w.Body.String())
	return w.Code, review
}

func review(t testing.TB, req map[string]any) []byte {
	t.Helper()
	body, err := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
	require.NoError(t, err)
	return body
}

func compositionRequest(op string, object, oldObject map[string]any) map[string]any {
	req := map[string]any{
		"uid":       "b0d7b6e4-2b1a-4a9e-9d5e-0c5a1d2e3f40",
		"kind":      map[string]any{"group": vocab.CompositionGroup, "version": "v1-1-5", "kind": "FireworksApp"},
		"resource":  map[string]any{"group": vocab.CompositionGroup, "version": "v1-1-5", "resource": "fireworksapps"},
		"name":      "demo",
		"namespace": "default",
		"operation": op,
		"userInfo":  map[string]any{"username": "alice"},
	}
	if object != nil {
		req["object"] = object
	}
	if oldObject != nil {
		req["oldObject"] = oldObject
	}
	return req
}

func composition(annotations map[string]any) map[string]any {
	metadata := map[string]any{"name": "demo", "namespace": "default"}
	if annotations != nil {
		metadata["annotations"] = annotations
	}
	return map[string]any{
		"apiVersion": vocab.CompositionGroup + "/v1-1-5",
		"kind":       "FireworksApp",
		"metadata":   metadata,
		"spec":       map[string]any{"replicaCount": 2},
	}
}

func TestBadInputGetsAClearRefusal(t *testing.T) {
	unknownKind := compositionRequest("CREATE", map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "x"}}, nil)
	unknownKind["kind"] = map[string]any{"group": "apps", "version": "v1", "kind": "Deployment"}
	noObject := compositionRequest("CREATE", nil, nil)
	notAnObject := compositionRequest("UPDATE", nil, nil)
	notAnObject["object"] = []any{1, 2}
	notAnObject["oldObject"] = composition(nil)

	for _, tc := range []struct {
		name        string
		body        []byte
		contentType string
		wantHTTP    int
		wantCode    int32
		wantMessage string
	}{
		{"malformed JSON", []byte(`{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {`), "application/json", http.StatusBadRequest, http.StatusBadRequest, "the body is not an AdmissionReview: unexpected end of JSON input"},
		{"empty body", nil, "application/json", http.StatusBadRequest, http.StatusBadRequest, "the request body is empty"},
		{"review without request", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), "application/json", http.StatusBadRequest, http.StatusBadRequest, "the AdmissionReview has no request"},
		{"request without uid and kind", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`), "application/json", http.StatusOK, http.StatusBadRequest, "its request lacks uid, kind or operation"},
		{"wrong apiVersion", []byte(`{"apiVersion":"admission.k8s.io/v9","kind":"AdmissionReview","request":{"uid":"x"}}`), "application/json", http.StatusBadRequest, http.StatusBadRequest, `got apiVersion "admission.k8s.io/v9"`},
		{"not a review", []byte(`{"apiVersion":"v1","kind":"Pod"}`), "application/json", http.StatusBadRequest, http.StatusBadRequest, `expected an AdmissionReview of admission.k8s.io/v1, got apiVersion "v1" kind "Pod"`},
		{"wrong content type", review(t, compositionRequest("CREATE", composition(nil), nil)), "text/plain", http.StatusUnsupportedMediaType, http.StatusUnsupportedMediaType, `content type "text/plain" is not supported`},
		{"body over the cap", bytes.Repeat([]byte(" "), MaxRequestBytes+1), "application/json", http.StatusRequestEntityTooLarge, http.StatusRequestEntityTooLarge, "the limit is 3145728"},
		{"unknown kind", review(t, unknownKind), "application/json", http.StatusOK, http.StatusBadRequest, "compositor does not admit Deployment.apps/v1"},
		{"create without object", review(t, noObject), "application/json", http.StatusOK, http.StatusBadRequest, "request.object is required for CREATE"},
		{"object that is not an object", review(t, notAnObject), "application/json", http.StatusOK, http.StatusBadRequest, "request.object is not a JSON object"},
	} {
		for _, path := range []string{MutatePath, ValidatePath} {
			t.Run(tc.name+path, func(t *testing.T) {
				code, review := post(t, path, tc.body, tc.contentType)
				assert.Equal(t, tc.wantHTTP, code)
				assert.False(t, review.Response.Allowed)
				require.NotNil(t, review.Response.Result)
				assert.Equal(t, tc.wantCode, review.Response.Result.Code)
				assert.Contains(t, review.Response.Result.Message, tc.wantMessage)
			})
		}
	}
}

func TestMutateDefaultsAComposition(t *testing.T) {
	_, resp := post(t, MutatePath, review(t, compositionRequest("CREATE", composition(nil), nil)), "application/json")
	require.True(t, resp.Response.Allowed, "%v", resp.Response.Result)
	var patch []map[string]any
	require.NoError(t, json.Unmarshal(resp.Response.Patch, &patch))
	assert.ElementsMatch(t, []map[string]any{
		{"op": "add", "path": "/metadata/annotations", "value": map[string]any{
			"krateo.io/release-name": "demo",
			"krateo.io/paused":       "false",
			// The requesting user wrote the spec.
			"compositor.dev/spec-author": "alice",
		}},
		{"op": "add", "path": "/metadata/labels", "value": map[string]any{
			"krateo.io/composition-version": "v1-1-5",
		}},
	}, patch, "only metadata is defaulted, never spec")
}

func TestMutateKeepsTheReleaseNameOfAnUpdate(t *testing.T) {
	old := composition(map[string]any{"krateo.io/release-name": "original", "krateo.io/paused": "true"})
	_, resp := post(t, MutatePath, review(t, compositionRequest("UPDATE", composition(nil), old)), "application/json")
	require.True(t, resp.Response.Allowed)
	assert.Contains(t, string(resp.Response.Patch), `"krateo.io/release-name":"original"`)
	assert.Contains(t, string(resp.Response.Patch), `"krateo.io/paused":"false"`, "an absent pause annotation defaults to false")
}

func TestValidateCollectsEveryViolation(t *testing.T) {
	old := composition(map[string]any{"krateo.io/release-name": "original", "krateo.io/paused": "false"})
	changed := composition(map[string]any{"krateo.io/release-name": "Not_Valid", "krateo.io/paused": "yes"})
	_, resp := post(t, ValidatePath, review(t, compositionRequest("UPDATE", changed, old)), "application/json")
	require.False(t, resp.Response.Allowed)
	result := resp.Response.Result
	assert.Equal(t, int32(http.StatusUnprocessableEntity), result.Code)
	assert.Equal(t, "Invalid", string(result.Reason))
	for _, want := range []string{
		`metadata.annotations[krateo.io/release-name]: Invalid value: "Not_Valid": must be a valid Helm release name`,
		`metadata.annotations[krateo.io/release-name]: Invalid value: "Not_Valid": field is immutable: the Helm release is "original"`,
		`metadata.annotations[krateo.io/paused]: Unsupported value: "yes": supported values: "true", "false"`,
	} {
		assert.Contains(t, result.Message, want)
	}
	assert.Len(t, result.Details.Causes, 3)
}

func TestValidateRefusesAPlacementThatSelectsNothing(t *testing.T) {
	for raw, reason := range map[string]string{
		"":             "is empty",
		"   ":          "is empty",
		"env in (prod": "is not a valid label selector",
		"=prod":        "is not a valid label selector",
	} {
		t.Run(raw, func(t *testing.T) {
			obj := composition(map[string]any{"krateo.io/release-name": "demo", "compositor.dev/placement": raw})
			_, resp := post(t, ValidatePath, review(t, compositionRequest("CREATE", obj, nil)), "application/json")
			require.False(t, resp.Response.Allowed)
			assert.Contains(t, resp.Response.Result.Message, "metadata.annotations[compositor.dev/placement]: Invalid value: ")
			assert.Contains(t, resp.Response.Result.Message, reason)
		})
	}
	for _, raw := range []string{"env=prod", "env in (prod,staging),region!=us", "gpu"} {
		obj := composition(map[string]any{"krateo.io/release-name": "demo", "compositor.dev/placement": raw})
		_, resp := post(t, ValidatePath, review(t, compositionRequest("CREATE", obj, nil)), "application/json")
		assert.True(t, resp.Response.Allowed, "placement %q: %v", raw, resp.Response.Result)
	}
}

func TestValidateWarnsWhenAPausedCompositionIsDeleted(t *testing.T) {
	paused := composition(map[string]any{"krateo.io/release-name": "demo", "krateo.io/paused": "true"})
	_, resp := post(t, ValidatePath, review(t, compositionRequest("DELETE", nil, paused)), "application/json")
	require.True(t, resp.Response.Allowed)
	require.Len(t, resp.Response.Warnings, 1)
	assert.Equal(t, `FireworksApp default/demo is paused: its deletion waits until krateo.io/paused is "false"`, resp.Response.Warnings[0])

	running := composition(map[string]any{"krateo.io/release-name": "demo", "krateo.io/paused": "false"})
	_, resp = post(t, ValidatePath, review(t, compositionRequest("DELETE", nil, running)), "application/json")
	require.True(t, resp.Response.Allowed)
	assert.Empty(t, resp.Response.Warnings)
}

func TestConfigurationsCoverOnlyCompositorGroups(t *testing.T) {
	mutating, validating, err := Configurations(ConfigurationOptions{
		Endpoint:       Endpoint{URL: "https://127.0.0.1:9443"},
		CABundle:       []byte("bundle"),
		TimeoutSeconds: 5,
	})
	require.NoError(t, err)

	require.Len(t, mutating.Webhooks, 1)
	m := mutating.Webhooks[0]
	assert.Equal(t, "https://127.0.0.1:9443/mutate", *m.ClientConfig.URL)
	assert.Equal(t, []string{vocab.CompositionGroup}, m.Rules[0].APIGroups)

	require.Len(t, validating.Webhooks, 2)
	v := validating.Webhooks[0]
	assert.Equal(t, "https://127.0.0.1:9443/validate", *v.ClientConfig.URL)
	assert.ElementsMatch(t, []string{vocab.CompositionGroup, "core.krateo.io", "policy.compositor.dev"}, v.Rules[0].APIGroups)
	assert.Equal(t, []string{"*"}, v.Rules[0].APIVersions)
	assert.Equal(t, []string{"*"}, v.Rules[0].Resources)
	// The status of compositions, and nothing else, goes to the status webhook.
	s := validating.Webhooks[1]
	assert.Equal(t, StatusWebhookName, s.Name)
	assert.Equal(t, "https://127.0.0.1:9443"+StatusPath, *s.ClientConfig.URL)
	require.Len(t, s.Rules, 1)
	assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}, s.Rules[0].Operations)
	assert.Equal(t, []string{vocab.CompositionGroup}, s.Rules[0].APIGroups)
	assert.Equal(t, []string{"*"}, s.Rules[0].APIVersions)
	assert.Equal(t, []string{"*/status"}, s.Rules[0].Resources)
	for _, w := range []struct {
		failure, match, side string
		timeout              int32
		versions             []string
		bundle               []byte
	}{
		{string(*m.FailurePolicy), string(*m.MatchPolicy), string(*m.SideEffects), *m.TimeoutSeconds, m.AdmissionReviewVersions, m.ClientConfig.CABundle},
		{string(*v.FailurePolicy), string(*v.MatchPolicy), string(*v.SideEffects), *v.TimeoutSeconds, v.AdmissionReviewVersions, v.ClientConfig.CABundle},
		{string(*s.FailurePolicy), string(*s.MatchPolicy), string(*s.SideEffects), *s.TimeoutSeconds, s.AdmissionReviewVersions, s.ClientConfig.CABundle},
	} {
		assert.Equal(t, "Fail", w.failure)
		assert.Equal(t, "Equivalent", w.match)
		assert.Equal(t, "None", w.side)
		assert.Equal(t, int32(5), w.timeout)
		assert.Equal(t, []string{"v1"}, w.versions)
		assert.Equal(t, []byte("bundle"), w.bundle)
	}

	svc := &admissionregistrationv1.ServiceReference{Namespace: "compositor-system", Name: "compositor"}
	for _, bad := range []Endpoint{{}, {URL: "http://127.0.0.1:9443"}, {URL: "https://x", Service: svc}} {
		_, _, err := Configurations(ConfigurationOptions{Endpoint: bad})
		assert.Error(t, err, "%+v", bad)
	}
}

// denyAll is a handler pair whose judge knows the 1.1.5 sample chart and one policy
// that denies every composition.
func denyAll(t *testing.T) (*Mutator, *Validator) {
	t.Helper()
	ctx := context.Background()
	engine, err := policies.NewEngine(ctx, policies.Options{DisabledBuiltins: policies.BuiltinIDs()})
	require.NoError(t, err)
	require.NoError(t, engine.Set(ctx, policies.Policy{
		Name: "deny-all", Origin: policies.OriginObject, File: "deny-all.rego",
		Rego:  "package denyall\n\ndeny contains \"nothing is allowed\"\n",
		Match: policyv1alpha1.Match{Kinds: []policyv1alpha1.KindMatcher{{Group: vocab.CompositionGroup, Kind: "*"}}},
	}))
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	return newHandlers(Options{
		Cached: oneDefinition{},
		Live:   noObjects{},
		Judge:  policies.NewJudge(policies.JudgeOptions{Engine: engine}),
		Charts: fixedChart{chart: ch},
	})
}

// The mutating webhook denies a write that breaks the chart's schema, with the policies'
// verdict in the same denial; any other write it leaves to the validating webhook, which
// sees the object after every mutating webhook.
func TestMutateDeniesWritesThatBreakTheSchema(t *testing.T) {
	ctx := context.Background()
	mutator, validator := denyAll(t)
	named := map[string]any{"krateo.io/release-name": "demo", "krateo.io/paused": "false"}

	resp := mutator.Handle(ctx, admissionRequest(t, compositionRequest("CREATE", withReplicas(composition(named), 11), nil)))
	require.False(t, resp.Allowed)
	assert.Equal(t, int32(http.StatusUnprocessableEntity), resp.Result.Code)
	assert.Equal(t, "spec.replicaCount: must be <= 10 (values.schema.json)\nnothing is allowed [policy deny-all]", resp.Result.Message)

	resp = mutator.Handle(ctx, admissionRequest(t, compositionRequest("CREATE", composition(named), nil)))
	assert.True(t, resp.Allowed, "only policies deny: left to the validating webhook")
	resp = validator.Handle(ctx, admissionRequest(t, compositionRequest("CREATE", composition(named), nil)))
	require.False(t, resp.Allowed)
	assert.Equal(t, int32(http.StatusForbidden), resp.Result.Code)
	assert.Equal(t, "nothing is allowed [policy deny-all]", resp.Result.Message)
}

// A composition on its way out is let go whatever the schema and the policies say, so
// that its controller can remove its finalizer; any other change is checked.
func TestValidateLetsADeletedCompositionGo(t *testing.T) {
	ctx := context.Background()
	mutator, validator := denyAll(t)
	named := map[string]any{"krateo.io/release-name": "demo", "krateo.io/paused": "false"}
	deleting := func(object map[string]any, finalizers ...any) map[string]any {
		metadata := object["metadata"].(map[string]any)
		metadata["deletionTimestamp"] = "2026-11-22T06:00:00Z"
		if len(finalizers) > 0 {
			metadata["finalizers"] = finalizers
		}
		return object
	}
	// As stored: written through v1-1-5, with a value the schema refuses (say, a
	// policy added since).
	invalid := func() map[string]any {
		return withLabel(withReplicas(composition(named), 11), vocab.LabelCompositionVersion, "v1-1-5")
	}
	old := deleting(invalid(), "composition.krateo.io/finalizer")

	for name, tt := range map[string]struct {
		object  map[string]any
		allowed bool
	}{
		"the finalizer removed":                {deleting(invalid()), true},
		"a replace that omits the timestamp":   {invalid(), true},
		"the spec changed while being deleted": {deleting(withReplicas(composition(named), 12)), false},
		"a label added while being deleted":    {deleting(withLabel(invalid(), "team", "web")), false},
	} {
		t.Run(name, func(t *testing.T) {
			for handler, h := range map[string]admission.Handler{"mutate": mutator, "validate": validator} {
				resp := h.Handle(ctx, admissionRequest(t, compositionRequest("UPDATE", tt.object, old)))
				assert.Equal(t, tt.allowed, resp.Allowed, "%s: %v", handler, resp.Result)
			}
		})
	}
}

func withLabel(object map[string]any, key, value string) map[string]any {
	metadata := object["metadata"].(map[string]any)
	labels, _ := metadata["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
	}
	labels[key] = value
	metadata["labels"] = labels
	return object
}

// admissionRequest is req, a map as compositionRequest gives, as an admission.Request.
func admissionRequest(t testing.TB, req map[string]any) admission.Request {
	t.Helper()
	body, err := json.Marshal(req)
	require.NoError(t, err)
	out := admission.Request{}
	require.NoError(t, json.Unmarshal(body, &out.AdmissionRequest))
	return out
}
