package composition

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	releasecommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/test/controlplane"
)

func testMaster(t testing.TB) *MasterSeal {
	t.Helper()
	m, err := NewMasterSeal(NewSealKey())
	require.NoError(t, err)
	return m
}

// Issue 46: each definition's key is derived from the master key and its namespace; it
// is the same for the same namespace (one team's definitions share it), another for
// another namespace or another master, never the master itself; its Secret's name
// depends on the definition's UID alone.
func TestDefinitionKeysDifferPerDefinition(t *testing.T) {
	m := testMaster(t)
	x, err := m.ForNamespace("team-x")
	require.NoError(t, err)
	again, err := m.ForNamespace("team-x")
	require.NoError(t, err)
	y, err := m.ForNamespace("team-y")
	require.NoError(t, err)
	other, err := testMaster(t).ForNamespace("team-x")
	require.NoError(t, err)
	assert.Equal(t, x.key, again.key)
	assert.Len(t, x.key, minSealKey)
	for _, k := range [][]byte{y.key, other.key, m.master.key} {
		assert.False(t, bytes.Equal(x.key, k))
	}
	_, err = m.ForNamespace("")
	assert.ErrorIs(t, err, ErrSealUnavailable)
	assert.Equal(t, KeySecretName("uid-x"), KeySecretName("uid-x"))
	assert.NotEqual(t, KeySecretName("uid-x"), KeySecretName("uid-y"))
	assert.Regexp(t, `^compositor-seal-[0-9a-f]{24}$`, KeySecretName("uid-x"))

	// A gate holds every key back until it opens.
	open := false
	gated := m.GateOn(func() bool { return open })
	def := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "team-x", UID: "uid-x"}}
	_, err = gated.SealFor(context.Background(), def)
	assert.ErrorIs(t, err, ErrSealUnavailable)
	open = true
	seal, err := gated.SealFor(context.Background(), def)
	require.NoError(t, err)
	assert.Equal(t, x.key, seal.key)
}

// Issue 46: a record sealed under definition X's key is refused by Y's, in X's
// namespace and copied into Y's; and X's own key refuses the copy, whose namespace is
// not the one it sealed.
func TestARecordOfOneDefinitionIsRefusedByAnother(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"team-x", "team-y"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	m := testMaster(t)
	x, err := m.ForNamespace("team-x")
	require.NoError(t, err)
	y, err := m.ForNamespace("team-y")
	require.NoError(t, err)
	ch := &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "keys", Version: "0.1.0"},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-cm'}\n")}},
	}
	hx, err := NewHelm(cp.Config, nil, logr.Discard())
	require.NoError(t, err)
	_, _, err = hx.Sealed(x).UpgradeInstall(ctx, "team-x", "shop", ch, nil, InstallOptions{})
	require.NoError(t, err)
	_, err = hx.Sealed(x).lastRelease("team-x", "shop")
	require.NoError(t, err, "X's key reads X's record")
	_, err = hx.Sealed(y).lastRelease("team-x", "shop")
	assert.True(t, isTampered(err), "Y's key refuses X's record: %v", err)
	_, err = hx.Actions("team-x")
	assert.ErrorIs(t, err, errNoSeal, "Helm without a seal acts on nothing")

	record := &corev1.Secret{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-x", Name: "sh.helm.release.v1.shop.v1"}, record))
	copied := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-y", Name: record.Name, Labels: record.Labels, Annotations: record.Annotations},
		Type:       record.Type, Data: record.Data,
	}
	require.NoError(t, cp.Client.Create(ctx, copied))
	_, err = hx.Sealed(y).lastRelease("team-y", "shop")
	assert.True(t, isTampered(err), "a record copied from X's namespace into Y's is refused by Y: %v", err)
	_, err = hx.Sealed(x).lastRelease("team-y", "shop")
	assert.True(t, isTampered(err), "and by X, whose seal names X's namespace: %v", err)

	// The same for revisions.
	rev := sealedRevision(t, x, "uid-shop", 1)
	assert.NoError(t, x.VerifyRevision(rev, "uid-shop"))
	assert.Error(t, y.VerifyRevision(rev, "uid-shop"), "Y's key refuses X's revision")
	assert.Error(t, m.Legacy().VerifyRevision(rev, "uid-shop"), "so does the master key")
}

// migrationFixture is a cluster with one generated kind, a definition serving it in
// team-x, and its compositions.
type migrationFixture struct {
	cp  *controlplane.ControlPlane
	def *corev1alpha1.CompositionDefinition
	gvk schema.GroupVersionKind
}

func newMigrationFixture(t *testing.T) *migrationFixture {
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"team-x", "compositor-a", "compositor-b"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	gvk := schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: "v1-1-5", Kind: "FireworksApp"}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "fireworksapps." + vocab.CompositionGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: vocab.CompositionGroup, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "fireworksapps", Singular: "fireworksapp", Kind: "FireworksApp", ListKind: "FireworksAppList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: gvk.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	require.NoError(t, cp.Client.Create(ctx, crd))
	def := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "team-x", Name: "fireworks"}}
	def.Spec.Chart.URL = "oci://example.test/fireworks-app"
	def.Spec.Chart.Version = "1.1.5"
	require.NoError(t, cp.Client.Create(ctx, def))
	def.Status.Kind, def.Status.APIVersion = gvk.Kind, gvk.GroupVersion().String()
	require.NoError(t, cp.Client.Status().Update(ctx, def))
	require.Eventually(t, func() bool {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind("FireworksAppList"))
		return cp.Client.List(ctx, list) == nil
	}, 30*time.Second, 100*time.Millisecond, "the CRD is served")
	return &migrationFixture{cp: cp, def: def, gvk: gvk}
}

func (f *migrationFixture) composition(t *testing.T, name string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(f.gvk)
	obj.SetNamespace("team-x")
	obj.SetName(name)
	obj.SetLabels(map[string]string{vocab.LabelCompositionVersion: f.gvk.Version})
	require.NoError(t, f.cp.Client.Create(context.Background(), obj))
	return obj
}

// record stores a release record of the composition uid, as Helm lays it out, sealed
// with seal, or unsealed (as a build before seals wrote it) when seal is nil.
func (f *migrationFixture) record(t *testing.T, name string, uid types.UID, seal *ReleaseSeal) *corev1.Secret {
	rel := &release.Release{
		Name: name, Namespace: "team-x", Version: 1,
		Info:   &release.Info{Status: releasecommon.StatusDeployed},
		Chart:  &chart.Chart{Metadata: &chart.Metadata{Name: "fireworks-app", Version: "1.1.5"}},
		Labels: map[string]string{vocab.LabelCompositionUID: string(uid)},
	}
	d := &sealedSecrets{namespace: "team-x", seal: seal}
	if seal == nil {
		d.seal = testSeal(t)
	}
	secret, err := d.record("sh.helm.release.v1."+name+".v1", rel, "createdAt")
	require.NoError(t, err)
	if seal == nil {
		secret.Annotations = nil
	}
	require.NoError(t, f.cp.Client.Create(context.Background(), secret))
	return secret
}

// opens tells whether the release name's records in team-x hold under seal.
func (f *migrationFixture) opens(t *testing.T, seal *ReleaseSeal, name string) error {
	clients, err := kubernetes.NewForConfig(f.cp.Config)
	require.NoError(t, err)
	d := &sealedSecrets{secrets: clients.CoreV1().Secrets("team-x"), namespace: "team-x", seal: seal}
	_, err = d.Query(map[string]string{"name": name, "owner": "helm"})
	return err
}

// afterThisSecond waits until the clock is past the second of at, so that what is
// made next has a later creation time.
func afterThisSecond(at metav1.Time) {
	time.Sleep(time.Until(at.Add(time.Second)))
}

// Issue 46: in an installation upgraded from a build before records were sealed (no
// master key when the migration is planned), the migration seals, under the key of
// the composition's definition, the unsealed records that build trusted — Helm's
// type, labelled with the UID of a composition in the same namespace, made before the
// migration — and re-seals those sealed with the master key, revisions too; it leaves
// every other record as it was, is recorded, and changes nothing run again. A record
// forged after it stays refused.
func TestSealMigrationAdoptsWhatTheOlderBuildTrustedOnce(t *testing.T) {
	f := newMigrationFixture(t)
	ctx := context.Background()
	c := f.cp.Client
	m := testMaster(t)
	a, b := f.composition(t, "a"), f.composition(t, "b")
	seal, err := m.ForNamespace(f.def.Namespace)
	require.NoError(t, err)
	stranger, err := m.ForNamespace("another-team")
	require.NoError(t, err)

	early := f.record(t, "a", a.GetUID(), nil)                // ffea0ea's record of a
	f.record(t, "nobody", "uid-of-no-composition", nil)       // a helm install by hand
	f.record(t, "b", b.GetUID(), m.Legacy())                  // sealed with the master key
	f.record(t, "other-key", a.GetUID(), stranger)            // another definition's key
	legacyRev := sealedRevision(t, m.Legacy(), b.GetUID(), 1) // a revision under the master key
	legacyRev.Namespace, legacyRev.Name = "team-x", RevisionName("FireworksApp", "b", b.GetUID(), 1)
	legacyRev.Labels = map[string]string{vocab.LabelCompositionUID: string(b.GetUID())}
	require.NoError(t, m.Legacy().SealRevision(legacyRev))
	require.NoError(t, c.Create(ctx, legacyRev))
	afterThisSecond(early.CreationTimestamp)

	migration := &SealMigration{Client: c, Namespace: "compositor-a", Master: m}
	require.NoError(t, migration.Plan(ctx, "compositor-release-seal"))
	record := &corev1.ConfigMap{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "compositor-a", Name: SealMigrationConfigMap}, record))
	assert.Equal(t, "true", record.Data[migrationAdoptUnsealed], "no master key existed: records were never sealed")
	// Planned again (another replica, a restart), the first record stands.
	require.NoError(t, migration.Plan(ctx, "compositor-release-seal"))
	// The master key is made after the plan, as serve makes it.
	require.NoError(t, c.Create(ctx, SealSecret("compositor-a", "compositor-release-seal", m.master.key)))
	planned := &corev1.ConfigMap{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "compositor-a", Name: SealMigrationConfigMap}, planned))
	assert.Equal(t, record.Data, planned.Data)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "team-x", Name: early.Name}, early))
	afterThisSecond(early.CreationTimestamp)
	late := f.record(t, "late", a.GetUID(), nil) // made after the plan: never adopted

	for _, name := range []string{"a", "b"} {
		assert.True(t, isTampered(f.opens(t, seal, name)), "%s: before the migration the definition's key refuses it", name)
	}
	assert.False(t, migration.Done())
	require.NoError(t, migration.Run(ctx))
	assert.True(t, migration.Done())

	assert.NoError(t, f.opens(t, seal, "a"), "the unsealed record of composition a is sealed under its definition's key")
	assert.NoError(t, f.opens(t, seal, "b"), "the master-sealed record of b is sealed again under its definition's key")
	assert.True(t, isTampered(f.opens(t, m.Legacy(), "b")), "and no longer holds under the master key")
	for _, name := range []string{"nobody", "other-key", "late"} {
		assert.True(t, isTampered(f.opens(t, seal, name)), "%s is refused as before", name)
	}
	got := &corev1alpha1.CompositionRevision{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(legacyRev), got))
	assert.NoError(t, seal.VerifyRevision(got, b.GetUID()), "the revision is sealed again under the definition's key")
	assert.Equal(t, legacyRev.Spec.Raw, got.Spec.Raw, "nothing but its seal changed")
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "compositor-a", Name: SealMigrationConfigMap}, record))
	assert.NotEmpty(t, record.Data[migrationDone])
	assert.Equal(t, "2", record.Data[migrationResealed])
	assert.Equal(t, "1", record.Data[migrationAdopted])

	// Once done, run again (a restart, a new leader): nothing changes, and a record
	// forged since stays refused.
	forged := f.record(t, "forged", a.GetUID(), nil)
	secrets := &corev1.SecretList{}
	require.NoError(t, c.List(ctx, secrets, client.InNamespace("team-x")))
	versions := map[string]string{}
	for _, s := range secrets.Items {
		versions[s.Name] = s.ResourceVersion
	}
	again := &SealMigration{Client: c, Namespace: "compositor-a", Master: m}
	require.NoError(t, again.Run(ctx))
	assert.True(t, again.Done())
	require.NoError(t, c.List(ctx, secrets, client.InNamespace("team-x")))
	for _, s := range secrets.Items {
		assert.Equal(t, versions[s.Name], s.ResourceVersion, "%s is untouched", s.Name)
	}
	assert.True(t, isTampered(f.opens(t, seal, "forged")), "an unsealed record made after the migration is refused: %s", forged.Name)
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(late), late))
	assert.Empty(t, late.Annotations[vocab.AnnotationReleaseSeal])
}

// Issue 46: an installation whose records were sealed (the master key existed when the
// migration was planned) adopts no unsealed record: its build refused them. A restart
// midway does again only what is left.
func TestSealMigrationOfASealedInstallationAdoptsNothing(t *testing.T) {
	f := newMigrationFixture(t)
	ctx := context.Background()
	c := f.cp.Client
	m := testMaster(t)
	a := f.composition(t, "a")
	seal, err := m.ForNamespace(f.def.Namespace)
	require.NoError(t, err)
	unsealed := f.record(t, "a", a.GetUID(), nil)
	f.record(t, "b", a.GetUID(), m.Legacy())
	afterThisSecond(unsealed.CreationTimestamp)
	require.NoError(t, c.Create(ctx, SealSecret("compositor-b", "compositor-release-seal", m.master.key)))

	migration := &SealMigration{Client: c, Namespace: "compositor-b", Master: m}
	require.NoError(t, migration.Plan(ctx, "compositor-release-seal"))
	// A pass cut short: the master-sealed record was sealed again, the record not
	// written done.
	p := &migrationPass{m: migration, planned: time.Now()}
	require.NoError(t, p.run(ctx))
	assert.Equal(t, 1, p.resealed)
	// Another replica, which does not lead and so never runs it, gives no key until the
	// record says the migration is done, then learns it from the record.
	follower := &SealMigration{Client: c, Namespace: "compositor-b", Master: m}
	assert.False(t, follower.Done(), "not done yet")
	require.NoError(t, migration.Run(ctx))
	assert.True(t, migration.Done())
	follower.checked.Store(0) // past doneRecheck
	assert.True(t, follower.Done(), "the follower reads the record the leader wrote done")
	record := &corev1.ConfigMap{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "compositor-b", Name: SealMigrationConfigMap}, record))
	assert.Equal(t, "false", record.Data[migrationAdoptUnsealed])
	assert.Equal(t, "0", record.Data[migrationResealed], "the pass after the restart had nothing left")
	assert.Equal(t, "0", record.Data[migrationAdopted])
	assert.NoError(t, f.opens(t, seal, "b"))
	assert.True(t, isTampered(f.opens(t, seal, "a")), "the unsealed record stays refused")
}
