package webhooks

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fakeAuthorizer answers SubjectAccessReviews: readers may get every Secret, nobody
// else any; it records what it was asked.
type fakeAuthorizer struct {
	readers map[string]bool
	err     error
	asked   []authorizationv1.SubjectAccessReviewSpec
}

func (f *fakeAuthorizer) Create(_ context.Context, obj client.Object, _ ...client.CreateOption) error {
	review := obj.(*authorizationv1.SubjectAccessReview)
	f.asked = append(f.asked, review.Spec)
	if f.err != nil {
		return f.err
	}
	review.Status.Allowed = f.readers[review.Spec.User]
	return nil
}

// chartOfDefinition is the spec.chart map of a definition made by withPasswordRef.
func chartOfDefinition(def map[string]any) map[string]any {
	return def["spec"].(map[string]any)["chart"].(map[string]any)
}

// moved returns a definition with a passwordRef to repo-password, changed by edit.
func moved(edit func(chart map[string]any)) map[string]any {
	def := withPasswordRef("repo-password")
	edit(chartOfDefinition(def))
	return def
}

func updateBy(user string, updated, old map[string]any) *Request {
	req := definitionRequest(admissionv1.Update, updated, old)
	req.UserInfo = authenticationv1.UserInfo{Username: user, Groups: []string{"team-a-devs"}}
	return req
}

// Any change of where a definition's credentials go, or which credentials they are,
// is asked about with the requester's identity: a user who may not get the Secret
// cannot move the credentials to a server of their choosing by changing the URL, the
// repository, the username or TLS verification. The refusal names the field and the
// Secret. A user who may get the Secret may make the same change.
func TestSecretAccessRechecksEveryChangeOfTheChartSource(t *testing.T) {
	credentials := func(chart map[string]any) map[string]any { return chart["credentials"].(map[string]any) }
	changes := map[string]struct {
		edit  func(chart map[string]any)
		field string
	}{
		"url":                  {func(c map[string]any) { c["url"] = "https://logs.example.net" }, "spec.chart.url"},
		"url to another port":  {func(c map[string]any) { c["url"] = "https://charts.example.com:8443" }, "spec.chart.url"},
		"repo":                 {func(c map[string]any) { c["repo"] = "other" }, "spec.chart.repo"},
		"TLS verification off": {func(c map[string]any) { c["insecureSkipVerifyTLS"] = true }, "spec.chart.insecureSkipVerifyTLS"},
		"username":             {func(c map[string]any) { credentials(c)["username"] = "someone-else" }, "spec.chart.credentials.username"},
		"passwordRef key":      {func(c map[string]any) { credentials(c)["passwordRef"].(map[string]any)["key"] = "token" }, "spec.chart.credentials.passwordRef"},
		// Both the username and the key: the first changed field in the order url,
		// repo, TLS, username, passwordRef is named.
		"credentials as a whole": {func(c map[string]any) {
			c["credentials"] = map[string]any{"username": "x", "passwordRef": map[string]any{"name": "repo-password", "namespace": "team-a", "key": "other"}}
		}, "spec.chart.credentials.username"},
		"url and repo at once": {func(c map[string]any) { c["url"], c["repo"] = "https://logs.example.net", "x" }, "spec.chart.url"},
		"url and version":      {func(c map[string]any) { c["url"], c["version"] = "oci://logs.example.net/x", "2.0.0" }, "spec.chart.url"},
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			authz := &fakeAuthorizer{readers: map[string]bool{"bob": true}}
			check := secretAccess{authorizer: authz}
			updated, old := moved(change.edit), withPasswordRef("repo-password")

			errs, _ := check.Check(context.Background(), updateBy("alice", updated, old))
			require.Len(t, errs, 1)
			assert.Equal(t, field.ErrorTypeForbidden, errs[0].Type)
			assert.Equal(t, change.field, errs[0].Field, "the field that changed")
			assert.Contains(t, errs[0].Error(), `user "alice" may not get Secret team-a/repo-password (no RBAC rule allows it)`)
			require.Len(t, authz.asked, 1)
			asked := authz.asked[0]
			assert.Equal(t, "alice", asked.User)
			assert.Equal(t, []string{"team-a-devs"}, asked.Groups)
			assert.Equal(t, authorizationv1.ResourceAttributes{Namespace: "team-a", Verb: "get", Version: "v1", Resource: "secrets", Name: "repo-password"}, *asked.ResourceAttributes)

			errs, _ = check.Check(context.Background(), updateBy("bob", updated, old))
			assert.Empty(t, errs, "someone who may read the Secret may move it")
		})
	}

	t.Run("the message lists every field that changed", func(t *testing.T) {
		check := secretAccess{authorizer: &fakeAuthorizer{}}
		updated := moved(func(c map[string]any) { c["url"], c["repo"] = "https://logs.example.net", "x" })
		errs, _ := check.Check(context.Background(), updateBy("alice", updated, withPasswordRef("repo-password")))
		require.Len(t, errs, 1)
		assert.Contains(t, errs[0].Error(), "changing spec.chart.url, spec.chart.repo of a definition with credentials changes where Compositor sends that Secret")
	})
	t.Run("a changed reference alone keeps its message", func(t *testing.T) {
		check := secretAccess{authorizer: &fakeAuthorizer{}}
		errs, _ := check.Check(context.Background(), updateBy("alice", withPasswordRef("other"), withPasswordRef("repo-password")))
		require.Len(t, errs, 1)
		assert.Equal(t, "spec.chart.credentials.passwordRef", errs[0].Field)
		assert.Contains(t, errs[0].Error(), `user "alice" may not get Secret team-a/other (`)
		assert.Contains(t, errs[0].Error(), "a definition may only name credentials its author can read")
	})
	t.Run("credentials added by an update", func(t *testing.T) {
		check := secretAccess{authorizer: &fakeAuthorizer{}}
		errs, _ := check.Check(context.Background(), updateBy("alice", withPasswordRef("repo-password"), withPasswordRef("")))
		require.Len(t, errs, 1)
		assert.Equal(t, "spec.chart.credentials.passwordRef", errs[0].Field)
	})
	t.Run("an old object that cannot be read counts as a change", func(t *testing.T) {
		check := secretAccess{authorizer: &fakeAuthorizer{}}
		old := withPasswordRef("repo-password")
		chartOfDefinition(old)["url"] = int64(42)
		errs, _ := check.Check(context.Background(), updateBy("alice", withPasswordRef("repo-password"), old))
		require.Len(t, errs, 1)
		assert.Equal(t, "spec.chart.credentials.passwordRef", errs[0].Field)
	})
	t.Run("an object that cannot be read is refused", func(t *testing.T) {
		authz := &fakeAuthorizer{readers: map[string]bool{"bob": true}}
		updated := withPasswordRef("repo-password")
		chartOfDefinition(updated)["url"] = []any{"x"}
		errs, _ := secretAccess{authorizer: authz}.Check(context.Background(), updateBy("bob", updated, withPasswordRef("repo-password")))
		require.Len(t, errs, 1)
		assert.Equal(t, "spec.chart", errs[0].Field)
	})
	t.Run("the API server cannot be asked", func(t *testing.T) {
		check := secretAccess{authorizer: &fakeAuthorizer{err: errors.New("connection refused")}}
		updated := moved(func(c map[string]any) { c["repo"] = "other" })
		errs, _ := check.Check(context.Background(), updateBy("bob", updated, withPasswordRef("repo-password")))
		require.Len(t, errs, 1)
		assert.Equal(t, field.ErrorTypeInternal, errs[0].Type)
		assert.Equal(t, "spec.chart.repo", errs[0].Field)
		assert.Contains(t, errs[0].Error(), "connection refused")
	})
}

// Updates that leave the credentials where they were approved to go are not asked
// about: nothing is sent anywhere new.
func TestSecretAccessLeavesUpdatesThatKeepTheSource(t *testing.T) {
	unchanged := map[string]struct{ updated, old map[string]any }{
		"a new chart version": {moved(func(c map[string]any) { c["version"] = "2.0.0" }), withPasswordRef("repo-password")},
		"labels": {func() map[string]any {
			def := withPasswordRef("repo-password")
			def["metadata"] = map[string]any{"labels": map[string]any{"team": "a"}}
			return def
		}(), withPasswordRef("repo-password")},
		"TLS verification turned on": {withPasswordRef("repo-password"), moved(func(c map[string]any) { c["insecureSkipVerifyTLS"] = true })},
		"credentials removed with the url": {
			moved(func(c map[string]any) { delete(c, "credentials"); c["url"] = "https://logs.example.net" }),
			withPasswordRef("repo-password"),
		},
		"no credentials, url changed": {
			moved(func(c map[string]any) { delete(c, "credentials"); c["url"] = "https://logs.example.net" }),
			withPasswordRef(""),
		},
	}
	for name, tc := range unchanged {
		t.Run(name, func(t *testing.T) {
			authz := &fakeAuthorizer{}
			errs, _ := secretAccess{authorizer: authz}.Check(context.Background(), updateBy("alice", tc.updated, tc.old))
			assert.Empty(t, errs)
			assert.Empty(t, authz.asked, "nobody was asked")
		})
	}
}
