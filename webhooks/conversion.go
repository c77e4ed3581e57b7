package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	kjson "sigs.k8s.io/json"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/internal/fairshare"
)

// ConvertPath is the path the API server sends the ConversionReviews of every generated
// CRD to; generators/crd points the CRDs' conversion webhooks at it.
const ConvertPath = crd.ConvertPath

// Errors of a ConversionReview the converter refuses, besides those of package
// conversion: conversion.ErrUnknownVersion for a version the CRD does not have,
// conversion.ErrMalformedObject for an object that is not a JSON object.
var (
	// ErrWrongKind means an object that is not of the CRD's group and kind.
	ErrWrongKind = errors.New("object of another kind")
	// ErrForeignGroup means a desiredAPIVersion outside the group of generated CRDs.
	ErrForeignGroup = errors.New("not the group of generated CRDs")
)

// conversionReviewGVK is the only review the converter reads and writes.
var conversionReviewGVK = apiextensionsv1.SchemeGroupVersion.WithKind("ConversionReview")

// NewConverter returns the handler of ConvertPath. It converts the objects of the
// generated CRDs between their served versions and the hub storage version (see package
// conversion), with the schemas of each CRD from schemas. A ConversionReview it cannot
// read gets a 4xx status with a message; a review it can read but not convert gets a
// Failure result naming the object and why, never part of the objects.
//
// The API server presents no client certificate to conversion webhooks, so the
// converter cannot tell it from any other caller that reaches the port. It bounds what
// callers can make it do instead: at most GOMAXPROCS reviews at once, at most half of
// them from one remote address (a lane, as admission shares its work between
// namespaces), each waiting at most convertWait for its turn and otherwise answered 503
// before its body is read; so a caller that floods the port holds its lane and leaves
// the API server's own conversions, and the admission that shares the process, the
// rest.
func NewConverter(schemas conversion.SchemaSource) http.Handler {
	return http.TimeoutHandler(newConverter(schemas), handlerTimeout,
		"the conversion request took too long to read or answer")
}

// convertWait is how long a review waits for a slot of the converter.
const convertWait = 2 * time.Second

func newConverter(schemas conversion.SchemaSource) *converter {
	procs := max(1, goruntime.GOMAXPROCS(0))
	return &converter{schemas: schemas, lanes: fairshare.New(max(1, procs/2)), slots: make(chan struct{}, procs), wait: convertWait}
}

type converter struct {
	schemas conversion.SchemaSource
	// lanes are the callers, by remote address; slots are the reviews converted at
	// once, of every caller; wait is how long a review waits for both.
	lanes *fairshare.Lanes
	slots chan struct{}
	wait  time.Duration
}

// enter takes a slot of r's caller's lane and one of the converter, waiting at most
// c.wait; release gives them back.
func (c *converter) enter(r *http.Request) (release func(), ok bool) {
	if c.lanes == nil {
		return func() {}, true
	}
	caller, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		caller = r.RemoteAddr
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.wait)
	defer cancel()
	leave, ok := c.lanes.Acquire(ctx, caller, c.wait)
	if !ok {
		return nil, false
	}
	select {
	case c.slots <- struct{}{}:
		return func() { <-c.slots; leave() }, true
	case <-ctx.Done():
		leave()
		return nil, false
	}
}

func (c *converter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := logf.FromContext(r.Context())
	release, ok := c.enter(r)
	if !ok {
		conversionBusyTotal.Inc()
		writeConversionReview(w, http.StatusServiceUnavailable, &apiextensionsv1.ConversionResponse{Result: failure(http.StatusServiceUnavailable,
			fmt.Errorf("the converter is busy: this caller's conversions, or all it runs at once, did not finish within %s; retry", c.wait))})
		return
	}
	defer release()
	review, status, err := readConversionReview(w, r)
	if err != nil {
		log.Info("Refused a malformed ConversionReview", "status", status, "reason", err.Error())
		resp := &apiextensionsv1.ConversionResponse{Result: failure(int32(status), err)}
		if review != nil && review.Request != nil {
			resp.UID = review.Request.UID
		}
		writeConversionReview(w, status, resp)
		return
	}
	resp := c.review(r.Context(), review.Request)
	if resp.Result.Status != metav1.StatusSuccess {
		log.Info("Refused a conversion", "uid", resp.UID, "desiredAPIVersion", review.Request.DesiredAPIVersion,
			"objects", len(review.Request.Objects), "reason", resp.Result.Message)
	}
	writeConversionReview(w, http.StatusOK, resp)
}

// review converts every object of req, or none.
func (c *converter) review(ctx context.Context, req *apiextensionsv1.ConversionRequest) *apiextensionsv1.ConversionResponse {
	objects, err := c.convertAll(ctx, req)
	if err != nil {
		code := int32(http.StatusBadRequest)
		if unavailable := (sourceError{}); errors.As(err, &unavailable) {
			code = http.StatusInternalServerError
		}
		return &apiextensionsv1.ConversionResponse{UID: req.UID, Result: failure(code, err)}
	}
	return &apiextensionsv1.ConversionResponse{
		UID:              req.UID,
		ConvertedObjects: objects,
		Result:           metav1.Status{Status: metav1.StatusSuccess},
	}
}

// sourceError is a failure of the SchemaSource other than an unknown kind: the request
// may be fine, the converter could not do its part.
type sourceError struct{ error }

func (e sourceError) Unwrap() error { return e.error }

// decodedObject is one object of a review and its version.
type decodedObject struct {
	content map[string]any
	version string
}

func (c *converter) convertAll(ctx context.Context, req *apiextensionsv1.ConversionRequest) ([]runtime.RawExtension, error) {
	desired, err := schema.ParseGroupVersion(req.DesiredAPIVersion)
	if err != nil || desired.Version == "" {
		return nil, fmt.Errorf("desiredAPIVersion %q: %w: expected %s/<version>", req.DesiredAPIVersion, conversion.ErrUnknownVersion, vocab.CompositionGroup)
	}
	if desired.Group != vocab.CompositionGroup {
		return nil, fmt.Errorf("desiredAPIVersion %q: %w: only %s is converted here", req.DesiredAPIVersion, ErrForeignGroup, vocab.CompositionGroup)
	}
	if len(req.Objects) == 0 {
		return []runtime.RawExtension{}, nil
	}

	// Decoding, converting and encoding each object are independent, and most of a
	// review's time: they run on every core, and the error reported is the first
	// object's that fails, as if they ran in order. Object 0 goes first, alone: a review
	// of a kind or version the converter does not have is refused before the others
	// cost anything.
	objects := make([]decodedObject, len(req.Objects))
	decode := func(i int) error {
		obj, err := conversion.Decode(req.Objects[i].Raw)
		if err != nil {
			return fmt.Errorf("object %d: %w", i, err)
		}
		gv, err := schema.ParseGroupVersion(stringField(obj, "apiVersion"))
		switch {
		case err != nil || gv.Version == "":
			return fmt.Errorf("object %d: %w: apiVersion %q", i, conversion.ErrUnknownVersion, stringField(obj, "apiVersion"))
		case gv.Group != desired.Group:
			return fmt.Errorf("object %d: %w: apiVersion %q is not in the group %s", i, ErrWrongKind, gv, desired.Group)
		case stringField(obj, "kind") == "":
			return fmt.Errorf("object %d: %w: it has no kind", i, ErrWrongKind)
		}
		objects[i] = decodedObject{content: obj, version: gv.Version}
		return nil
	}
	if err := decode(0); err != nil {
		return nil, err
	}
	gk := schema.GroupKind{Group: desired.Group, Kind: stringField(objects[0].content, "kind")}
	if _, err := c.schemasFor(ctx, gk, desired.Version, req.DesiredAPIVersion, objects[:1]); err != nil {
		return nil, err
	}
	if err := inOrder(len(objects)-1, func(i int) error { return decode(i + 1) }); err != nil {
		return nil, err
	}
	for i, obj := range objects {
		if kind := stringField(obj.content, "kind"); kind != gk.Kind {
			return nil, fmt.Errorf("object %d: %w: %s, while object 0 is a %s", i, ErrWrongKind, kind, gk.Kind)
		}
	}
	schemas, err := c.schemasFor(ctx, gk, desired.Version, req.DesiredAPIVersion, objects)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.RawExtension, len(objects))
	err = inOrder(len(objects), func(i int) error {
		obj := objects[i]
		if err := schemas.Convert(obj.content, obj.version, desired.Version); err != nil {
			return fmt.Errorf("object %d (%s): %w", i, objectName(obj.content), err)
		}
		raw, err := json.Marshal(obj.content)
		if err != nil {
			return fmt.Errorf("object %d (%s): encoding: %w", i, objectName(obj.content), err)
		}
		out[i] = runtime.RawExtension{Raw: raw}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// schemasFor returns the schemas of gk, which must have the desired version and that of
// each object.
func (c *converter) schemasFor(ctx context.Context, gk schema.GroupKind, desired, desiredAPIVersion string, objects []decodedObject) (*conversion.Schemas, error) {
	versions := []string{desired}
	for _, obj := range objects {
		versions = append(versions, obj.version)
	}
	schemas, err := c.schemas.Schemas(ctx, gk, versions)
	if err != nil {
		err = fmt.Errorf("schemas of %s: %w", gk, err)
		if !errors.Is(err, conversion.ErrUnknownKind) {
			err = sourceError{err}
		}
		return nil, err
	}
	if !schemas.Has(desired) {
		return nil, fmt.Errorf("desiredAPIVersion %q: %w of %s (it has %s)", desiredAPIVersion, conversion.ErrUnknownVersion, gk, strings.Join(schemas.Versions(), ", "))
	}
	for i, obj := range objects {
		if !schemas.Has(obj.version) {
			return nil, fmt.Errorf("object %d: %w %s of %s (it has %s)", i, conversion.ErrUnknownVersion, obj.version, gk, strings.Join(schemas.Versions(), ", "))
		}
	}
	return schemas, nil
}

// objectsPerWorker is the fewest objects worth a goroutine of their own.
const objectsPerWorker = 32

// inOrder calls fn for 0..n-1, spread over the cores in contiguous runs, and returns
// the error of the lowest index that fails (each run stops at its first failure, so
// the lowest failure of all is the first of some run).
func inOrder(n int, fn func(i int) error) error {
	workers := min(goruntime.GOMAXPROCS(0), (n+objectsPerWorker-1)/objectsPerWorker)
	if workers <= 1 {
		for i := range n {
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		from, to := w*n/workers, (w+1)*n/workers
		wg.Go(func() {
			for i := from; i < to; i++ {
				if err := fn(i); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func stringField(obj map[string]any, key string) string {
	s, _ := obj[key].(string)
	return s
}

// objectName names an object in messages: namespace/name, or name.
func objectName(obj map[string]any) string {
	metadata, _ := obj["metadata"].(map[string]any)
	name, _ := metadata["name"].(string)
	if ns, _ := metadata["namespace"].(string); ns != "" {
		return ns + "/" + name
	}
	return name
}

func failure(code int32, err error) metav1.Status {
	reason := metav1.StatusReasonBadRequest
	if code >= http.StatusInternalServerError {
		reason = metav1.StatusReasonInternalError
	}
	return metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: err.Error()}
}

// readConversionReview reads the ConversionReview of r, or says which status refuses it
// and why. The review comes back with the error when it could be decoded, so the answer
// can echo its uid.
func readConversionReview(w http.ResponseWriter, r *http.Request) (*apiextensionsv1.ConversionReview, int, error) {
	body, status, err := readJSONBody(w, r)
	if err != nil {
		return nil, status, err
	}
	review := &apiextensionsv1.ConversionReview{}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("the body is not a ConversionReview: %w", err)
	}
	if gvk := review.GroupVersionKind(); gvk != conversionReviewGVK {
		return review, http.StatusBadRequest, fmt.Errorf("expected a ConversionReview of %s, got apiVersion %q kind %q",
			apiextensionsv1.SchemeGroupVersion, review.APIVersion, review.Kind)
	}
	if review.Request == nil {
		return review, http.StatusBadRequest, errors.New("the ConversionReview has no request")
	}
	if review.Request.UID == "" {
		return review, http.StatusBadRequest, errors.New("the ConversionReview's request has no uid")
	}
	return review, http.StatusOK, nil
}

func writeConversionReview(w http.ResponseWriter, status int, resp *apiextensionsv1.ConversionResponse) {
	review := apiextensionsv1.ConversionReview{Response: resp}
	review.SetGroupVersionKind(conversionReviewGVK)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(review)
}
