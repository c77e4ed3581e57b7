package reconciler

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/policies"
)

// CompositionControllers run the composition controllers of served versions. The
// definition reconciler uses them instead of generated Deployments when set.
type CompositionControllers interface {
	// Ensure starts, once, the controller of version of def's kind.
	Ensure(ctx context.Context, def *corev1alpha1.CompositionDefinition, kind, plural, version string) error
	// Stop stops the controller of version of plural in the definition namespace.
	Stop(namespace, plural, version string)
}

// InProcess runs composition controllers inside Compositor, each in its own manager
// whose client impersonates the version's generated ServiceAccount, so that the API
// server enforces the generated RBAC. It is a leader-elected runnable of Compositor's
// manager: the controllers run while it does.
type InProcess struct {
	// Config is Compositor's own; each controller impersonates from it.
	Config *rest.Config
	// Client, as Compositor, binds the release role in composition namespaces.
	Client client.Client
	Scheme *runtime.Scheme
	Charts *Charts
	// Checker is the webhook's: each controller validates values with its schema
	// validator and judges what it installs with its policies. nil: see
	// CompositionManagerOptions.Checker.
	Checker *policies.Checker
	// MaxReconcileRate and Sync are those of each controller.
	MaxReconcileRate int
	Sync             time.Duration

	versionManagers
}

var _ CompositionControllers = (*InProcess)(nil)

// Ensure starts the controller of the version unless it runs.
func (p *InProcess) Ensure(ctx context.Context, def *corev1alpha1.CompositionDefinition, kind, plural, version string) error {
	key := VersionKey{Namespace: def.Namespace, Plural: plural, Version: version}
	bind, err := p.binder(def, plural, version)
	if err != nil {
		return err
	}
	opts := CompositionManagerOptions{
		GVK:                 schema.GroupVersionKind{Group: crd.Group, Version: version, Kind: kind},
		Scheme:              p.Scheme,
		Charts:              p.Charts,
		Checker:             p.Checker,
		DefinitionNamespace: def.Namespace,
		Bind:                bind,
		MaxReconcileRate:    p.MaxReconcileRate,
		Sync:                p.Sync,
	}
	return p.ensure(ctx, key, "in-process composition controller", func() (manager.Manager, error) {
		return NewCompositionManager(p.impersonating(key), opts)
	})
}

// Stop stops the controller of the version and waits until it has stopped.
func (p *InProcess) Stop(namespace, plural, version string) {
	p.stop(VersionKey{Namespace: namespace, Plural: plural, Version: version})
}

// impersonating is Compositor's config acting as the version's ServiceAccount.
func (p *InProcess) impersonating(key VersionKey) *rest.Config {
	cfg := rest.CopyConfig(p.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + key.Namespace + ":" + rbac.ServiceAccountName(key.Plural, key.Version),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + key.Namespace, "system:authenticated"},
	}
	return cfg
}

// binder returns the function that binds the version's release role, as Compositor,
// in a namespace before the controller acts there. It applies every time: the binding
// may have gone with the namespace's last composition (ReleaseBindings), and applying
// an unchanged binding changes nothing.
func (p *InProcess) binder(def *corev1alpha1.CompositionDefinition, plural, version string) (func(context.Context, string) error, error) {
	objs, err := rbac.Generate(rbac.Options{Namespace: def.Namespace, DefinitionName: def.Name, Plural: plural, Version: version, Group: crd.Group})
	if err != nil {
		return nil, fmt.Errorf("naming the RBAC of %s %s: %w", plural, version, err)
	}
	return func(ctx context.Context, namespace string) error {
		return apply(ctx, p.Client, objs.ReleaseBinding(namespace))
	}, nil
}
