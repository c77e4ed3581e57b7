// Package chartstore is where Compositor gets a CompositionDefinition's chart: fetched
// from its source with the definition's credentials, its content pinned to the digest
// the definition recorded, and kept in memory by digest for the composition
// controllers, the audit and the admission webhooks.
package chartstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/internal/condition"
)

// Reasons of the conditions of a definition whose chart cannot be fetched.
const (
	ReasonChartFetchFailed      = "ChartFetchFailed"
	ReasonCredentialsNotFound   = "CredentialsNotFound"
	ReasonCredentialsNotAllowed = "CredentialsNotAllowed"
)

// maxLoadedCharts bounds the charts Source keeps loaded in memory.
const maxLoadedCharts = 64

// Source fetches the charts of CompositionDefinitions, reading their credentials, and
// keeps the loaded charts in memory by digest so that the admission webhooks find a
// definition's chart without a network round trip.
type Source struct {
	// Fetcher downloads and caches chart archives.
	Fetcher *chartfetch.Fetcher
	// Live reads Secrets from the API server; Compositor never caches them.
	Live client.Reader
	// Store keeps the archives of fetched charts in the cluster, so that a chart once
	// fetched needs no chart source again; nil keeps them in memory only.
	Store *Store

	once   sync.Once
	loaded *lru.Cache // digest → *chart.Chart, the least recently used evicted first
}

func (c *Source) memory() *lru.Cache {
	c.once.Do(func() { c.loaded = lru.New(maxLoadedCharts) })
	return c.loaded
}

// Fetch fetches the definition's chart from its source: an imported chart from the
// cluster, any other from its chart source.
func (c *Source) Fetch(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*chartfetch.Result, error) {
	var result *chartfetch.Result
	if name, imported, err := ParseImportedURL(def.Spec.Chart.URL); imported {
		if err != nil {
			return nil, &condition.Error{Reason: ReasonChartFetchFailed, Terminal: true, Err: err}
		}
		if result, err = c.fetchImported(ctx, def, name); err != nil {
			return nil, &condition.Error{Reason: ReasonChartFetchFailed, Err: err}
		}
	} else {
		ref, err := c.ref(ctx, def)
		if err != nil {
			return nil, err
		}
		if result, err = c.Fetcher.Fetch(ctx, ref); err != nil {
			return nil, &condition.Error{Reason: ReasonChartFetchFailed, Err: err}
		}
	}
	c.remember(result.Digest, result.Chart)
	if err := checkPinned(def, result.Digest); err != nil {
		return nil, err
	}
	return result, nil
}

// ref is where the definition's chart is, with the credentials read from their Secret.
func (c *Source) ref(ctx context.Context, def *corev1alpha1.CompositionDefinition) (chartfetch.Ref, error) {
	spec := def.Spec.Chart
	ref := chartfetch.Ref{
		URL:                   spec.URL,
		Repo:                  spec.Repo,
		Version:               spec.Version,
		InsecureSkipVerifyTLS: spec.InsecureSkipVerifyTLS,
	}
	if spec.Credentials != nil {
		password, err := c.secretKey(ctx, def, spec.Credentials.PasswordRef, "spec.chart.credentials.passwordRef", ReasonCredentialsNotAllowed, ReasonCredentialsNotFound)
		if err != nil {
			return ref, err
		}
		ref.Username, ref.Password = spec.Credentials.Username, string(password)
	}
	return ref, nil
}

// fetchImported reads the chart imported as name (imported://NAME) in the version the
// spec names, checked and loaded as a downloaded archive is.
func (c *Source) fetchImported(ctx context.Context, def *corev1alpha1.CompositionDefinition, name string) (*chartfetch.Result, error) {
	version := def.Spec.Chart.Version
	if version == "" {
		return nil, fmt.Errorf("spec.chart.version is required for the imported chart %s", name)
	}
	if c.Store == nil {
		return nil, fmt.Errorf("%w: this Compositor keeps no charts in the cluster", ErrNotImported)
	}
	im, err := c.Store.Imported(ctx, name, version)
	if err != nil {
		return nil, err
	}
	ch, err := c.Fetcher.Load(chartfetch.Ref{Repo: name, Version: version}, im.Archive)
	if err != nil {
		return nil, fmt.Errorf("loading the imported chart %s %s: %w", name, version, err)
	}
	return &chartfetch.Result{Chart: ch, Digest: im.Digest, PackageURL: ImportedScheme + "://" + name + ":" + version, Archive: im.Archive}, nil
}

// ReasonChartChanged: the chart source serves other bytes for the version a
// definition recorded; nothing of them is used until a person accepts them.
const ReasonChartChanged = "ChartChanged"

// ErrChartChanged means a chart version's content differs from the digest its
// definition recorded.
var ErrChartChanged = errors.New("the chart source serves different content for the same chart version")

// checkPinned refuses content whose digest is not the one the definition recorded for
// the chart version its spec names (pinnedChart: the version its status serves, or
// one it retains), unless a person accepted that digest with
// AnnotationAcceptChartDigest. A new chart version records its first digest.
func checkPinned(def *corev1alpha1.CompositionDefinition, digest string) error {
	pinned, ok := pinnedChart(def)
	if !ok || pinned.Digest == "" || pinned.Digest == digest || def.Annotations[vocab.AnnotationAcceptChartDigest] == digest {
		return nil
	}
	return &condition.Error{Reason: ReasonChartChanged, Terminal: true, Err: fmt.Errorf(
		"%w: chart %s %s was recorded as %s and is now %s; nothing of the new content is used. If the change is expected, accept it: kubectl annotate compositiondefinition %s -n %s %s=%s",
		ErrChartChanged, def.Spec.Chart.Repo, def.Spec.Chart.Version, pinned.Digest, digest, def.Name, def.Namespace, vocab.AnnotationAcceptChartDigest, digest)}
}

// pinnedChart is the served chart whose chart version is the one the spec names, whose
// digest pins that version's content: the status's when its status serves that chart
// version, else the retained one of that chart version (status.retained, a version
// compositions are still pinned to after the definition moved on, which the spec may
// move back to). ok is false when the definition serves no chart of that version.
func pinnedChart(def *corev1alpha1.CompositionDefinition) (corev1alpha1.ServedChart, bool) {
	version := def.Spec.Chart.Version
	if version == "" {
		return corev1alpha1.ServedChart{}, false
	}
	for _, r := range def.Status.Retained {
		if r.Chart == version && r.APIVersion != def.Status.APIVersion {
			return r, true
		}
	}
	// The status's version, or (a view of ownership.At) the retained one it describes.
	for _, v := range def.Status.Managed.VersionInfo {
		if v.Served && v.Chart == version {
			return corev1alpha1.ServedChart{APIVersion: def.Status.APIVersion, Chart: version, Digest: def.Status.Digest, PackageURL: def.Status.PackageURL}, true
		}
	}
	return corev1alpha1.ServedChart{}, false
}

// Chart returns the chart the definition serves, the content of its status digest and
// nothing else, and only under a record of its check when spec.chart.verify asks for one
// (ErrNotVerified): from memory when it was loaded before, else from the archive kept in
// the cluster, else from its chart source.
func (c *Source) Chart(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*chart.Chart, string, error) {
	if err := checkVerified(def); err != nil {
		return nil, "", err
	}
	var storeErr error
	if digest := def.Status.Digest; digest != "" {
		if ch, ok := c.memory().Get(digest); ok {
			return ch.(*chart.Chart), digest, nil
		}
		ch, err := c.stored(ctx, digest)
		if err == nil {
			return ch, digest, nil
		}
		if !errors.Is(err, ErrNotStored) {
			storeErr = err
		}
	}
	result, err := c.Fetch(ctx, def)
	if err != nil {
		return nil, "", errors.Join(err, storeErr)
	}
	if pinned := def.Status.Digest; pinned != "" && result.Digest != pinned {
		// Another chart version than the status describes (the spec moved on): its
		// definition records it first; until then it is not used.
		return nil, "", fmt.Errorf("%w: the definition records %s, the source serves %s for chart version %s",
			ErrChartChanged, pinned, result.Digest, def.Spec.Chart.Version)
	}
	return result.Chart, result.Digest, nil
}

// Keep stores the fetched archive in the cluster, unless it is there already.
func (c *Source) Keep(ctx context.Context, fetched *chartfetch.Result) error {
	if c.Store == nil {
		return nil
	}
	if _, err := c.Store.Get(ctx, fetched.Digest); err == nil {
		return nil
	}
	return c.Store.Put(ctx, fetched.Digest, fetched.Archive)
}

// Kept is the chart of the chart version the definition's spec names, from the
// archive kept in the cluster, when the definition serves that chart version (its
// status does, or it retains it: pinnedChart): what the reconciler goes on with while
// the chart source is down.
func (c *Source) Kept(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*chartfetch.Result, error) {
	pinned, ok := pinnedChart(def)
	if !ok || pinned.Digest == "" {
		return nil, ErrNotStored
	}
	ch, ok := c.memory().Get(pinned.Digest)
	if !ok {
		var err error
		if ch, err = c.stored(ctx, pinned.Digest); err != nil {
			return nil, err
		}
	}
	return &chartfetch.Result{Chart: ch.(*chart.Chart), Digest: pinned.Digest, PackageURL: pinned.PackageURL, FromCache: true}, nil
}

// stored loads the chart of digest from the archive kept in the cluster, checked as a
// downloaded archive is.
func (c *Source) stored(ctx context.Context, digest string) (*chart.Chart, error) {
	if c.Store == nil {
		return nil, ErrNotStored
	}
	data, err := c.Store.Get(ctx, digest)
	if err != nil {
		return nil, err
	}
	ch, err := c.Fetcher.Load(chartfetch.Ref{}, data)
	if err != nil {
		return nil, fmt.Errorf("loading the chart archive of %s kept in the cluster: %w", digest, err)
	}
	c.remember(digest, ch)
	return ch, nil
}

func (c *Source) remember(digest string, ch *chart.Chart) {
	c.memory().Add(digest, ch)
}

// secretKey reads one key of a Secret the definition names at field. Only a Secret in
// the definition's own namespace is read: a definition must not be a way to read
// another team's Secrets.
func (c *Source) secretKey(ctx context.Context, def *corev1alpha1.CompositionDefinition, ref corev1alpha1.SecretKeySelector, field, notAllowed, notFound string) ([]byte, error) {
	if ref.Namespace != def.Namespace {
		return nil, &condition.Error{Reason: notAllowed, Terminal: true, Err: fmt.Errorf(
			"%s.namespace is %q: the Secret must be in the definition's namespace %q", field, ref.Namespace, def.Namespace)}
	}
	secret := &corev1.Secret{}
	if err := c.Live.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &condition.Error{Reason: notFound, Err: fmt.Errorf("the Secret %s/%s of %s does not exist", ref.Namespace, ref.Name, field)}
		}
		return nil, fmt.Errorf("reading the Secret %s/%s of %s: %w", ref.Namespace, ref.Name, field, err)
	}
	value, ok := secret.Data[ref.Key]
	if !ok {
		return nil, &condition.Error{Reason: notFound, Err: fmt.Errorf("the Secret %s/%s of %s has no key %q", ref.Namespace, ref.Name, field, ref.Key)}
	}
	return value, nil
}
