package composition

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	ri "helm.sh/helm/v4/pkg/release"
	releasecommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
)

// Helm writes the objects of a release as vocab.FieldManager, whatever the binary's
// name: a field manager that changed between two upgrades would leave the fields of
// the first behind, each a conflict for server-side apply (docs/architecture.md).
func init() { kube.ManagedFieldsManager = vocab.FieldManager }

// maxReleaseHistory bounds the release Secrets Helm keeps per composition.
const maxReleaseHistory = 10

// Helm runs Helm actions with one identity: the REST config it is built from, so that
// Helm and the controller's client are the same user for the API server.
type Helm struct {
	config    *rest.Config
	seal      *ReleaseSeal
	discovery discovery.CachedDiscoveryInterface
	mapper    meta.RESTMapper
	log       logr.Logger
	live      *objectsClient                // reads the objects of releases (health.go)
	caps      *policies.ClusterCapabilities // the cluster's, for the charts' .Capabilities
}

// NewHelm returns Helm acting as the user of cfg, reading and writing release records
// sealed with seal (releasestore.go); without a seal it acts on no release.
func NewHelm(cfg *rest.Config, seal *ReleaseSeal, log logr.Logger) (*Helm, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a discovery client for Helm: %w", err)
	}
	cached := memory.NewMemCacheClient(dc)
	return &Helm{
		config:    rest.CopyConfig(cfg),
		seal:      seal,
		discovery: cached,
		mapper:    restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil),
		log:       log,
		live:      &objectsClient{},
		caps:      policies.NewClusterCapabilities(cached),
	}, nil
}

// As returns Helm acting as the user of cfg, sharing h's discovery and REST mapper:
// what the API server serves is the same for every user, and each copy of it costs
// memory in proportion to the number of kinds served.
func (h *Helm) As(cfg *rest.Config) *Helm {
	return &Helm{config: rest.CopyConfig(cfg), seal: h.seal, discovery: h.discovery, mapper: h.mapper, log: h.log, live: &objectsClient{}, caps: h.caps}
}

// Getter returns the RESTClientGetter Helm uses for releases in namespace.
func (h *Helm) Getter(namespace string, clusterResources ...schema.GroupResource) genericclioptions.RESTClientGetter {
	return &restClientGetter{helm: h, namespace: namespace, clusterResources: clusterResources}
}

// restClientGetter gives Helm the Helm's config, its shared discovery and a namespace.
type restClientGetter struct {
	helm      *Helm
	namespace string
	// clusterResources are the cluster-scoped resources the definition lets its
	// compositions create, which Helm may therefore reach.
	clusterResources []schema.GroupResource
}

var _ genericclioptions.RESTClientGetter = (*restClientGetter)(nil)

// ToRESTConfig is Helm's config confined to the release namespace: Helm's client and
// the templates' lookup reach nothing outside it.
func (g *restClientGetter) ToRESTConfig() (*rest.Config, error) {
	return confineToNamespace(g.helm.config, g.namespace, g.clusterResources...), nil
}

func (g *restClientGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.helm.discovery, nil
}

func (g *restClientGetter) ToRESTMapper() (meta.RESTMapper, error) {
	return g.helm.mapper, nil
}

func (g *restClientGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return &namespacedConfig{config: g.helm.config, namespace: g.namespace, clusterResources: g.clusterResources}
}

// namespacedConfig is the kubeconfig loader Helm asks for: it knows no kubeconfig file,
// only the REST config and the release namespace.
type namespacedConfig struct {
	config           *rest.Config
	namespace        string
	clusterResources []schema.GroupResource
}

func (c *namespacedConfig) RawConfig() (clientcmdapi.Config, error) {
	return clientcmdapi.Config{}, nil
}
func (c *namespacedConfig) ClientConfig() (*rest.Config, error) {
	return confineToNamespace(c.config, c.namespace, c.clusterResources...), nil
}
func (c *namespacedConfig) Namespace() (string, bool, error) { return c.namespace, true, nil }
func (c *namespacedConfig) ConfigAccess() clientcmd.ConfigAccess {
	return clientcmd.NewDefaultClientConfigLoadingRules()
}

// Actions returns Helm's action configuration for releases in namespace, stored in
// sealed Secrets there (releasestore.go).
func (h *Helm) Actions(namespace string, clusterResources ...schema.GroupResource) (*action.Configuration, error) {
	if h.seal == nil {
		return nil, errNoSeal
	}
	// Helm's debug messages are the controller's at V(1); its warnings and errors are
	// returned as errors too.
	logs := logr.ToSlogHandler(h.log.V(1))
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(logs))
	if err := cfg.Init(h.Getter(namespace, clusterResources...), namespace, "secret"); err != nil {
		return nil, fmt.Errorf("initialising Helm for namespace %s: %w", namespace, err)
	}
	kc, ok := cfg.KubeClient.(*kube.Client)
	if !ok {
		return nil, fmt.Errorf("initialising Helm for namespace %s: its Kubernetes client is a %T", namespace, cfg.KubeClient)
	}
	kc.Namespace = namespace
	clients, err := kc.Factory.KubernetesClientSet()
	if err != nil {
		return nil, fmt.Errorf("initialising Helm's release records for namespace %s: %w", namespace, err)
	}
	cfg.Releases = storage.Init(&sealedSecrets{secrets: clients.CoreV1().Secrets(namespace), namespace: namespace, seal: h.seal})
	cfg.Releases.SetLogger(logs)
	return cfg, nil
}

// lastRelease returns the latest revision of the release, or nil when there is none.
func (h *Helm) lastRelease(namespace, name string) (*release.Release, error) {
	cfg, err := h.Actions(namespace)
	if err != nil {
		return nil, err
	}
	last, err := cfg.Releases.Last(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return asRelease(last)
}

// asRelease is a release as Helm's storage and actions return it (any Releaser) in
// the one form Compositor knows: Helm 4's v1 release, which reads Helm 3's records.
func asRelease(r ri.Releaser) (*release.Release, error) {
	switch rel := r.(type) {
	case *release.Release:
		return rel, nil
	case release.Release:
		return &rel, nil
	case nil:
		return nil, nil
	default:
		return nil, fmt.Errorf("a release of a kind Compositor does not know (%T)", r)
	}
}

// ownedRelease returns the latest revision of the release, nil when there is none,
// once it is proven the composition's (uid): a GateError otherwise, ReleaseConflict
// for another's release (left alone), ReleaseTampered for a record that claims the
// composition and is not as Compositor wrote it.
func (h *Helm) ownedRelease(namespace, name string, uid types.UID) (*release.Release, error) {
	last, err := h.lastRelease(namespace, name)
	var tampered *TamperedError
	switch {
	case errors.As(err, &tampered) && tampered.Unsealed && tampered.Owner != string(uid):
		return nil, &GateError{Reason: ReasonReleaseConflict, Message: fmt.Sprintf(
			"Helm release %s in namespace %s (record %s) was not installed by Compositor for this composition: it is left alone; give the composition another krateo.io/release-name",
			name, namespace, tampered.Secret)}
	case tampered != nil:
		return nil, &GateError{Reason: ReasonReleaseTampered, Message: err.Error()}
	case err != nil:
		return nil, fmt.Errorf("reading the history of release %s/%s: %w", namespace, name, err)
	}
	return last, checkOwner(last, namespace, name, uid)
}

// Outcome is what an upgrade --install did.
type Outcome string

const (
	Installed Outcome = "Installed"
	Upgraded  Outcome = "Upgraded"
)

// InstallOptions say how a release is installed.
type InstallOptions struct {
	// Last is the release's latest revision, nil when there is none; the caller has
	// checked that the composition owns it.
	Last *release.Release
	// Labels are set on the release (Compositor's mark of ownership).
	Labels map[string]string
	// ClusterResources are the cluster-scoped resources Helm may reach for the release
	// (those its definition allows).
	ClusterResources []schema.GroupResource
	// Gate sees the manifests before anything is applied, and the hooks before each
	// is created, and may refuse them; its judge bounds the render (its Renderer and
	// deadline). nil checks nothing, and renders in-process within
	// policies.DefaultTimeout.
	Gate *installGate
	// Digest is the chart's content digest, by which a sandbox worker keeps it; empty
	// sends the chart to a worker that does not have it.
	Digest string
}

// UpgradeInstall installs the release, or upgrades it when it exists. The chart is
// rendered once, bounded, in the sandbox, with the inputs Helm's own render would have
// (render.go), and Helm applies that render: a template that runs past its deadline,
// its memory or the bound on rendered bytes is refused (a GateError with
// ReasonRenderRefused) before anything happens. Helm's own values-schema check is
// off: it would load the schema's $refs from anywhere; the caller has validated the
// values with Compositor's validator, which loads nothing. An install or upgrade, once
// started, runs to its end even when ctx is cancelled (Compositor stopping): Helm's
// cancellation abandons the operation on a goroutine that races with its own record of
// the release, and leaves the release pending. Helm's check of the manifests against
// the OpenAPI schema is off too: the API server refuses their unknown fields itself
// (strictFieldValidation). The chart's crds/ directory is never installed: CRDs are
// cluster-wide, and compositions never create them. An upgrade takes the values it
// is given and nothing of the last release's (ResetValues): the composition's spec is
// the whole of them, an empty one too.
//
// Objects are applied server-side, as vocab.FieldManager, forcing conflicts: the chart
// is the truth of the fields it sets, as it was with Helm 3's three-way merge, and the
// fields it does not set stay with whoever set them. A release Helm 3 installed
// (client-side) is applied server-side from its next upgrade on; Helm moves the
// fields of its client-side manager, the same name, to the apply
// (docs/architecture.md#server-side-apply).
func (h *Helm) UpgradeInstall(ctx context.Context, namespace, name string, ch *chart.Chart, values map[string]interface{}, opts InstallOptions) (Outcome, *release.Release, error) {
	cfg, err := h.Actions(namespace, opts.ClusterResources...)
	if err != nil {
		return "", nil, err
	}
	last := opts.Last
	// A first install that failed is upgraded: Helm upgrades from a failed revision
	// when none is deployed, and keeps the objects the failed install created (those of
	// an install that was interrupted, say). Unless the chart has install hooks, which
	// only an install runs: then the release is installed again.
	installs := last == nil || (last.Version == 1 && last.Info.Status == releasecommon.StatusFailed && hasInstallHooks(last))
	render := policies.RenderOptions{ReleaseName: name, Namespace: namespace, IsUpgrade: !installs, Revision: 1}
	if !installs {
		render.Revision = last.Version + 1
	}
	if render.Capabilities, err = h.capabilities(ctx); err != nil {
		return "", nil, err
	}
	cfg.Capabilities = render.Capabilities
	fresh, err := h.render(ctx, ch, opts, values, render)
	if err != nil {
		return "", nil, err
	}
	if installs {
		if last != nil {
			gated(cfg, opts.Gate.forUninstall(), name)
			if _, err := uninstaller(cfg).Run(name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
				return "", nil, fmt.Errorf("removing the failed release %s/%s: %w", namespace, name, err)
			}
			if cfg, err = h.Actions(namespace, opts.ClusterResources...); err != nil {
				return "", nil, err
			}
			cfg.Capabilities = render.Capabilities
		}
		gated(cfg, opts.Gate, name)
		install := action.NewInstall(cfg)
		install.ReleaseName, install.Namespace = name, namespace
		install.SkipSchemaValidation, install.SkipCRDs = true, true
		install.DisableOpenAPIValidation = true // the API server validates: strictFieldValidation
		install.ServerSideApply, install.ForceConflicts = true, true
		install.WaitStrategy = kube.HookOnlyStrategy // Ready means installed; Healthy tells the rest
		install.Labels = opts.Labels
		rel, err := install.RunWithContext(context.WithoutCancel(ctx), fresh, values)
		if err != nil {
			return "", nil, fmt.Errorf("installing release %s/%s: %w", namespace, name, err)
		}
		installed, err := asRelease(rel)
		return Installed, installed, err
	}
	gated(cfg, opts.Gate, name)
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace, upgrade.MaxHistory = namespace, maxReleaseHistory
	upgrade.SkipSchemaValidation = true
	upgrade.ResetValues = true
	upgrade.DisableOpenAPIValidation = true // the API server validates: strictFieldValidation
	upgrade.ServerSideApply, upgrade.ForceConflicts = "true", true
	upgrade.WaitStrategy = kube.HookOnlyStrategy
	upgrade.Labels = opts.Labels
	rel, err := upgrade.RunWithContext(context.WithoutCancel(ctx), name, fresh, values)
	if err != nil {
		return "", nil, fmt.Errorf("upgrading release %s/%s: %w", namespace, name, err)
	}
	upgraded, err := asRelease(rel)
	return Upgraded, upgraded, err
}

// render renders ch with values for the release render names, bounded, and gives the
// chart Helm applies (prerendered). The templates' lookups are made through the
// namespace-confined client, within the render's deadline: a request still open then
// ends with it. A render stopped at a bound is refused
// (ReasonRenderRefused); one that could not start (the lane's workers busy, the
// controller stopping) is an error to try again; any other is the chart's own error.
func (h *Helm) render(ctx context.Context, ch *chart.Chart, opts InstallOptions, values map[string]any, render policies.RenderOptions) (*chart.Chart, error) {
	timeout, renderer := opts.Gate.renderBounds()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	render.Lookup = h.lookup(rctx, render.Namespace, opts.ClusterResources, lookupBoundsOf(renderer.RenderedBytes()))
	files, err := renderer.RenderFiles(rctx, ch, opts.Digest, values, render)
	var limit *policies.LimitError
	switch {
	case err == nil:
	case errors.Is(err, policies.ErrNotStarted), ctx.Err() != nil:
		// Nothing is known of this render: the namespace's workers were busy, or the
		// controller is stopping. Tried again with the queue's backoff, never refused.
		return nil, fmt.Errorf("rendering chart %s: %w", ch.Name(), err)
	case errors.Is(err, policies.ErrDeadline):
		return nil, &GateError{Reason: ReasonRenderRefused, Message: fmt.Sprintf("nothing was installed: rendering the chart with these values did not finish within %s (--policy-timeout): %s",
			timeout, strings.TrimPrefix(err.Error(), policies.ErrDeadline.Error()+": "))}
	case errors.As(err, &limit), errors.Is(err, policies.ErrWorkerFailed):
		return nil, &GateError{Reason: ReasonRenderRefused, Message: "nothing was installed: rendering the chart with these values went past a bound: " + err.Error()}
	default:
		return nil, fmt.Errorf("rendering chart %s %s: %w", ch.Name(), ch.Metadata.Version, err)
	}
	fresh, err := prerendered(ch, files)
	if errors.Is(err, errNoValue) {
		return nil, &GateError{Reason: ReasonRenderRefused, Message: "nothing was installed: " + err.Error()}
	}
	return fresh, err
}

// gated puts gate in front of what cfg's actions apply to release name: in Helm's
// Kubernetes client, where Helm hands objects to the cluster.
func gated(cfg *action.Configuration, gate *installGate, name string) {
	if gate == nil {
		return
	}
	gate.release = name
	if kc, ok := cfg.KubeClient.(*kube.Client); ok {
		cfg.KubeClient = &gatedKubeClient{inner: kc, gate: gate}
	}
}

// uninstaller is Helm's uninstall of cfg's releases: waiting for nothing but its hooks.
func uninstaller(cfg *action.Configuration) *action.Uninstall {
	uninstall := action.NewUninstall(cfg)
	uninstall.WaitStrategy = kube.HookOnlyStrategy
	return uninstall
}

// Uninstall removes the release and what it created; a release that does not exist is
// not an error. gate, when set, judges what the uninstall creates (its hooks) and
// checks what it deletes, as for an install.
func (h *Helm) Uninstall(namespace, name string, gate *installGate, clusterResources ...schema.GroupResource) (bool, error) {
	cfg, err := h.Actions(namespace, clusterResources...)
	if err != nil {
		return false, err
	}
	gated(cfg, gate, name)
	if _, err := uninstaller(cfg).Run(name); err != nil {
		if errors.Is(err, driver.ErrReleaseNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("uninstalling release %s/%s: %w", namespace, name, err)
	}
	return true, nil
}

// releaseFingerprint is a fingerprint as a label value holds it: its first 63 hex
// digits (252 bits).
func releaseFingerprint(fingerprint string) string {
	digits := strings.TrimPrefix(fingerprint, "sha256:")
	return digits[:min(len(digits), 63)]
}

// Fingerprint identifies what a release is installed from: the chart digest and the
// values in canonical JSON (encoding/json sorts map keys).
func Fingerprint(chartDigest string, values map[string]interface{}) (string, error) {
	if values == nil {
		values = map[string]interface{}{}
	}
	canonical, err := json.Marshal(values)
	if err != nil {
		return "", fmt.Errorf("encoding values: %w", err)
	}
	sum := sha256.New()
	sum.Write([]byte(chartDigest))
	sum.Write([]byte{0})
	sum.Write(canonical)
	return "sha256:" + hex.EncodeToString(sum.Sum(nil)), nil
}
