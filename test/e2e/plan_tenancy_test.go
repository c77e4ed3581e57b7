package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/plan"
	definitionctl "github.com/compositor-dev/compositor/reconciler/definition"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// TestPlanTellsATeamNamespaceOnlyItsOwn: a definition in team-a's namespace serves a
// composition of team-a and one of payroll. When its chart version changes, a tenant of
// team-a (a Role on ConfigMaps and definitions there) reads the plan's counts and
// team-a's composition, and nothing of payroll's: not its name, its objects, its
// refusal or a digest that a guess of its values computed with plain SHA-256 would
// confirm; the whole plan is out of its reach. The platform's compositor plan prints
// both namespaces.
func TestPlanTellsATeamNamespaceOnlyItsOwn(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.Controllers = app.ControllersInProcess
		o.AllowChartNetworks = chartfetch.LoopbackNetworks()
	})
	repo := rolloutRepository(t)
	ctx := context.Background()
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
		return res.Stdout
	}
	definitionAt := func(version string) string {
		return definition(repo.URL, "team-a", "fireworksapp", version) + "  upgrade: {approval: Always}\n"
	}
	kubectl("", "create", "namespace", "team-a")
	kubectl("", "create", "namespace", "payroll")
	kubectl(definitionAt("1.1.5"), "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "fireworksapp", "-n", "team-a", "--for", "condition=Ready=True", "--timeout", "120s")
	// payroll's has 6 replicas, which 2.0.0 refuses, saying so.
	compositions := `apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: web, namespace: team-a}
spec: {replicaCount: 1, service: {type: ClusterIP}}
---
apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: payroll-eu-v2-enterprise, namespace: payroll}
spec: {replicaCount: 6, service: {type: ClusterIP, port: 9443}}
`
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, compositions, "apply", "-f", "-")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 250*time.Millisecond)

	kubectl(definitionAt("2.0.0"), "apply", "-f", "-")
	def := &corev1alpha1.CompositionDefinition{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "fireworksapp"}, def))
		if ro := def.Status.Rollout; assert.NotNil(c, ro) {
			assert.Equal(c, corev1alpha1.RolloutAwaitingApproval, ro.Phase, ro.Message)
		}
	}, 2*time.Minute, 250*time.Millisecond)
	ro := def.Status.Rollout
	assert.EqualValues(t, 2, ro.Plan.ToMove)
	assert.EqualValues(t, 1, ro.Plan.Refused)
	assert.Empty(t, ro.Plan.RefusedCompositions, "the status, which team-a reads, names no refusal of payroll's")
	assert.NotContains(t, strings.Join(ro.Plan.DeletedObjects, "\n"), "payroll")

	// What an attacker computes offline from a guess (here, the right one): the plain
	// SHA-256 of the values once moved, as an unkeyed plan names them.
	guesses := guessedDigests(t, cp)
	require.Len(t, guesses, 2)

	// The tenant of team-a.
	require.NoError(t, cp.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "tenant"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
		{APIGroups: []string{corev1alpha1.GroupVersion.Group}, Resources: []string{"compositiondefinitions"}, Verbs: []string{"get", "list", "watch"}},
	}}))
	require.NoError(t, cp.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "tenant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "tenant"}},
	}))
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant"}
	tenant, err := client.New(cfg, client.Options{Scheme: cp.Client.Scheme()})
	require.NoError(t, err)

	// Every ConfigMap the tenant may read in team-a says nothing of payroll's.
	var view string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cms := &corev1.ConfigMapList{}
		if !assert.NoError(c, tenant.List(ctx, cms, client.InNamespace("team-a"))) {
			return
		}
		view = ""
		for _, cm := range cms.Items {
			b, _ := json.Marshal(cm)
			for _, s := range append([]string{"payroll"}, guesses...) {
				assert.NotContains(c, string(b), s, "ConfigMap %s", cm.Name)
			}
			if cm.Name == definitionctl.PlanConfigMapName("fireworksapp") {
				view = inflatePlan(t, cm.BinaryData[definitionctl.PlanConfigMapKey])
			}
		}
		assert.Contains(c, view, ro.Plan.Hash)
	}, time.Minute, 250*time.Millisecond)
	for _, s := range append([]string{"payroll"}, guesses...) {
		assert.NotContains(t, view, s)
	}
	assert.NotContains(t, view, `"values"`)
	assert.Contains(t, view, `"name":"web"`)
	assert.Contains(t, view, `"namespace":"team-a"`)
	assert.Contains(t, view, `"summary":{"toMove":2,"refused":1`)
	assert.Contains(t, view, plan.KeyedDigest, "team-a's own digest is keyed too")

	whole := client.ObjectKey{Namespace: app.NewServeOptions().Namespace, Name: definitionctl.WholePlanConfigMapName(def.UID)}
	assert.True(t, apierrors.IsForbidden(tenant.Get(ctx, whole, &corev1.ConfigMap{})), "the tenant may not read the whole plan")

	// The whole plan has both, keyed.
	cm := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, whole, cm))
	all := inflatePlan(t, cm.BinaryData[definitionctl.PlanConfigMapKey])
	assert.Contains(t, all, "payroll-eu-v2-enterprise")
	for _, g := range guesses {
		assert.NotContains(t, all, g)
	}

	// The platform's compositor plan prints every namespace; the tenant's, its own.
	var out bytes.Buffer
	require.NoError(t, app.RunPlanDefinition(ctx, &out, io.Discard, &app.PlanOptions{Kubeconfig: cp.Kubeconfig, Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "Plan "+ro.Plan.Hash)
	assert.Contains(t, out.String(), "\npayroll/payroll-eu-v2-enterprise (release payroll-eu-v2-enterprise): refused\n")
	assert.Contains(t, out.String(), "\nteam-a/web (release web): moves\n")
	out.Reset()
	path := filepath.Join(t.TempDir(), "tenant.kubeconfig")
	require.NoError(t, os.WriteFile(path, cp.UserKubeconfig(t, "tenant"), 0o600))
	require.NoError(t, app.RunPlanDefinition(ctx, &out, io.Discard, &app.PlanOptions{Kubeconfig: path, Output: "json"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), ro.Plan.Hash)
	assert.Contains(t, out.String(), `"name": "web"`)
	for _, s := range append([]string{"payroll"}, guesses...) {
		assert.NotContains(t, out.String(), s)
	}

	// The status, which only Compositor writes, records the digest of the view, and
	// the view the tenant rewrites (hiding payroll's refusal), its digest computed
	// again, is refused to whoever reads it.
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "fireworksapp"}, def))
	cmKey := client.ObjectKey{Namespace: "team-a", Name: definitionctl.PlanConfigMapName("fireworksapp")}
	viewCM := &corev1.ConfigMap{}
	require.NoError(t, tenant.Get(ctx, cmKey, viewCM))
	kept, err := definitionctl.DecodeKeptPlan(viewCM)
	require.NoError(t, err)
	require.NotNil(t, kept.Scope)
	assert.Equal(t, kept.Scope.Digest, def.Status.Rollout.Plan.ViewDigest)
	kept.Summary.Refused, kept.Scope.Digest = 0, ""
	b, err := json.Marshal(kept)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	kept.Scope.Digest = plan.PlainDigest + hex.EncodeToString(sum[:])
	require.NoError(t, kept.Check())
	b, err = json.Marshal(kept)
	require.NoError(t, err)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err = zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	viewCM.BinaryData[definitionctl.PlanConfigMapKey] = gz.Bytes()
	require.NoError(t, tenant.Update(ctx, viewCM))
	for who, opts := range map[string]*app.PlanOptions{
		"the tenant's": {Kubeconfig: path, Output: "text"},
		"the platform's, looking for the whole plan in the wrong namespace": {Kubeconfig: cp.Kubeconfig, Output: "text", CompositorNamespace: "elsewhere"},
	} {
		out.Reset()
		if err := app.RunPlanDefinition(ctx, &out, io.Discard, opts, "team-a", "fireworksapp"); err != nil {
			assert.ErrorIs(t, err, plan.ErrAltered, who)
		} else {
			// Compositor planned again meanwhile, and wrote the view again.
			t.Logf("%s compositor plan read the view Compositor wrote again", who)
			assert.Contains(t, out.String(), "2 compositions to move, 1 refused", who)
		}
	}
}

// guessedDigests are the hex SHA-256 digests of the values of the v1-1-5 compositions
// once moved to the 2.0.0 of rolloutRepository, as a plan without a key computes them.
func guessedDigests(t *testing.T, cp *controlplane.ControlPlane) []string {
	t.Helper()
	from, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	to, err := samplecharts.Load("2.0.0")
	require.NoError(t, err)
	to.Schema = bytes.Replace(to.Schema, []byte(`"maximum": 20`), []byte(`"maximum": 4`), 1)
	to.Templates = slices.DeleteFunc(to.Templates, func(f *chartcommon.File) bool { return f.Name == "templates/configmap.yaml" })
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("composition.krateo.io/v1-1-5")
	list.SetKind("FireworksAppList")
	require.NoError(t, cp.Client.List(context.Background(), list))
	var objs []map[string]any
	for _, item := range list.Items {
		objs = append(objs, item.Object)
	}
	p, err := plan.Compute(context.Background(), plan.Options{From: from, To: to}, objs)
	require.NoError(t, err)
	var out []string
	for _, c := range p.Compositions {
		b, err := json.Marshal(c.Values)
		require.NoError(t, err)
		sum := sha256.Sum256(b)
		require.Equal(t, plan.PlainDigest+hex.EncodeToString(sum[:]), c.ValuesDigest)
		out = append(out, hex.EncodeToString(sum[:]))
	}
	return out
}

func inflatePlan(t *testing.T, b []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	return string(raw)
}

// TestRolloutTellsATeamNamespaceOnlyItsOwn: a definition in team-a's namespace moves a
// composition of team-a and one each of payroll and billing, to 2.0.0 and then to
// 2.0.1, on which billing's fails and the rollout moves it back. A tenant of team-a
// (it reads the definition, the events and the ConfigMaps there) reads the rollout's
// counts and team-a's composition, and nothing of payroll's or billing's: not in
// status.rollout (pending, moved, failed, stayed, the message), the conditions or the
// events. Every composition of every namespace is in the rollout's record in
// Compositor's namespace, which the tenant may not read and the platform's compositor
// plan prints.
func TestRolloutTellsATeamNamespaceOnlyItsOwn(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.Controllers = app.ControllersInProcess
		o.AllowChartNetworks = chartfetch.LoopbackNetworks()
	})
	repo := rolloutRepository(t)
	ctx := context.Background()
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
		return res.Stdout
	}
	definitionAt := func(version string) string {
		return definition(repo.URL, "team-a", "fireworksapp", version) +
			"  upgrade: {approval: Never, canary: 1, batchSize: 10, progressDeadlineSeconds: 120}\n"
	}
	// The names a tenant of team-a must not read: the other namespaces', their
	// compositions' and their releases' (2.0.1's failure names billing's release).
	secrets := []string{"payroll", "billing", "invoices-nightly"}
	for _, ns := range []string{"team-a", "payroll", "billing"} {
		kubectl("", "create", "namespace", ns)
	}
	kubectl(definitionAt("1.1.5"), "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "fireworksapp", "-n", "team-a", "--for", "condition=Ready=True", "--timeout", "120s")
	// billing's has 3 replicas, for which 2.0.1's template fails at install.
	compositions := `apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: web, namespace: team-a}
spec: {replicaCount: 1, service: {type: ClusterIP}}
---
apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: payroll-eu-v2-enterprise, namespace: payroll}
spec: {replicaCount: 2, service: {type: ClusterIP, port: 9443}}
---
apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: invoices-nightly, namespace: billing}
spec: {replicaCount: 3, service: {type: ClusterIP}}
`
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, compositions, "apply", "-f", "-")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 250*time.Millisecond)
	for _, ns := range []string{"team-a", "payroll", "billing"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			res := cp.Kubectl(ctx, "", "wait", "fireworksapps.composition.krateo.io", "--all", "-n", ns, "--for", "condition=Ready=True", "--timeout", "5s")
			assert.NoError(c, res.Err, res.Stderr)
		}, 4*time.Minute, time.Second)
	}

	// The tenant of team-a.
	require.NoError(t, cp.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "tenant"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "events"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{corev1alpha1.GroupVersion.Group}, Resources: []string{"compositiondefinitions"}, Verbs: []string{"get", "list", "watch"}},
	}}))
	require.NoError(t, cp.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "tenant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "tenant"}},
	}))
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant"}
	tenant, err := client.New(cfg, client.Options{Scheme: cp.Client.Scheme()})
	require.NoError(t, err)
	tenantKubeconfig := filepath.Join(t.TempDir(), "tenant.kubeconfig")
	require.NoError(t, os.WriteFile(tenantKubeconfig, cp.UserKubeconfig(t, "tenant"), 0o600))

	// rollout waits for the phase, as the tenant reads the definition: whole, as JSON,
	// and as its status.rollout.
	rollout := func(phase string, timeout time.Duration) (string, map[string]any) {
		t.Helper()
		var whole string
		var ro map[string]any
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(corev1alpha1.GroupVersion.String())
			u.SetKind("CompositionDefinition")
			if !assert.NoError(c, tenant.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "fireworksapp"}, u)) {
				return
			}
			b, err := json.Marshal(u.Object)
			assert.NoError(c, err)
			whole = string(b)
			ro, _, _ = unstructured.NestedMap(u.Object, "status", "rollout")
			assert.Equal(c, phase, ro["phase"], "%v", ro["message"])
		}, timeout, 250*time.Millisecond)
		return whole, ro
	}
	// events are the messages of the definition's events the tenant reads in team-a,
	// once one of reason is there.
	events := func(reason string) string {
		t.Helper()
		var all string
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			list := &corev1.EventList{}
			if !assert.NoError(c, tenant.List(ctx, list, client.InNamespace("team-a"))) {
				return
			}
			var b strings.Builder
			seen := false
			for _, e := range list.Items {
				seen = seen || e.Reason == reason
				fmt.Fprintf(&b, "%s %s: %s\n", e.Reason, e.InvolvedObject.Name, e.Message)
			}
			all = b.String()
			assert.True(c, seen, "no %s event yet:\n%s", reason, all)
		}, time.Minute, 250*time.Millisecond)
		return all
	}
	noneOf := func(what, s string) {
		t.Helper()
		for _, secret := range secrets {
			assert.NotContains(t, s, secret, "%s, which team-a's tenant reads, names another namespace's composition", what)
		}
	}
	// platform is the platform's compositor plan of the definition, and tenantPlan the
	// tenant's.
	platform := func() string {
		t.Helper()
		var out bytes.Buffer
		require.NoError(t, app.RunPlanDefinition(ctx, &out, io.Discard, &app.PlanOptions{Kubeconfig: cp.Kubeconfig, Output: "text"}, "team-a", "fireworksapp"))
		return out.String()
	}
	tenantPlan := func() string {
		t.Helper()
		var out bytes.Buffer
		require.NoError(t, app.RunPlanDefinition(ctx, &out, io.Discard, &app.PlanOptions{Kubeconfig: tenantKubeconfig, Output: "text"}, "team-a", "fireworksapp"))
		return out.String()
	}

	// To 2.0.0: every one moves, billing's first (the plan's order).
	kubectl(definitionAt("2.0.0"), "apply", "-f", "-")
	whole, ro := rollout(corev1alpha1.RolloutComplete, 5*time.Minute)
	noneOf("the definition", whole)
	assert.Equal(t, []any{"team-a/web"}, namesOf(ro["moved"]), "the status lists team-a's own")
	assert.EqualValues(t, 3, ro["movedCount"], "and counts every namespace's")
	assert.EqualValues(t, 3, ro["ready"])
	all := events(definitionctl.EventRolloutComplete)
	noneOf("the events", all)
	assert.Contains(t, all, definitionctl.EventRolloutBatch)
	assert.Contains(t, all, "team-a/web")

	out := platform()
	assert.Contains(t, out, "Every namespace's compositions, from the rollout's record, ConfigMap ")
	assert.Contains(t, out, "\n  billing/invoices-nightly (at ", "the platform reads the whole rollout")
	assert.Contains(t, out, "payroll/payroll-eu-v2-enterprise")
	assert.Contains(t, out, "team-a/web")
	out = tenantPlan()
	noneOf("the tenant's compositor plan", out)
	assert.Contains(t, out, "team-a/web")
	assert.Contains(t, out, "may not read the rollout's record")

	// To 2.0.1: billing's, the canary, fails, and is moved back.
	kubectl(definitionAt("2.0.1"), "apply", "-f", "-")
	whole, ro = rollout(corev1alpha1.RolloutRolledBack, 5*time.Minute)
	noneOf("the definition", whole)
	assert.Empty(t, ro["moved"], "the one moved is not team-a's")
	assert.EqualValues(t, 1, ro["movedCount"])
	assert.EqualValues(t, 1, ro["failedCount"])
	assert.Contains(t, ro["message"], "moved back to 2.0.0")
	all = events(definitionctl.EventRolledBack)
	noneOf("the events", all)

	out = platform()
	assert.Contains(t, out, "billing/invoices-nightly: ", "the platform reads why it failed")
	noneOf("the tenant's compositor plan", tenantPlan())

	// The record is the platform's.
	def := &corev1alpha1.CompositionDefinition{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "fireworksapp"}, def))
	record := client.ObjectKey{Namespace: app.NewServeOptions().Namespace, Name: "compositor-rollout." + string(def.UID)}
	assert.True(t, apierrors.IsForbidden(tenant.Get(ctx, record, &corev1.ConfigMap{})), "the tenant may not read the rollout's record")
	require.NoError(t, cp.Client.Get(ctx, record, &corev1.ConfigMap{}))
}

// namesOf is the names of a status.rollout.moved read as JSON.
func namesOf(moved any) []any {
	var out []any
	list, _ := moved.([]any)
	for _, m := range list {
		entry, _ := m.(map[string]any)
		out = append(out, entry["name"])
	}
	return out
}
