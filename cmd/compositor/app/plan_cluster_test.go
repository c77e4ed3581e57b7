package app

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/plan"
	"github.com/compositor-dev/compositor/reconciler/definition"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// teamNamespaceCompositions are the compositions a definition of team-a moves: one of
// team-a's own, and two of another team's, whose names and objects say what it buys.
const teamNamespaceCompositions = `apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: web, namespace: team-a}
spec:
  service: {type: LoadBalancer, port: 8080}
---
apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: payroll-eu-v2-enterprise, namespace: payroll}
spec:
  replicaCount: 7
  service: {type: LoadBalancer, port: 9443}
---
apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: payroll-refused, namespace: payroll}
spec:
  exposure: external
  service: {port: 80}
`

// planFixture is a control plane with a definition of team-a whose rollout follows a
// plan of teamNamespaceCompositions, kept as Compositor keeps it.
type planFixture struct {
	cp     *controlplane.ControlPlane
	def    *corev1alpha1.CompositionDefinition
	keeper *definition.PlanKeeper
	// whole is the plan as computed, values and keyed digests; plain the same plan
	// with the plain SHA-256 digests anyone can compute from a guessed value.
	whole, plain *plan.Plan
}

func computeTeamPlan(t *testing.T, key []byte) *plan.Plan {
	t.Helper()
	from, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	to, err := samplecharts.Load("2.0.0")
	require.NoError(t, err)
	var compositions []map[string]any
	for _, doc := range bytes.Split([]byte(teamNamespaceCompositions), []byte("\n---\n")) {
		obj := map[string]any{}
		require.NoError(t, yaml.Unmarshal(doc, &obj))
		compositions = append(compositions, obj)
	}
	p, err := plan.Compute(context.Background(), plan.Options{From: from, To: to, DigestKey: key}, compositions)
	require.NoError(t, err)
	return p
}

func newPlanFixture(t *testing.T) *planFixture {
	t.Helper()
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{defaultCompositorNamespace, "team-a", "payroll"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "fireworksapp"},
		Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: "oci://charts.invalid/fireworks-app", Version: "2.0.0"}},
	}
	require.NoError(t, cp.Client.Create(ctx, def))
	key, err := definition.PlanDigestKey([]byte("the master key, 32 bytes of it.."))
	require.NoError(t, err)
	f := &planFixture{cp: cp, def: def, whole: computeTeamPlan(t, key), plain: computeTeamPlan(t, nil),
		keeper: &definition.PlanKeeper{Client: cp.Client, Live: cp.Client, Namespace: defaultCompositorNamespace}}
	f.follow(t, f.whole)
	require.NoError(t, f.keeper.Keep(ctx, f.def, f.whole))
	return f
}

// follow records p as the plan def's rollout follows.
func (f *planFixture) follow(t *testing.T, p *plan.Plan) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, f.cp.Client.Get(ctx, client.ObjectKeyFromObject(f.def), f.def))
	f.def.Status.Rollout = &corev1alpha1.Rollout{From: "1.1.5", To: "2.0.0", FromVersion: "v1-1-5", ToVersion: "v2-0-0", ToDigest: "sha256:new",
		Phase: corev1alpha1.RolloutAwaitingApproval, Plan: corev1alpha1.PlanSummary{Hash: p.Hash, ToMove: int32(p.Summary.ToMove), Refused: int32(p.Summary.Refused)}}
	require.NoError(t, f.cp.Client.Status().Update(ctx, f.def))
}

// tenant grants user, in team-a, what a tenant of the definition's namespace holds:
// reading the definition and, with configMaps, every ConfigMap there.
func (f *planFixture) tenant(t *testing.T, user string, configMaps bool) {
	t.Helper()
	ctx := context.Background()
	rules := []rbacv1.PolicyRule{{APIGroups: []string{corev1alpha1.GroupVersion.Group}, Resources: []string{"compositiondefinitions"}, Verbs: []string{"get", "list", "watch"}}}
	if configMaps {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update"}})
	}
	require.NoError(t, f.cp.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: user}, Rules: rules}))
	require.NoError(t, f.cp.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}))
}

// as is a client of the control plane impersonating user.
func (f *planFixture) as(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(f.cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: f.cp.Client.Scheme()})
	require.NoError(t, err)
	return c
}

// kubeconfig is a kubeconfig file for user.
func (f *planFixture) kubeconfig(t *testing.T, user string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	require.NoError(t, os.WriteFile(path, f.cp.UserKubeconfig(t, user), 0o600))
	return path
}

// inflated is the plan JSON a plan ConfigMap keeps.
func inflated(t *testing.T, cm *corev1.ConfigMap) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[definition.PlanConfigMapKey]))
	require.NoError(t, err)
	b, err := io.ReadAll(zr)
	require.NoError(t, err)
	return string(b)
}

// plainDigest is the SHA-256 of the JSON of values: what anyone computes from a guess.
func plainDigest(t *testing.T, values map[string]any) string {
	t.Helper()
	b, err := json.Marshal(values)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestPlanOfATeamNamespace: a definition in a team's namespace moves compositions of
// another team too. A tenant of the definition's namespace reads a view with the
// counts and its own compositions, nothing of the other team's (names, objects,
// digests, the plain digest of a guessed value); it may not read the whole plan, which
// the platform's compositor plan prints.
func TestPlanOfATeamNamespace(t *testing.T) {
	f := newPlanFixture(t)
	ctx := context.Background()
	payroll := f.plain.Compositions[0]
	require.Equal(t, "payroll-eu-v2-enterprise", payroll.Name)
	require.NotNil(t, payroll.Values)
	guessed := plainDigest(t, payroll.Values)
	require.Equal(t, plan.PlainDigest+guessed, payroll.ValuesDigest, "the guess is right: it is what an unkeyed plan names")
	secrets := []string{"payroll", "9443", guessed, f.whole.Compositions[0].ValuesDigest, f.whole.Compositions[1].ValuesDigest}

	f.tenant(t, "tenant", true)
	tenant := f.as(t, "tenant")
	view := &corev1.ConfigMap{}
	require.NoError(t, tenant.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: definition.PlanConfigMapName("fireworksapp")}, view))
	kept := inflated(t, view)
	for _, s := range secrets {
		assert.NotContains(t, kept, s, "the view of team-a")
	}
	for k, v := range view.Data {
		for _, s := range secrets {
			assert.NotContains(t, k+v, s, "the view's data")
		}
	}
	assert.Contains(t, kept, `"name":"web"`)
	assert.Contains(t, kept, f.whole.Hash, "the view names the plan the rollout follows")
	assert.Contains(t, kept, `"summary":{"toMove":3,"refused":1`, "and its counts")

	whole := client.ObjectKey{Namespace: defaultCompositorNamespace, Name: definition.WholePlanConfigMapName(f.def.UID)}
	err := tenant.Get(ctx, whole, &corev1.ConfigMap{})
	assert.True(t, apierrors.IsForbidden(err), "a tenant reads the whole plan: %v", err)
	cms := &corev1.ConfigMapList{}
	assert.True(t, apierrors.IsForbidden(tenant.List(ctx, cms, client.InNamespace(defaultCompositorNamespace))))

	// The whole plan, in Compositor's namespace, has every composition, keyed.
	cm := &corev1.ConfigMap{}
	require.NoError(t, f.cp.Client.Get(ctx, whole, cm))
	all := inflated(t, cm)
	assert.Contains(t, all, "payroll-eu-v2-enterprise")
	assert.Contains(t, all, f.whole.Compositions[0].ValuesDigest)
	assert.NotContains(t, all, guessed, "its digests are keyed")
	assert.NotContains(t, all, `"values"`, "and it holds no values")

	// The platform's compositor plan prints the whole plan.
	var out bytes.Buffer
	require.NoError(t, RunPlanDefinition(ctx, &out, &PlanOptions{Kubeconfig: f.cp.Kubeconfig, Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "Plan "+f.whole.Hash)
	assert.Contains(t, out.String(), "\npayroll/payroll-eu-v2-enterprise (release payroll-eu-v2-enterprise): moves\n")
	assert.Contains(t, out.String(), "\npayroll/payroll-refused (release payroll-refused): refused\n")
	assert.Contains(t, out.String(), "\nteam-a/web (release web): moves\n")
	assert.NotContains(t, out.String(), "View of namespace")

	// The tenant's gets team-a's view, and says so.
	out.Reset()
	tenantConfig := f.kubeconfig(t, "tenant")
	require.NoError(t, RunPlanDefinition(ctx, &out, &PlanOptions{Kubeconfig: tenantConfig, Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "fireworks-app 1.1.5 → 2.0.0: 3 compositions to move, 1 refused")
	assert.Contains(t, out.String(), "Plan "+f.whole.Hash)
	assert.Contains(t, out.String(), "View of namespace team-a: its 1 composition (0 refused, 0 objects deleted); the 2 others are in other namespaces")
	assert.Contains(t, out.String(), "\nteam-a/web (release web): moves\n")
	out.Reset()
	require.NoError(t, RunPlanDefinition(ctx, &out, &PlanOptions{Kubeconfig: tenantConfig, Output: "json"}, "team-a", "fireworksapp"))
	for _, s := range secrets {
		assert.NotContains(t, out.String(), s, "the tenant's compositor plan -o json")
	}

	// A view changed by hand is refused.
	view.Data["hash"] = "edited"
	view.BinaryData[definition.PlanConfigMapKey] = gzipped(t, bytes.Replace([]byte(kept), []byte(`"name":"web"`), []byte(`"name":"wob"`), 1))
	require.NoError(t, tenant.Update(ctx, view))
	err = RunPlanDefinition(ctx, io.Discard, &PlanOptions{Kubeconfig: tenantConfig, Output: "text"}, "team-a", "fireworksapp")
	assert.ErrorIs(t, err, plan.ErrAltered)
	// Compositor writes it again as it was at the next plan.
	require.NoError(t, f.keeper.Keep(ctx, f.def, f.whole))
	require.NoError(t, RunPlanDefinition(ctx, io.Discard, &PlanOptions{Kubeconfig: tenantConfig, Output: "text"}, "team-a", "fireworksapp"))

	// Who may read neither is told which ConfigMaps.
	f.tenant(t, "outsider", false)
	err = RunPlanDefinition(ctx, io.Discard, &PlanOptions{Kubeconfig: f.kubeconfig(t, "outsider"), Output: "text"}, "team-a", "fireworksapp")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "you may not read ConfigMap "+whole.String()+" (the whole plan, the platform's) nor team-a/compositor-plan-fireworksapp")
	assert.True(t, apierrors.IsForbidden(err), "%v", err)

	// The definition's deletion takes the whole plan with it.
	require.NoError(t, f.keeper.Forget(ctx, f.def))
	assert.True(t, apierrors.IsNotFound(f.cp.Client.Get(ctx, whole, &corev1.ConfigMap{})))
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// TestPlanKeptByAnEarlierCompositor: an installation upgraded in place has, in the
// definition's namespace, the whole plan an earlier Compositor kept there, with plain
// digests. Narrowing (the next reconciliation) moves it to Compositor's namespace and
// leaves the view in its place; the platform still reads it whole.
func TestPlanKeptByAnEarlierCompositor(t *testing.T) {
	f := newPlanFixture(t)
	ctx := context.Background()
	whole := client.ObjectKey{Namespace: defaultCompositorNamespace, Name: definition.WholePlanConfigMapName(f.def.UID)}
	require.NoError(t, f.keeper.Forget(ctx, f.def))

	// As an earlier Compositor kept it: the whole plan, plain digests, no scope.
	f.follow(t, f.plain)
	key := client.ObjectKey{Namespace: "team-a", Name: definition.PlanConfigMapName("fireworksapp")}
	old := &corev1.ConfigMap{}
	require.NoError(t, f.cp.Client.Get(ctx, key, old))
	b, err := json.Marshal(f.plain.Redacted())
	require.NoError(t, err)
	old.Data = map[string]string{"hash": f.plain.Hash}
	old.BinaryData = map[string][]byte{definition.PlanConfigMapKey: gzipped(t, b)}
	require.NoError(t, f.cp.Client.Update(ctx, old))
	require.True(t, metav1.IsControlledBy(old, f.def))
	guessed := plainDigest(t, f.plain.Compositions[0].Values)
	require.Contains(t, inflated(t, old), guessed)

	require.NoError(t, f.keeper.Narrow(ctx, f.def))
	f.tenant(t, "tenant", true)
	view := &corev1.ConfigMap{}
	require.NoError(t, f.as(t, "tenant").Get(ctx, key, view))
	kept := inflated(t, view)
	assert.NotContains(t, kept, "payroll")
	assert.NotContains(t, kept, guessed)
	assert.Equal(t, "team-a", view.Data["scope"])

	moved := &corev1.ConfigMap{}
	require.NoError(t, f.cp.Client.Get(ctx, whole, moved))
	assert.Contains(t, inflated(t, moved), "payroll-eu-v2-enterprise")
	var out bytes.Buffer
	require.NoError(t, RunPlanDefinition(ctx, &out, &PlanOptions{Kubeconfig: f.cp.Kubeconfig, Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "Plan "+f.plain.Hash)
	assert.Contains(t, out.String(), "\npayroll/payroll-eu-v2-enterprise (release payroll-eu-v2-enterprise): moves\n")

	// Narrowed once, it is left as it is; a ConfigMap of that name that is not
	// Compositor's is never touched.
	require.NoError(t, f.keeper.Narrow(ctx, f.def))
	again := &corev1.ConfigMap{}
	require.NoError(t, f.cp.Client.Get(ctx, key, again))
	assert.Equal(t, view.ResourceVersion, again.ResourceVersion)
	require.NoError(t, controllerutil.RemoveControllerReference(f.def, again, f.cp.Client.Scheme()))
	delete(again.Labels, vocab.LabelManagedBy)
	delete(again.Data, "scope")
	require.NoError(t, f.cp.Client.Update(ctx, again))
	require.NoError(t, f.keeper.Narrow(ctx, f.def))
	require.Error(t, f.keeper.Keep(ctx, f.def, f.whole), "a ConfigMap that is not Compositor's is not overwritten")
}
