package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/webhooks"
)

// The reviews the API server would send for the writes users make, built as it builds
// them: the object as written (the validating webhook sees it after defaulting), the
// old object on UPDATE, and the identity of a member of a team.

var successStatus = metav1.Status{Status: metav1.StatusSuccess}

// benchUser is who writes: a developer, not a cluster administrator.
var benchUser = authenticationv1.UserInfo{Username: "dev@example.com", Groups: []string{"team-a", "system:authenticated"}}

const (
	compositionGroup   = vocab.CompositionGroup
	compositionKind    = "FireworksApp"
	compositionVersion = "v1-1-5"
)

// composition is a FireworksApp as the mutating webhook leaves it: release name, pause
// annotation and version label set. i varies its name and replicaCount, so that no two
// neighbouring requests are the same.
func composition(namespace string, i int, spec map[string]any) map[string]any {
	name := fmt.Sprintf("bench-%d", i)
	s := maps.Clone(spec)
	s["replicaCount"] = int64(1 + i%5)
	return map[string]any{
		"apiVersion": compositionGroup + "/" + compositionVersion,
		"kind":       compositionKind,
		"metadata": map[string]any{
			"name":       name,
			"namespace":  namespace,
			"uid":        string(uuid.NewUUID()),
			"generation": int64(1), // as created: an update's old version too
			"labels":     map[string]any{"team": "a", vocab.LabelCompositionVersion: compositionVersion},
			"annotations": map[string]any{
				vocab.AnnotationReleaseName: name,
				vocab.AnnotationPaused:      "false",
			},
		},
		"spec": s,
	}
}

// admissionReview encodes one AdmissionReview, with a UID of its own.
func admissionReview(op admissionv1.Operation, gvk metav1.GroupVersionKind, resource string, namespace, name string, object, old any) []byte {
	return admissionReviewOf(types.UID(uuid.NewUUID()), op, gvk, resource, namespace, name, object, old)
}

// admissionReviewOf encodes one AdmissionReview of the request uid.
func admissionReviewOf(uid types.UID, op admissionv1.Operation, gvk metav1.GroupVersionKind, resource string, namespace, name string, object, old any) []byte {
	req := &admissionv1.AdmissionRequest{
		UID:       uid,
		Kind:      gvk,
		Resource:  metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resource},
		Namespace: namespace,
		Name:      name,
		Operation: op,
		UserInfo:  benchUser,
	}
	if object != nil {
		req.Object = runtime.RawExtension{Raw: mustJSON(object)}
	}
	if old != nil {
		req.OldObject = runtime.RawExtension{Raw: mustJSON(old)}
	}
	review := admissionv1.AdmissionReview{Request: req}
	review.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"))
	return mustJSON(review)
}

var fireworksGVK = metav1.GroupVersionKind{Group: compositionGroup, Version: compositionVersion, Kind: compositionKind}

// compositionCreates are n admitted creates of distinct compositions in namespace.
func compositionCreates(namespace string, n int, spec map[string]any) []call {
	return compositionCalls(n, webhooks.ValidatePath, true, func(i int) (map[string]any, map[string]any) {
		return composition(namespace, i, spec), nil
	})
}

// compositionUpdates are n admitted updates, each changing replicaCount.
func compositionUpdates(namespace string, n int, spec map[string]any) []call {
	return compositionCalls(n, webhooks.ValidatePath, true, func(i int) (map[string]any, map[string]any) {
		old := composition(namespace, i, spec)
		updated := composition(namespace, i+1, spec)
		updated["metadata"] = old["metadata"]
		return updated, old
	})
}

// compositionUpdatesUnremembered are n admitted updates whose old versions no
// review rendered (their replicaCount, 1000 and more, is one no write of the load
// has), as after a restart or when the old version was admitted by another replica:
// Compositor cannot recall what the old version rendered and renders it again.
func compositionUpdatesUnremembered(namespace string, n int, spec map[string]any) []call {
	return compositionCalls(n, webhooks.ValidatePath, true, func(i int) (map[string]any, map[string]any) {
		old := composition(namespace, i, spec)
		old["spec"].(map[string]any)["replicaCount"] = int64(1000 + i)
		updated := composition(namespace, i+1, spec)
		updated["metadata"] = old["metadata"]
		return updated, old
	})
}

// compositionMutations are n creates as the mutating webhook receives them: no release
// name, no pause annotation, no version label yet.
func compositionMutations(namespace string, n int, spec map[string]any) []call {
	return compositionCalls(n, webhooks.MutatePath, true, func(i int) (map[string]any, map[string]any) {
		obj := composition(namespace, i, spec)
		md := obj["metadata"].(map[string]any)
		delete(md, "annotations")
		md["labels"] = map[string]any{"team": "a"}
		return obj, nil
	})
}

// compositionWrites are n admitted creates as the API server sends them: /mutate
// with the object as written (no release name, no pause annotation, no version label
// yet), then /validate with the object as mutated, both under the request's one UID.
// One call is the pair.
func compositionWrites(namespace string, n int, spec map[string]any) []call {
	out := make([]call, n)
	for i := range n {
		mutated := composition(namespace, i, spec)
		written := clone(mutated)
		md := written["metadata"].(map[string]any)
		delete(md, "annotations")
		md["labels"] = map[string]any{"team": "a"}
		uid := types.UID(uuid.NewUUID())
		name := nameOf(mutated)
		out[i] = call{path: webhooks.MutatePath, check: expectAdmission(true),
			body: admissionReviewOf(uid, admissionv1.Create, fireworksGVK, "fireworksapps", namespace, name, written, nil),
			then: &call{path: webhooks.ValidatePath, check: expectAdmission(true),
				body: admissionReviewOf(uid, admissionv1.Create, fireworksGVK, "fireworksapps", namespace, name, mutated, nil)}}
	}
	return out
}

// compositionDenials are n creates that break the schema and two policies.
func compositionDenials(namespace string, n int, spec map[string]any) []call {
	return compositionCalls(n, webhooks.ValidatePath, false, func(i int) (map[string]any, map[string]any) {
		obj := composition(namespace, i, spec)
		obj["spec"].(map[string]any)["replicaCount"] = int64(50 + i)
		delete(obj["metadata"].(map[string]any)["labels"].(map[string]any), "team")
		return obj, nil
	})
}

// compositionCalls are n reviews of FireworksApps sent to path, a CREATE when build
// gives no old object and an UPDATE otherwise, each answered with allowed.
func compositionCalls(n int, path string, allowed bool, build func(i int) (obj, old map[string]any)) []call {
	out := make([]call, n)
	for i := range n {
		obj, old := build(i)
		op := admissionv1.Create
		if old != nil {
			op = admissionv1.Update
		}
		md := obj["metadata"].(map[string]any)
		out[i] = call{path: path, check: expectAdmission(allowed),
			body: admissionReview(op, fireworksGVK, "fireworksapps", md["namespace"].(string), nameOf(obj), obj, old)}
	}
	return out
}

var definitionGVK = metav1.GroupVersionKind{Group: corev1alpha1.GroupVersion.Group, Version: corev1alpha1.GroupVersion.Version, Kind: "CompositionDefinition"}

// definitionCreates are n admitted creates of CompositionDefinitions of the sample chart.
func definitionCreates(namespace, repoURL string, n int) []call {
	out := make([]call, n)
	for i := range n {
		name := fmt.Sprintf("bench-def-%d", i)
		obj := map[string]any{
			"apiVersion": corev1alpha1.GroupVersion.String(),
			"kind":       "CompositionDefinition",
			"metadata":   map[string]any{"name": name, "namespace": namespace, "uid": string(uuid.NewUUID())},
			"spec":       map[string]any{"chart": map[string]any{"url": repoURL, "repo": "fireworks-app", "version": "1.1.5"}},
		}
		out[i] = call{path: webhooks.ValidatePath, check: expectAdmission(true),
			body: admissionReview(admissionv1.Create, definitionGVK, "compositiondefinitions", namespace, name, obj, nil)}
	}
	return out
}

var policyGVK = metav1.GroupVersionKind{Group: "policy.compositor.dev", Version: "v1alpha1", Kind: "CompositionPolicy"}

// policyCreates are n admitted creates of CompositionPolicies, cycling through rego.
func policyCreates(objects []map[string]any, n int) []call {
	out := make([]call, n)
	for i := range n {
		obj := clone(objects[i%len(objects)])
		name := fmt.Sprintf("bench-policy-%d", i)
		obj["metadata"] = map[string]any{"name": name, "uid": string(uuid.NewUUID())}
		out[i] = call{path: webhooks.ValidatePath, check: expectAdmission(true),
			body: admissionReview(admissionv1.Create, policyGVK, "compositionpolicies", "", name, obj, nil)}
	}
	return out
}

// probeReview is a review any of the servers answers at once.
func probeReview() []byte {
	return admissionReview(admissionv1.Delete, policyGVK, "compositionpolicies", "", "probe", nil,
		map[string]any{"apiVersion": "policy.compositor.dev/v1alpha1", "kind": "CompositionPolicy", "metadata": map[string]any{"name": "probe"}})
}

// conversionReview asks to convert n compositions written through from to version to,
// as the API server does when a list is read through another version than the stored one.
func conversionReview(namespace string, n int, spec map[string]any, from, to string) call {
	objects := make([]runtime.RawExtension, n)
	for i := range n {
		obj := composition(namespace, i, spec)
		obj["apiVersion"] = compositionGroup + "/" + from
		objects[i] = runtime.RawExtension{Raw: mustJSON(obj)}
	}
	review := apiextensionsv1.ConversionReview{Request: &apiextensionsv1.ConversionRequest{
		UID:               types.UID(uuid.NewUUID()),
		DesiredAPIVersion: compositionGroup + "/" + to,
		Objects:           objects,
	}}
	review.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("ConversionReview"))
	return call{path: webhooks.ConvertPath, body: mustJSON(review),
		check: expectConverted(n, compositionGroup+"/"+to, true), floorCheck: expectConverted(n, compositionGroup+"/"+to, false)}
}

// expectConverted checks that a ConversionReview's answer succeeded with n objects of
// apiVersion, converted by the declared conversions when declared.
func expectConverted(n int, apiVersion string, declared bool) func([]byte) error {
	return func(body []byte) error {
		review := &apiextensionsv1.ConversionReview{}
		if err := json.Unmarshal(body, review); err != nil || review.Response == nil {
			return fmt.Errorf("the answer is not a ConversionReview with a response: %s", truncate(body))
		}
		if review.Response.Result.Status != metav1.StatusSuccess {
			return fmt.Errorf("conversion failed: %s", review.Response.Result.Message)
		}
		if len(review.Response.ConvertedObjects) != n {
			return fmt.Errorf("expected %d converted objects, got %d", n, len(review.Response.ConvertedObjects))
		}
		var first struct {
			APIVersion string `json:"apiVersion"`
			Spec       struct {
				Exposure string `json:"exposure"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(review.Response.ConvertedObjects[0].Raw, &first); err != nil || first.APIVersion != apiVersion {
			return fmt.Errorf("expected objects of %s, got %q", apiVersion, first.APIVersion)
		}
		// values-full.yaml asks 1.1.5 for a NodePort Service: chart 2.0.0's declared
		// conversion makes it exposure public.
		if declared && strings.HasSuffix(apiVersion, "/v2-0-0") && first.Spec.Exposure != "public" {
			return fmt.Errorf("expected the declared conversion to give exposure public, got %q", first.Spec.Exposure)
		}
		return nil
	}
}

func nameOf(obj map[string]any) string {
	return obj["metadata"].(map[string]any)["name"].(string)
}

// clone is a deep copy of a JSON object.
func clone(obj map[string]any) map[string]any { return mustMap(obj) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
