// The seal migration: once per installation, at serve's start on the leader and
// before any controller acts, the release records and CompositionRevisions of every
// composition are sealed under the key of the composition's definition (sealkeys.go):
//
//   - records sealed with the master key, as the build before keys per definition
//     sealed them, are sealed again under the definition's key;
//   - in an installation upgraded from a build before records were sealed (no master
//     key Secret existed when the migration was planned), the unsealed records Helm's
//     release type holds, labelled with the UID of a composition of the same UID in
//     the same namespace, and made before the migration was planned, are sealed: what
//     that build trusted (its composition-UID label), and nothing made since.
//
// Neither writes a Helm revision nor a CompositionRevision: only the seal changes. The
// migration is recorded in ConfigMap SealMigrationConfigMap of Compositor's namespace;
// planned before the master key exists, and done once every record is seen to. Run
// again after a restart midway, it does again only what is left, and adopts nothing
// made after it was first planned. Once done, an unsealed record, or one sealed with
// the master key, is refused as before.

package composition

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
)

// SealMigrationConfigMap records the seal migration in Compositor's namespace.
const SealMigrationConfigMap = "compositor-seal-migration"

// Fields of the migration record.
const (
	migrationPlanned       = "planned"       // RFC 3339: records made after it are never adopted
	migrationAdoptUnsealed = "adoptUnsealed" // "true": upgraded from a build before seals
	migrationDone          = "done"          // RFC 3339, once finished
	migrationResealed      = "resealed"      // how many records and revisions were sealed again
	migrationAdopted       = "adopted"       // how many unsealed records were sealed
)

// SealMigration is the migration of one installation (see the top of this file).
type SealMigration struct {
	// Client reads and writes every namespace's release Secrets and revisions, and
	// Compositor's namespace's ConfigMap.
	Client    client.Client
	Namespace string
	Master    *MasterSeal

	done atomic.Bool
	// checked is when a replica that does not run the migration last read its record
	// (Unix nanoseconds).
	checked atomic.Int64
}

// doneRecheck is how often, at most, a replica reads the record to learn that the
// leader finished the migration.
const doneRecheck = time.Second

// Done tells whether the migration is done: run by this process, or recorded done by
// the leader, which a replica that does not lead (and installs on the target clusters
// it holds) reads from the record, at most once per doneRecheck.
func (m *SealMigration) Done() bool {
	if m.done.Load() {
		return true
	}
	now := time.Now().UnixNano()
	if last := m.checked.Load(); last != 0 && now-last < int64(doneRecheck) {
		return false
	}
	m.checked.Store(now)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	record := &corev1.ConfigMap{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: SealMigrationConfigMap}, record); err != nil || record.Data[migrationDone] == "" {
		return false
	}
	m.done.Store(true)
	return true
}

// Plan records the migration before the master key is made: whether the release seal
// Secret (sealSecret) exists says whether the installation's records were ever
// sealed. Every replica may call it; the first record stands.
func (m *SealMigration) Plan(ctx context.Context, sealSecret string) error {
	record := &corev1.ConfigMap{}
	err := m.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: SealMigrationConfigMap}, record)
	if err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	adopt := false
	switch err := m.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: sealSecret}, &corev1.Secret{}); {
	case apierrors.IsNotFound(err):
		adopt = true
	case err != nil:
		return fmt.Errorf("reading the release seal Secret %s/%s: %w", m.Namespace, sealSecret, err)
	}
	record = &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: SealMigrationConfigMap, Labels: map[string]string{vocab.LabelManagedBy: vocab.ManagedBy}},
		Data: map[string]string{
			migrationPlanned:       time.Now().UTC().Format(time.RFC3339Nano),
			migrationAdoptUnsealed: strconv.FormatBool(adopt),
		},
	}
	if err := m.Client.Create(ctx, record); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("recording the seal migration in ConfigMap %s/%s: %w", m.Namespace, SealMigrationConfigMap, err)
	}
	return nil
}

// Start runs the migration, unless it is recorded done, and records it done.
func (m *SealMigration) Start(ctx context.Context) error {
	for {
		err := m.Run(ctx)
		if err == nil {
			return nil
		}
		log.FromContext(ctx).Error(err, "The seal migration did not finish; trying again")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
}

// NeedLeaderElection: only the leader writes records.
func (m *SealMigration) NeedLeaderElection() bool { return true }

// Run does what is left of the migration.
func (m *SealMigration) Run(ctx context.Context) error {
	record := &corev1.ConfigMap{}
	if err := m.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: SealMigrationConfigMap}, record); err != nil {
		return fmt.Errorf("reading the seal migration record %s/%s: %w", m.Namespace, SealMigrationConfigMap, err)
	}
	if record.Data[migrationDone] != "" {
		m.done.Store(true)
		return nil
	}
	planned, err := time.Parse(time.RFC3339Nano, record.Data[migrationPlanned])
	if err != nil {
		return fmt.Errorf("the seal migration record %s/%s: %s: %w", m.Namespace, SealMigrationConfigMap, migrationPlanned, err)
	}
	p := &migrationPass{m: m, adopt: record.Data[migrationAdoptUnsealed] == "true", planned: planned}
	if err := p.run(ctx); err != nil {
		return err
	}
	record.Data[migrationDone] = time.Now().UTC().Format(time.RFC3339)
	record.Data[migrationResealed] = strconv.Itoa(p.resealed)
	record.Data[migrationAdopted] = strconv.Itoa(p.adopted)
	if err := m.Client.Update(ctx, record); err != nil {
		return fmt.Errorf("recording the seal migration done: %w", err)
	}
	log.FromContext(ctx).Info("Sealed the release records under their definitions' keys", "resealed", p.resealed, "adopted", p.adopted)
	m.done.Store(true)
	return nil
}

type migrationPass struct {
	m                 *SealMigration
	adopt             bool
	planned           time.Time
	resealed, adopted int
}

func (p *migrationPass) run(ctx context.Context) error {
	defs := &corev1alpha1.CompositionDefinitionList{}
	if err := p.m.Client.List(ctx, defs); err != nil {
		return fmt.Errorf("listing CompositionDefinitions: %w", err)
	}
	// Every version of a kind lists the same objects: one list per kind.
	kinds := map[schema.GroupKind]string{}
	for i := range defs.Items {
		gv, err := schema.ParseGroupVersion(defs.Items[i].Status.APIVersion)
		if err != nil || defs.Items[i].Status.Kind == "" || gv.Version == "" {
			continue
		}
		kinds[schema.GroupKind{Group: gv.Group, Kind: defs.Items[i].Status.Kind}] = gv.Version
	}
	var errs []error
	for gk, version := range kinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gk.WithVersion(version).GroupVersion().WithKind(gk.Kind + "List"))
		if err := p.m.Client.List(ctx, list); err != nil {
			errs = append(errs, fmt.Errorf("listing the compositions of %s: %w", gk, err))
			continue
		}
		for i := range list.Items {
			obj := &list.Items[i]
			gvk := gk.WithVersion(version)
			if v := obj.GetLabels()[vocab.LabelCompositionVersion]; v != "" {
				gvk.Version = v
			}
			def := KeyDefinition(defs.Items, gvk, obj.GetNamespace())
			if def == nil {
				continue // no definition, no key: its records wait, as the composition does
			}
			seal, err := p.m.Master.ForNamespace(def.Namespace)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, p.records(ctx, obj, seal), p.revisions(ctx, obj, seal))
		}
	}
	return errors.Join(errs...)
}

// records seals obj's release records under seal, those sealed with the master key
// and, when adopting, those unsealed that its build trusted.
func (p *migrationPass) records(ctx context.Context, obj client.Object, seal *ReleaseSeal) error {
	list := &corev1.SecretList{}
	if err := p.m.Client.List(ctx, list, client.InNamespace(obj.GetNamespace()),
		client.MatchingLabels{"owner": "helm", vocab.LabelCompositionUID: string(obj.GetUID())}); err != nil {
		return fmt.Errorf("listing the release records of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	var errs []error
	for i := range list.Items {
		secret := &list.Items[i]
		if secret.Type != releaseSecretType {
			continue
		}
		got, sealed := secret.Annotations[vocab.AnnotationReleaseSeal]
		switch {
		case sealed && got == seal.sum(secret.Namespace, secret):
			continue // sealed under the definition's key already
		case sealed && got == p.m.Master.Legacy().sum(secret.Namespace, secret):
			p.resealed++
		case !sealed && p.adopt && secret.CreationTimestamp.Time.Before(p.planned.Truncate(time.Second)):
			// Creation times have seconds: one of the second it was planned in may
			// be after it, and is not adopted.
			p.adopted++
		default:
			continue // tampered, or made since: refused as it was
		}
		if secret.Annotations == nil {
			secret.Annotations = map[string]string{}
		}
		secret.Annotations[vocab.AnnotationReleaseSeal] = seal.sum(secret.Namespace, secret)
		if err := p.m.Client.Update(ctx, secret); err != nil {
			errs = append(errs, fmt.Errorf("sealing Helm release record %s/%s: %w", secret.Namespace, secret.Name, err))
		}
	}
	return errors.Join(errs...)
}

// revisions seals again under seal obj's revisions sealed with the master key.
func (p *migrationPass) revisions(ctx context.Context, obj client.Object, seal *ReleaseSeal) error {
	list := &corev1alpha1.CompositionRevisionList{}
	if err := p.m.Client.List(ctx, list, client.InNamespace(obj.GetNamespace()),
		client.MatchingLabels{vocab.LabelCompositionUID: string(obj.GetUID())}); err != nil {
		if meta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("listing the CompositionRevisions of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	var errs []error
	for i := range list.Items {
		rev := &list.Items[i]
		if seal.VerifyRevision(rev, obj.GetUID()) == nil || p.m.Master.Legacy().VerifyRevision(rev, obj.GetUID()) != nil {
			continue
		}
		if err := seal.SealRevision(rev); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := p.m.Client.Update(ctx, rev); err != nil {
			errs = append(errs, fmt.Errorf("sealing CompositionRevision %s/%s: %w", rev.Namespace, rev.Name, err))
			continue
		}
		p.resealed++
	}
	return errors.Join(errs...)
}
