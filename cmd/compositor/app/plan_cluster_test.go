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
	"slices"
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
	f.keep(t, f.whole)
	return f
}

// keep keeps p as Compositor does when it plans, and records it, with the digest of
// its view, as the plan def's rollout follows.
func (f *planFixture) keep(t *testing.T, p *plan.Plan) {
	t.Helper()
	f.follow(t, p, "")
	digest, err := f.keeper.Keep(context.Background(), f.def, p)
	require.NoError(t, err)
	f.follow(t, p, digest)
}

// follow records p as the plan def's rollout follows, and viewDigest as the digest of
// its view.
func (f *planFixture) follow(t *testing.T, p *plan.Plan, viewDigest string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, f.cp.Client.Get(ctx, client.ObjectKeyFromObject(f.def), f.def))
	f.def.Status.Rollout = &corev1alpha1.Rollout{From: "1.1.5", To: "2.0.0", FromVersion: "v1-1-5", ToVersion: "v2-0-0", ToDigest: "sha256:new",
		Phase: corev1alpha1.RolloutAwaitingApproval, Plan: corev1alpha1.PlanSummary{Hash: p.Hash, ViewDigest: viewDigest, ToMove: int32(p.Summary.ToMove), Refused: int32(p.Summary.Refused)}}
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
	require.NoError(t, RunPlanDefinition(ctx, &out, io.Discard, &PlanOptions{Kubeconfig: f.cp.Kubeconfig, Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "Plan "+f.whole.Hash)
	assert.Contains(t, out.String(), "\npayroll/payroll-eu-v2-enterprise (release payroll-eu-v2-enterprise): moves\n")
	assert.Contains(t, out.String(), "\npayroll/payroll-refused (release payroll-refused): refused\n")
	assert.Contains(t, out.String(), "\nteam-a/web (release web): moves\n")
	assert.NotContains(t, out.String(), "View of namespace")

	// The tenant's gets team-a's view, and says so.
	out.Reset()
	tenantConfig := f.kubeconfig(t, "tenant")
	require.NoError(t, RunPlanDefinition(ctx, &out, io.Discard, &PlanOptions{Kubeconfig: tenantConfig, Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "fireworks-app 1.1.5 → 2.0.0: 3 compositions to move, 1 refused")
	assert.Contains(t, out.String(), "Plan "+f.whole.Hash)
	assert.Contains(t, out.String(), "View of namespace team-a: its 1 composition (0 refused, 0 objects deleted); the 2 others are in other namespaces")
	assert.Contains(t, out.String(), "\nteam-a/web (release web): moves\n")
	out.Reset()
	require.NoError(t, RunPlanDefinition(ctx, &out, io.Discard, &PlanOptions{Kubeconfig: tenantConfig, Output: "json"}, "team-a", "fireworksapp"))
	for _, s := range secrets {
		assert.NotContains(t, out.String(), s, "the tenant's compositor plan -o json")
	}

	// A view changed by hand is refused.
	view.Data["hash"] = "edited"
	view.BinaryData[definition.PlanConfigMapKey] = gzipped(t, bytes.Replace([]byte(kept), []byte(`"name":"web"`), []byte(`"name":"wob"`), 1))
	require.NoError(t, tenant.Update(ctx, view))
	err = RunPlanDefinition(ctx, io.Discard, io.Discard, &PlanOptions{Kubeconfig: tenantConfig, Output: "text"}, "team-a", "fireworksapp")
	assert.ErrorIs(t, err, plan.ErrAltered)
	// Compositor writes it again as it was at the next plan.
	f.keep(t, f.whole)
	require.NoError(t, RunPlanDefinition(ctx, io.Discard, io.Discard, &PlanOptions{Kubeconfig: tenantConfig, Output: "text"}, "team-a", "fireworksapp"))

	// Who may read neither is told which ConfigMaps.
	f.tenant(t, "outsider", false)
	err = RunPlanDefinition(ctx, io.Discard, io.Discard, &PlanOptions{Kubeconfig: f.kubeconfig(t, "outsider"), Output: "text"}, "team-a", "fireworksapp")
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

	// As an earlier Compositor kept it: the whole plan, plain digests, no scope, and no
	// digest of a view in the status.
	f.follow(t, f.plain, "")
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

	digest, err := f.keeper.Narrow(ctx, f.def)
	require.NoError(t, err)
	require.NotEmpty(t, digest)
	f.follow(t, f.plain, digest)
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
	require.NoError(t, RunPlanDefinition(ctx, &out, io.Discard, &PlanOptions{Kubeconfig: f.cp.Kubeconfig, Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "Plan "+f.plain.Hash)
	assert.Contains(t, out.String(), "\npayroll/payroll-eu-v2-enterprise (release payroll-eu-v2-enterprise): moves\n")

	// The tenant's compositor plan shows the view, verified against the status.
	out.Reset()
	require.NoError(t, RunPlanDefinition(ctx, &out, io.Discard, &PlanOptions{Kubeconfig: f.kubeconfig(t, "tenant"), Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "View of namespace team-a only")

	// Narrowed once, it is left as it is; a ConfigMap of that name that is not
	// Compositor's is never touched.
	same, err := f.keeper.Narrow(ctx, f.def)
	require.NoError(t, err)
	assert.Equal(t, digest, same)
	again := &corev1.ConfigMap{}
	require.NoError(t, f.cp.Client.Get(ctx, key, again))
	assert.Equal(t, view.ResourceVersion, again.ResourceVersion)
	require.NoError(t, controllerutil.RemoveControllerReference(f.def, again, f.cp.Client.Scheme()))
	delete(again.Labels, vocab.LabelManagedBy)
	delete(again.Data, "scope")
	require.NoError(t, f.cp.Client.Update(ctx, again))
	_, err = f.keeper.Narrow(ctx, f.def)
	require.NoError(t, err)
	_, err = f.keeper.Keep(ctx, f.def, f.whole)
	require.Error(t, err, "a ConfigMap that is not Compositor's is not overwritten")
}

// forge is what a tenant of team-a writes in the plan ConfigMap it may write: p edited
// by edit, with its digest (or, for a whole plan, its hash) computed again, as anyone
// can, and the data saying a view (scope) or not.
func (f *planFixture) forge(t *testing.T, as client.Client, p *plan.Plan, edit func(*plan.Plan)) *plan.Plan {
	t.Helper()
	ctx := context.Background()
	edit(p)
	sum := func() string {
		b, err := json.Marshal(p)
		require.NoError(t, err)
		s := sha256.Sum256(b)
		return plan.PlainDigest + hex.EncodeToString(s[:])
	}
	data := map[string]string{"hash": p.Hash}
	if p.Scope != nil {
		p.Scope.Digest = ""
		p.Scope.Digest = sum()
		data["scope"] = p.Scope.Namespace
	} else {
		p.Hash = ""
		p.Hash = sum()
		data["hash"] = p.Hash
	}
	require.NoError(t, p.Check(), "the forgery checks: it says what it holds")
	b, err := json.Marshal(p)
	require.NoError(t, err)
	cm := &corev1.ConfigMap{}
	require.NoError(t, as.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: definition.PlanConfigMapName("fireworksapp")}, cm))
	cm.Data = data
	cm.BinaryData = map[string][]byte{definition.PlanConfigMapKey: gzipped(t, b)}
	require.NoError(t, as.Update(ctx, cm))
	return p
}

// TestForgedViewIsRefused: a tenant of team-a rewrites its view, hiding the plan's
// refusal and RBAC gain, and computes its digest again. Whoever gets the view (a
// tenant; the platform when the whole plan is not where compositor plan looks) is
// refused it: only the digest the definition's status records vouches for a view. The
// genuine view is shown for what it is, verified, with where the whole plan was looked
// for.
func TestForgedViewIsRefused(t *testing.T) {
	f := newPlanFixture(t)
	ctx := context.Background()
	f.tenant(t, "tenant", true)
	tenant := f.as(t, "tenant")
	elsewhere := &PlanOptions{Kubeconfig: f.cp.Kubeconfig, Output: "text", CompositorNamespace: "compositor"}
	whole := client.ObjectKey{Namespace: "compositor", Name: definition.WholePlanConfigMapName(f.def.UID)}

	// The genuine view, to the platform looking in the wrong namespace: said to be a
	// view, verified, and where the whole plan was looked for.
	var out bytes.Buffer
	require.NoError(t, RunPlanDefinition(ctx, &out, io.Discard, elsewhere, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "View of namespace team-a only, from ConfigMap team-a/compositor-plan-fireworksapp, verified against the digest the definition's status records of it")
	assert.Contains(t, out.String(), "the whole plan is not in ConfigMap "+whole.String()+": if Compositor runs in another namespace, name it with --compositor-namespace")
	var stderr bytes.Buffer
	out.Reset()
	require.NoError(t, RunPlanDefinition(ctx, &out, &stderr, &PlanOptions{Kubeconfig: f.cp.Kubeconfig, Output: "json", CompositorNamespace: "compositor"}, "team-a", "fireworksapp"))
	assert.Contains(t, stderr.String(), "View of namespace team-a only")
	assert.NotContains(t, out.String(), "View of namespace", "json stays json")

	cm := &corev1.ConfigMap{}
	require.NoError(t, tenant.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: definition.PlanConfigMapName("fireworksapp")}, cm))
	view, err := definition.DecodeKeptPlan(cm)
	require.NoError(t, err)
	require.Equal(t, 1, view.Summary.Refused)
	f.forge(t, tenant, view, func(p *plan.Plan) {
		p.Summary.Refused, p.RBAC = 0, plan.RBACChange{}
	})
	for name, opts := range map[string]*PlanOptions{
		"the platform":  elsewhere,
		"a tenant":      {Kubeconfig: f.kubeconfig(t, "tenant"), Output: "text"},
		"a tenant json": {Kubeconfig: f.kubeconfig(t, "tenant2"), Output: "json"},
	} {
		if name == "a tenant json" {
			f.tenant(t, "tenant2", true)
		}
		out.Reset()
		err := RunPlanDefinition(ctx, &out, io.Discard, opts, "team-a", "fireworksapp")
		require.ErrorIs(t, err, plan.ErrAltered, name)
		assert.Contains(t, err.Error(), "ConfigMap team-a/compositor-plan-fireworksapp is refused: it is not the view Compositor wrote", name)
		assert.Empty(t, out.String(), name)
	}
	// The platform reading the whole plan where it is sees the truth.
	out.Reset()
	require.NoError(t, RunPlanDefinition(ctx, &out, io.Discard, &PlanOptions{Kubeconfig: f.cp.Kubeconfig, Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "1 refused")

	// A status that records no digest of the view (a plan of an earlier Compositor)
	// verifies no view, not even the genuine one.
	f.keep(t, f.whole)
	f.follow(t, f.whole, "")
	err = RunPlanDefinition(ctx, io.Discard, io.Discard, elsewhere, "team-a", "fireworksapp")
	assert.ErrorIs(t, err, plan.ErrUnrecorded)
	assert.ErrorIs(t, err, ErrNoVerifiedPlan)
}

// TestForgedLegacyPlanIsNotTaken: a tenant of team-a makes its plan ConfigMap look like
// the whole plan an earlier Compositor kept there (its labels and owner are
// Compositor's, its hash computed again). Narrowing takes it for nothing: the whole
// plan of Compositor's namespace stays as it is, or is not made up from it when there
// is none, and the view is written again from what Compositor trusts.
func TestForgedLegacyPlanIsNotTaken(t *testing.T) {
	f := newPlanFixture(t)
	ctx := context.Background()
	f.tenant(t, "tenant", true)
	tenant := f.as(t, "tenant")
	whole := client.ObjectKey{Namespace: defaultCompositorNamespace, Name: definition.WholePlanConfigMapName(f.def.UID)}
	recorded := f.def.Status.Rollout.Plan.ViewDigest
	require.NotEmpty(t, recorded)
	real := &corev1.ConfigMap{}
	require.NoError(t, f.cp.Client.Get(ctx, whole, real))

	forged := func() {
		f.forge(t, tenant, f.whole.Redacted(), func(p *plan.Plan) {
			p.Compositions = slices.DeleteFunc(p.Compositions, func(c plan.Composition) bool { return len(c.Refused) > 0 })
			p.Summary.Refused, p.RBAC = 0, plan.RBACChange{}
		})
	}
	forged()
	digest, err := f.keeper.Narrow(ctx, f.def)
	require.NoError(t, err)
	assert.Equal(t, recorded, digest, "the view is written again from the whole plan")
	kept := &corev1.ConfigMap{}
	require.NoError(t, f.cp.Client.Get(ctx, whole, kept))
	assert.Equal(t, real.ResourceVersion, kept.ResourceVersion, "the whole plan is not replaced")
	assert.Contains(t, inflated(t, kept), "payroll-refused")
	view := &corev1.ConfigMap{}
	require.NoError(t, f.cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: definition.PlanConfigMapName("fireworksapp")}, view))
	assert.Equal(t, "team-a", view.Data["scope"])
	var out bytes.Buffer
	require.NoError(t, RunPlanDefinition(ctx, &out, io.Discard, &PlanOptions{Kubeconfig: f.kubeconfig(t, "tenant"), Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "3 compositions to move, 1 refused")

	// Without a whole plan in Compositor's namespace, none is made of the forgery: the
	// view has the status's counts.
	require.NoError(t, f.keeper.Forget(ctx, f.def))
	forged()
	digest, err = f.keeper.Narrow(ctx, f.def)
	require.NoError(t, err)
	assert.True(t, apierrors.IsNotFound(f.cp.Client.Get(ctx, whole, &corev1.ConfigMap{})), "no whole plan is made of the forgery")
	require.NoError(t, f.cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: definition.PlanConfigMapName("fireworksapp")}, view))
	counts, err := definition.DecodeKeptPlan(view)
	require.NoError(t, err)
	assert.Empty(t, counts.Compositions)
	assert.Equal(t, 1, counts.Summary.Refused)
	assert.Equal(t, counts.Scope.Digest, digest)
}

// TestRolloutOfATeamNamespace: compositor plan prints, before the plan, the rollout's
// compositions of every namespace from its record in Compositor's namespace to the
// platform, and to a tenant of the definition's namespace only that namespace's, from
// the status, saying that it may not read the record.
func TestRolloutOfATeamNamespace(t *testing.T) {
	f := newPlanFixture(t)
	ctx := context.Background()
	at := metav1.Now()
	rec := &definition.RolloutRecord{Definition: "team-a/fireworksapp", From: "1.1.5", To: "2.0.0", FromVersion: "v1-1-5", ToVersion: "v2-0-0",
		ToDigest: "sha256:new", Plan: f.whole.Hash,
		Moved:  []corev1alpha1.MovedComposition{{Name: "payroll/payroll-eu-v2-enterprise", Generation: 1, At: at}, {Name: "team-a/web", Generation: 1, At: at}},
		Failed: []string{"payroll/payroll-eu-v2-enterprise: InstallFailed: payroll-eu-v2-enterprise-config is invalid"},
		Stayed: []string{"payroll/payroll-refused: spec.exposure: external is not allowed"},
	}
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err = zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	key := client.ObjectKey{Namespace: defaultCompositorNamespace, Name: definition.RolloutRecordName(f.def.UID)}
	require.NoError(t, f.cp.Client.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{
			vocab.LabelManagedBy: vocab.ManagedBy, vocab.LabelDefinitionNamespace: "team-a", vocab.LabelDefinitionName: "fireworksapp"}},
		BinaryData: map[string][]byte{definition.RolloutRecordKey: gz.Bytes()},
	}))
	require.NoError(t, f.cp.Client.Get(ctx, client.ObjectKeyFromObject(f.def), f.def))
	ro := f.def.Status.Rollout
	ro.Phase, ro.Record, ro.Ready = corev1alpha1.RolloutProgressing, key.String(), 1
	ro.Moved, ro.MovedCount, ro.FailedCount, ro.StayedCount = rec.Moved[1:], 2, 1, 1
	require.NoError(t, f.cp.Client.Status().Update(ctx, f.def))

	var out bytes.Buffer
	require.NoError(t, RunPlanDefinition(ctx, &out, io.Discard, &PlanOptions{Kubeconfig: f.cp.Kubeconfig, Output: "text"}, "team-a", "fireworksapp"))
	assert.Contains(t, out.String(), "Every namespace's compositions, from the rollout's record, ConfigMap "+key.String()+": 2 moved (1 Ready), 0 to move, 1 failed, 1 stayed on 1.1.5\n")
	assert.Contains(t, out.String(), "Failed:\n  payroll/payroll-eu-v2-enterprise: InstallFailed")
	assert.Contains(t, out.String(), "Stayed:\n  payroll/payroll-refused: ")
	assert.Contains(t, out.String(), "\n  team-a/web (at ")

	f.tenant(t, "tenant", true)
	out.Reset()
	var notices bytes.Buffer
	require.NoError(t, RunPlanDefinition(ctx, &out, &notices, &PlanOptions{Kubeconfig: f.kubeconfig(t, "tenant"), Output: "text"}, "team-a", "fireworksapp"))
	assert.NotContains(t, out.String(), "payroll")
	assert.Contains(t, out.String(), "Rollout of namespace team-a only, from the definition's status (2 moved (1 Ready), 0 to move, 1 failed, 1 stayed on 1.1.5 in every namespace); you may not read the rollout's record, ConfigMap "+key.String()+" (the platform's).\n")
	assert.Contains(t, out.String(), "Moved of namespace team-a:\n  team-a/web (at ")
	out.Reset()
	require.NoError(t, RunPlanDefinition(ctx, &out, &notices, &PlanOptions{Kubeconfig: f.kubeconfig(t, "tenant"), Output: "json"}, "team-a", "fireworksapp"))
	assert.Contains(t, notices.String(), "you may not read the rollout's record")
	assert.NotContains(t, out.String()+notices.String(), "payroll")
}
