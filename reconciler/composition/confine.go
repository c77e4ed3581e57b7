package composition

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// confineToNamespace returns a copy of cfg whose requests stay in namespace: Helm,
// its release records and the templates' `lookup` act with the controller's
// identity, whose rights span every namespace that holds a composition of its
// version. A request for another namespace, or for a resource outside any namespace
// (a list across namespaces, a cluster-scoped object), is answered 403 by the client
// itself and never reaches the API server. Discovery stays open: Helm needs it to
// map kinds. clusterResources are the cluster-scoped resources the definition lets
// its compositions create: those stay reachable.
//
// The API server may be served below a path (a proxy's https://rancher/k8s/clusters/c-1,
// a target cluster's kubeconfig says so): that prefix is taken off before the path is
// judged, and a request outside it is refused.
func confineToNamespace(cfg *rest.Config, namespace string, clusterResources ...schema.GroupResource) *rest.Config {
	out := rest.CopyConfig(cfg)
	prefix := ""
	if u, err := url.Parse(cfg.Host); err == nil {
		prefix = strings.TrimRight(u.Path, "/")
	}
	out.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return &confinedTransport{next: next, prefix: prefix, namespace: namespace, clusterResources: clusterResources}
	})
	return out
}

// confinedTransport refuses the requests that leave its namespace.
type confinedTransport struct {
	next             http.RoundTripper
	prefix           string // the API server's path, from the config's host
	namespace        string
	clusterResources []schema.GroupResource
}

func (t *confinedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	path := req.URL.Path
	why := ""
	if t.prefix != "" {
		if rest, ok := strings.CutPrefix(path, t.prefix); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
			path = rest
		} else {
			why = "is outside the API server's path " + t.prefix
		}
	}
	if why == "" {
		why = outsideNamespace(path, t.namespace, t.clusterResources...)
	}
	if why != "" {
		return refusal(req, fmt.Sprintf("Compositor confines Helm and the chart's templates to namespace %s: %s %s %s", t.namespace, req.Method, req.URL.Path, why)), nil
	}
	return t.next.RoundTrip(strictFieldValidation(req))
}

// strictFieldValidation asks the API server to refuse, rather than drop, the fields of
// a write that the object's schema does not know. Helm's own client-side check against
// the OpenAPI schema is off (see UpgradeInstall): it kept a copy of every served
// schema per Helm client, and the API server knows the schemas better.
func strictFieldValidation(req *http.Request) *http.Request {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return req
	}
	query := req.URL.Query()
	if query.Has("fieldValidation") {
		return req
	}
	query.Set("fieldValidation", metav1.FieldValidationStrict)
	out := req.Clone(req.Context())
	out.URL.RawQuery = query.Encode()
	return out
}

// objectFreePaths are the first segments of the API server's paths that hold no
// objects, and that Helm and client-go read: the version, the OpenAPI documents, health.
var objectFreePaths = []string{"version", "openapi", "healthz", "livez", "readyz"}

// outsideNamespace says why an API path leaves namespace, or "" when it stays in it.
// Paths are /api/v1/... or /apis/GROUP/VERSION/...; what follows the version is
// either namespaces/NAME[/RESOURCE...] or a resource outside any namespace.
func outsideNamespace(path, namespace string, clusterResources ...schema.GroupResource) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	var group string
	switch {
	case len(parts) >= 1 && parts[0] == "api":
		rest = parts[min(2, len(parts)):]
	case len(parts) >= 1 && parts[0] == "apis":
		rest = parts[min(3, len(parts)):]
		group = parts[min(1, len(parts)-1)]
	case len(parts) >= 1 && slices.Contains(objectFreePaths, parts[0]):
		return "" // no objects
	default:
		return "is not an API path Helm needs"
	}
	if len(rest) == 0 {
		return "" // discovery of a group version
	}
	if rest[0] != "namespaces" {
		if slices.Contains(clusterResources, schema.GroupResource{Group: group, Resource: rest[0]}) {
			return ""
		}
		return "reaches objects outside any namespace"
	}
	switch {
	case len(rest) == 1:
		return "lists namespaces"
	case rest[1] != namespace:
		return "reaches namespace " + rest[1]
	}
	return ""
}

// refusal is the 403 the API server would answer, so that client-go and Helm report it
// as any other Forbidden error, with the reason in the message.
func refusal(req *http.Request, message string) *http.Response {
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   metav1.StatusReasonForbidden,
		Code:     http.StatusForbidden,
	}
	body, _ := json.Marshal(status)
	return &http.Response{
		StatusCode:    http.StatusForbidden,
		Status:        "403 Forbidden",
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
