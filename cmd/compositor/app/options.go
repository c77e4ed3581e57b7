package app

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	utilrand "k8s.io/apimachinery/pkg/util/rand"

	"github.com/compositor-dev/compositor/generators/controller"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/membudget"
	"github.com/compositor-dev/compositor/webhooks"
)

// ServeOptions configure `compositor serve`: the manager that runs the webhooks and the
// definition reconciler.
type ServeOptions struct {
	// Debug turns on development logging.
	Debug bool
	// Sync is the resync period: every object is reconciled at least this often.
	Sync time.Duration
	// Poll is how often charts are checked for changes behind an unchanged version.
	Poll time.Duration
	// MaxReconcileRate is the most reconciliations per second per controller.
	MaxReconcileRate int
	// LeaderElection makes replicas elect one leader to run the reconcilers.
	LeaderElection bool
	// LeaderElectionNamespace holds the leader election lease; empty means the
	// namespace Compositor runs in.
	LeaderElectionNamespace string
	// RegistryConfigPath is Helm's registry config file with OCI credentials; empty
	// means Helm's default.
	RegistryConfigPath string
	// HealthProbeAddr serves /healthz and /readyz; "0" turns them off.
	HealthProbeAddr string
	// MetricsAddr serves /metrics; "0" turns metrics off.
	MetricsAddr string
	// PprofAddr serves Go's /debug/pprof profiles; "0" (the default) turns them off.
	PprofAddr string

	// Namespace is the namespace Compositor runs in; it holds the CA Secret.
	Namespace string
	// ServiceAccount is the one Compositor runs as, in Namespace; the chart archives it
	// keeps are owned by it, so that they go with the installation. Empty: no owner.
	ServiceAccount string
	// Certs is the certificate mode: CertsBuiltin or CertsCertManager.
	Certs string
	// CertDir holds tls.crt, tls.key and ca.crt in cert-manager mode.
	CertDir string
	// CertManagerCertificate names the cert-manager Certificate whose CA cainjector
	// injects into the webhook configurations, in cert-manager mode.
	CertManagerCertificate string
	// WebhookAddr is the host:port the webhook server listens on.
	WebhookAddr string
	// WebhookService is the Service in Namespace through which the API server reaches
	// the webhooks; ignored when WebhookURL is set.
	WebhookService string
	// WebhookURL is the base https:// URL the API server reaches the webhooks at, for a
	// webhook server outside the cluster.
	WebhookURL string
	// WebhookTimeout is how long the API server waits for a webhook's answer.
	WebhookTimeout time.Duration
	// WebhookClientCA is a PEM file of the CAs that sign the client certificate the
	// API server presents to the webhooks; when set, the admission webhooks hear no
	// other caller. Empty: any caller that reaches the port is heard.
	WebhookClientCA string
	// WebhookClientNames, with WebhookClientCA, are the identities (common name or DNS
	// name) one of which that certificate must carry; empty admits any the CA signed.
	WebhookClientNames []string
	// ChartCacheDir holds downloaded chart archives, keyed by digest.
	ChartCacheDir string
	// AllowChartNetworks are address ranges refused by default (loopback, RFC 1918,
	// CGNAT, ULA) where chart sources may be reached nonetheless: on-premises
	// registries. `compositor dev` adds loopback, where it serves its sample charts.
	AllowChartNetworks []netip.Prefix
	// PolicyDir holds *.rego policies loaded besides the CompositionPolicy objects.
	PolicyDir string
	// DisabledPolicies are ids of built-in policies switched off.
	DisabledPolicies []string
	// EnabledPolicies are ids of built-in policies that are off by default switched
	// on, such as require-chart-verification.
	EnabledPolicies []string
	// PolicyTimeout bounds the evaluation of every policy for one request.
	PolicyTimeout time.Duration
	// ControllerImage is the image of the generated controller Deployments.
	ControllerImage string
	// PolicyFailOpen admits a request whose policies could not be evaluated in time.
	PolicyFailOpen bool
	// AuditInterval is the time between audit passes over existing definitions and
	// compositions; 0 turns the audit off.
	AuditInterval time.Duration
	// Controllers is where the composition controllers run: ControllersDeployments or
	// ControllersInProcess.
	Controllers string
	// Multicluster delivers compositions annotated compositor.dev/placement to the
	// target clusters registered by kubeconfig Secrets in Namespace. It needs
	// ControllersInProcess.
	Multicluster bool
	// ReplicaID names this replica among those of LeaderElection: with Multicluster,
	// they share the target clusters, each engaging its own (a Lease per replica and
	// per cluster in Namespace). It must be unique among them: the pod's name.
	ReplicaID string
	// ShardLeaseDuration is how long a replica's Lease on one target cluster lasts
	// unrenewed. The clusters of a replica that is gone move once its peer Lease
	// lapses, which multicluster-runtime keeps for 30 s.
	ShardLeaseDuration time.Duration
	// Limits bound every object admission judges, before the schema check, rendering
	// and the policies (issue #26).
	Limits policies.Limits
	// PolicyMaxRange bounds numbers.range and numbers.range_step in policies.
	PolicyMaxRange int
	// PolicyMaxMemory is the heap size past which Rego evaluations that have run
	// for a while are stopped (membudget): "auto", a quantity, or "0" for none.
	PolicyMaxMemory string
	// LaneConcurrency is how many admission evaluations one namespace's compositions
	// (or its definitions, or the policies) may run at once.
	LaneConcurrency int
	// ControllerNamespaceConcurrency is how many of the in-process controllers' 16
	// workers the compositions of one namespace, or the releases on one target
	// cluster, may take at once.
	ControllerNamespaceConcurrency int
	// UnboundedAdmission, for measurements only (the hidden --unbounded-admission of
	// make bench), turns off the admission limits and lanes and runs the renders and
	// schema checks in-process, where a runaway cannot be stopped.
	UnboundedAdmission bool
}

// Where composition controllers run.
const (
	// ControllersDeployments generates one controller Deployment per served version.
	ControllersDeployments = "deployments"
	// ControllersInProcess runs them inside serve, impersonating their ServiceAccounts.
	ControllersInProcess = "in-process"
)

// Certificate modes.
const (
	// CertsBuiltin keeps a CA in a Secret and issues serving certificates from it.
	CertsBuiltin = "builtin"
	// CertsCertManager serves a certificate that cert-manager issued into CertDir.
	CertsCertManager = "cert-manager"
)

// envFlags maps flags to the environment variables that set them when the flag is not
// given on the command line. The names are those of the Krateo core-provider.
var envFlags = map[string]string{
	"debug":                     "CORE_PROVIDER_DEBUG",
	"sync":                      "CORE_PROVIDER_SYNC",
	"poll":                      "CORE_PROVIDER_POLL_INTERVAL",
	"max-reconcile-rate":        "CORE_PROVIDER_MAX_RECONCILE_RATE",
	"leader-election":           "CORE_PROVIDER_LEADER_ELECTION",
	"helm-registry-config-path": "HELM_REGISTRY_CONFIG_PATH",
	"namespace":                 "POD_NAMESPACE",
	"service-account":           "POD_SERVICE_ACCOUNT",
	"chart-archive-namespace":   "COMPOSITOR_CHART_ARCHIVE_NAMESPACE",
	"release-seal-namespace":    "COMPOSITOR_RELEASE_SEAL_NAMESPACE",
	"replica-id":                "POD_NAME",
}

// NewServeOptions returns the defaults of `compositor serve`.
func NewServeOptions() *ServeOptions {
	return &ServeOptions{
		Sync:             time.Hour,
		Poll:             5 * time.Minute,
		MaxReconcileRate: 3,
		HealthProbeAddr:  ":8081",
		MetricsAddr:      ":8080",
		PprofAddr:        "0",

		Namespace:                      "compositor-system",
		Certs:                          CertsBuiltin,
		CertDir:                        "/etc/compositor/certs",
		CertManagerCertificate:         "compositor-webhook",
		WebhookAddr:                    ":9443",
		WebhookService:                 "compositor-webhook",
		WebhookTimeout:                 5 * time.Second,
		ChartCacheDir:                  defaultChartCacheDir(),
		PolicyTimeout:                  2 * time.Second,
		ControllerImage:                controller.DefaultImage,
		AuditInterval:                  time.Minute,
		Controllers:                    ControllersDeployments,
		ReplicaID:                      defaultReplicaID(),
		ShardLeaseDuration:             20 * time.Second,
		Limits:                         policies.DefaultLimits(),
		PolicyMaxRange:                 policies.DefaultMaxRangeElements,
		PolicyMaxMemory:                "auto",
		LaneConcurrency:                webhooks.DefaultLaneConcurrency(),
		ControllerNamespaceConcurrency: 4,
	}
}

// defaultReplicaID is the default --replica-id, without POD_NAME: the host name (a
// pod's, unless its spec sets one) and a random suffix, so that two replicas never
// share one, as controller-runtime's leader election does.
func defaultReplicaID() string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "compositor"
	}
	return name + "-" + utilrand.String(5)
}

// AddFlags registers the serve flags on fs, with the current values of o as defaults.
func (o *ServeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVarP(&o.Debug, "debug", "d", o.Debug, "Development logging (env CORE_PROVIDER_DEBUG)")
	fs.DurationVarP(&o.Sync, "sync", "s", o.Sync, "Resync period of every reconciled object (env CORE_PROVIDER_SYNC)")
	fs.DurationVar(&o.Poll, "poll", o.Poll, "How often charts are checked for changes (env CORE_PROVIDER_POLL_INTERVAL)")
	fs.IntVar(&o.MaxReconcileRate, "max-reconcile-rate", o.MaxReconcileRate, "Most reconciliations per second per controller (env CORE_PROVIDER_MAX_RECONCILE_RATE)")
	fs.BoolVarP(&o.LeaderElection, "leader-election", "l", o.LeaderElection, "Elect a leader among replicas (env CORE_PROVIDER_LEADER_ELECTION)")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader election lease (default: the namespace Compositor runs in)")
	fs.StringVar(&o.RegistryConfigPath, "helm-registry-config-path", o.RegistryConfigPath, "Helm registry config file with OCI credentials (env HELM_REGISTRY_CONFIG_PATH)")
	fs.StringVar(&o.HealthProbeAddr, "health-probe-bind-address", o.HealthProbeAddr, `Address of /healthz and /readyz ("0" turns them off)`)
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, `Address of /metrics ("0" turns metrics off)`)
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", o.PprofAddr, `Address of Go's /debug/pprof profiles, for diagnosing speed ("0" turns them off; never expose it)`)
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace Compositor runs in; it holds the CA Secret (env POD_NAMESPACE)")
	fs.StringVar(&o.ServiceAccount, "service-account", o.ServiceAccount, "ServiceAccount Compositor runs as, in --namespace: it owns the chart archives kept there, which go when it goes (env POD_SERVICE_ACCOUNT)")
	fs.StringVar(&o.Certs, "certs", o.Certs, "Certificate mode: builtin (a CA in a Secret) or cert-manager")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "Directory with tls.crt, tls.key and ca.crt in cert-manager mode")
	fs.StringVar(&o.CertManagerCertificate, "cert-manager-certificate", o.CertManagerCertificate, "cert-manager Certificate (in --namespace) whose CA is injected into the webhook configurations")
	fs.StringVar(&o.WebhookAddr, "webhook-bind-address", o.WebhookAddr, "Address of the webhook server (TLS)")
	fs.StringVar(&o.WebhookService, "webhook-service", o.WebhookService, "Service through which the API server reaches the webhooks")
	fs.StringVar(&o.WebhookURL, "webhook-url", o.WebhookURL, "Base https:// URL of the webhooks for a server outside the cluster; replaces --webhook-service")
	fs.DurationVar(&o.WebhookTimeout, "webhook-timeout", o.WebhookTimeout, "How long the API server waits for a webhook (1s to 30s)")
	fs.StringVar(&o.WebhookClientCA, "webhook-client-ca", o.WebhookClientCA, "PEM file of the CA that signs the client certificate the API server presents to webhooks (its AdmissionConfiguration's kubeConfigFile); the admission webhooks then refuse every other caller before reading its request. Re-read when it changes")
	fs.StringSliceVar(&o.WebhookClientNames, "webhook-client-name", o.WebhookClientNames, "With --webhook-client-ca, the identities (common name or DNS name of the client certificate) the API server may present; empty admits any certificate the CA signed")
	fs.StringVar(&o.ChartCacheDir, "chart-cache-dir", o.ChartCacheDir, "Directory of downloaded chart archives, keyed by digest")
	addAllowChartNetworkFlag(fs, &o.AllowChartNetworks)
	fs.StringVar(&o.PolicyDir, "policy-dir", o.PolicyDir, "Directory of *.rego policies, reloaded when its files change")
	fs.StringSliceVar(&o.DisabledPolicies, "disable-builtin-policy", o.DisabledPolicies, "Built-in policies to switch off, by id: "+strings.Join(policies.BuiltinIDs(), ", "))
	fs.StringSliceVar(&o.EnabledPolicies, "enable-builtin-policy", o.EnabledPolicies, "Built-in policies that are off by default to switch on, by id: "+strings.Join(policies.OptInBuiltinIDs(), ", "))
	fs.DurationVar(&o.PolicyTimeout, "policy-timeout", o.PolicyTimeout, "Deadline for evaluating the policies of one request; below --webhook-timeout")
	fs.StringVar(&o.ControllerImage, "controller-image", o.ControllerImage, "Image of the controller Deployments generated for each definition version")
	fs.BoolVar(&o.PolicyFailOpen, "policy-fail-open", o.PolicyFailOpen, "Admit, with a warning, a request whose policies could not be evaluated (default: deny)")
	fs.StringVar(&o.Controllers, "controllers", o.Controllers, "Where composition controllers run: deployments (one generated Deployment per served version) or in-process (inside serve, impersonating the generated ServiceAccounts)")
	fs.StringVar(&o.ReplicaID, "replica-id", o.ReplicaID, "Unique name of this replica, with --leader-election and --multicluster, which share the target clusters among replicas (env POD_NAME; default: the host name and a random suffix)")
	fs.DurationVar(&o.ShardLeaseDuration, "shard-lease-duration", o.ShardLeaseDuration, "With --leader-election and --multicluster, how long a replica's Lease on one target cluster lasts unrenewed (a replica that is gone loses its clusters once its peer Lease, kept 30 s, lapses)")
	fs.BoolVar(&o.Multicluster, "multicluster", o.Multicluster, "Install compositions annotated compositor.dev/placement on the target clusters it selects, registered by kubeconfig Secrets in --namespace labelled sigs.k8s.io/multicluster-runtime-kubeconfig=true (needs --controllers in-process)")
	fs.DurationVar(&o.AuditInterval, "audit-interval", o.AuditInterval, "Time between audits of existing definitions and compositions against every policy (0 turns the audit off)")
	fs.IntVar(&o.Limits.MaxDepth, "max-value-depth", o.Limits.MaxDepth, "Admission refuses an object with a field nested deeper than this many keys and indexes (spec.a.b[0] is 4), before the schema check, rendering and the policies")
	fs.IntVar(&o.Limits.MaxKeys, "max-value-keys", o.Limits.MaxKeys, "Admission refuses an object with more keys and array elements than this, all levels together")
	fs.IntVar(&o.Limits.MaxStringBytes, "max-string-bytes", o.Limits.MaxStringBytes, "Admission refuses an object with a string value or key longer than this many bytes")
	fs.IntVar(&o.Limits.MaxRenderedBytes, "max-rendered-bytes", o.Limits.MaxRenderedBytes, "Rendering a composition's chart stops, and is refused, past this many bytes of manifests")
	fs.StringVar(&o.PolicyMaxMemory, "policy-max-memory", o.PolicyMaxMemory, "Heap size (a quantity: 768Mi) past which a policy or constraint evaluation running for over 50ms is stopped with an error (fail closed), so that a runaway Rego evaluation does not get the process killed; auto is 3/4 of the memory limit (GOMEMLIMIT or the container's), 1Gi without one; 0 turns it off")
	fs.IntVar(&o.PolicyMaxRange, "policy-max-range", o.PolicyMaxRange, "Most elements numbers.range and numbers.range_step may return in a policy; a bigger range stops the evaluation with an error (fail closed)")
	fs.IntVar(&o.LaneConcurrency, "admission-namespace-concurrency", o.LaneConcurrency, "Admission evaluations (schema check, rendering, policies) one namespace's compositions may run at once; its others wait, each until the deadline, and other namespaces are not held. Definitions and policies have lanes of their own. The default is half the CPUs, at least 1")
	fs.IntVar(&o.ControllerNamespaceConcurrency, "controller-namespace-concurrency", o.ControllerNamespaceConcurrency, "Compositions of one namespace (and releases on one target cluster) the in-process controllers reconcile at once, of their 16 workers; the others wait in the queue, holding no worker, and other namespaces are not held")
	fs.BoolVar(&o.UnboundedAdmission, "unbounded-admission", o.UnboundedAdmission, "For measurements only: no admission limits nor lanes, and renders and schema checks in-process, where a runaway cannot be stopped")
	_ = fs.MarkHidden("unbounded-admission")
}

// applyEnv sets every flag of fs that was not given on the command line from its
// environment variable, if that is set. Flags win over the environment. Values are
// parsed by the flag itself, so the environment accepts exactly what the flag does.
func applyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		env, ok := envFlags[f.Name]
		if !ok || f.Changed {
			return
		}
		value, set := lookup(env)
		if !set {
			return
		}
		if err := f.Value.Set(value); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q: %w", env, value, err))
		}
	})
	return errors.Join(errs...)
}

// Validate reports every option that is out of range.
func (o *ServeOptions) Validate() error {
	var errs []error
	if o.Sync <= 0 {
		errs = append(errs, fmt.Errorf("--sync must be positive, got %s", o.Sync))
	}
	if o.Poll <= 0 {
		errs = append(errs, fmt.Errorf("--poll must be positive, got %s", o.Poll))
	}
	if o.MaxReconcileRate < 1 {
		errs = append(errs, fmt.Errorf("--max-reconcile-rate must be at least 1, got %d", o.MaxReconcileRate))
	}
	if o.Certs != CertsBuiltin && o.Certs != CertsCertManager {
		errs = append(errs, fmt.Errorf("--certs must be %s or %s, got %q", CertsBuiltin, CertsCertManager, o.Certs))
	}
	if o.WebhookTimeout < time.Second || o.WebhookTimeout > 30*time.Second {
		errs = append(errs, fmt.Errorf("--webhook-timeout must be between 1s and 30s (the API server's limits), got %s", o.WebhookTimeout))
	}
	if o.PolicyTimeout <= 0 || o.PolicyTimeout >= o.WebhookTimeout {
		errs = append(errs, fmt.Errorf("--policy-timeout must be positive and below --webhook-timeout %s, got %s", o.WebhookTimeout, o.PolicyTimeout))
	}
	if o.Controllers != ControllersDeployments && o.Controllers != ControllersInProcess {
		errs = append(errs, fmt.Errorf("--controllers must be %s or %s, got %q", ControllersDeployments, ControllersInProcess, o.Controllers))
	}
	if o.Multicluster && o.Controllers != ControllersInProcess {
		errs = append(errs, fmt.Errorf("--multicluster needs --controllers %s: the generated Deployments install in their own cluster only", ControllersInProcess))
	}
	if o.ShardLeaseDuration < 4*time.Second {
		errs = append(errs, fmt.Errorf("--shard-lease-duration must be at least 4s, got %s", o.ShardLeaseDuration))
	}
	if o.Multicluster && o.LeaderElection && o.ReplicaID == "" {
		errs = append(errs, errors.New("--replica-id must not be empty with --leader-election and --multicluster: the replicas share the target clusters by it"))
	}
	if o.AuditInterval < 0 {
		errs = append(errs, fmt.Errorf("--audit-interval must not be negative (0 turns the audit off), got %s", o.AuditInterval))
	}
	if unknown := slices.DeleteFunc(slices.Clone(o.DisabledPolicies), func(id string) bool { return slices.Contains(policies.BuiltinIDs(), id) }); len(unknown) > 0 {
		errs = append(errs, fmt.Errorf("--disable-builtin-policy: unknown ids %s; the built-in policies are %s", strings.Join(unknown, ", "), strings.Join(policies.BuiltinIDs(), ", ")))
	}
	if unknown := slices.DeleteFunc(slices.Clone(o.EnabledPolicies), func(id string) bool { return slices.Contains(policies.OptInBuiltinIDs(), id) }); len(unknown) > 0 {
		errs = append(errs, fmt.Errorf("--enable-builtin-policy: unknown ids %s; the built-in policies off by default are %s", strings.Join(unknown, ", "), strings.Join(policies.OptInBuiltinIDs(), ", ")))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if len(o.WebhookClientNames) > 0 && o.WebhookClientCA == "" {
		errs = append(errs, errors.New("--webhook-client-name needs --webhook-client-ca"))
	}
	if err := o.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := o.policyMemoryBudget(); err != nil {
		errs = append(errs, err)
	}
	if o.PolicyMaxRange < 1 {
		errs = append(errs, fmt.Errorf("--policy-max-range must be at least 1, got %d", o.PolicyMaxRange))
	}
	if o.ControllerNamespaceConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--controller-namespace-concurrency must be at least 1, got %d", o.ControllerNamespaceConcurrency))
	}
	if o.LaneConcurrency < 1 {
		errs = append(errs, fmt.Errorf("--admission-namespace-concurrency must be at least 1, got %d", o.LaneConcurrency))
	}
	return errors.Join(errs...)
}

// complete reads the environment into the flags that were not given and validates the
// result. Commands call it before running.
func (o *ServeOptions) complete(fs *pflag.FlagSet, modeDefaults ...func(*pflag.FlagSet)) error {
	if err := applyEnv(fs, os.LookupEnv); err != nil {
		return err
	}
	for _, adjust := range modeDefaults {
		adjust(fs)
	}
	return o.Validate()
}

// defaultChartCacheDir is where every command keeps downloaded chart archives, so they
// share one cache.
func defaultChartCacheDir() string {
	return filepath.Join(os.TempDir(), "compositor-charts")
}

// addAllowChartNetworkFlag registers --allow-chart-network, repeatable, on fs.
func addAllowChartNetworkFlag(fs *pflag.FlagSet, into *[]netip.Prefix) {
	fs.Var((*prefixList)(into), "allow-chart-network",
		"CIDR where chart sources may be reached although it is loopback, private (RFC 1918), CGNAT or unique-local, e.g. 10.0.0.0/8 for an on-premises registry; repeatable. Link-local and metadata addresses stay refused")
}

// prefixList is a repeatable flag of CIDRs; every use adds one or more (comma-separated).
type prefixList []netip.Prefix

func (p *prefixList) String() string {
	parts := make([]string, 0, len(*p))
	for _, prefix := range *p {
		parts = append(parts, prefix.String())
	}
	return strings.Join(parts, ",")
}

func (p *prefixList) Set(value string) error {
	for _, part := range strings.Split(value, ",") {
		prefix, err := netip.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8 or fd00::/8: %w", part, err)
		}
		if prefix != prefix.Masked() {
			return fmt.Errorf("%q has host bits set; did you mean %s?", part, prefix.Masked())
		}
		*p = append(*p, prefix)
	}
	return nil
}

func (p *prefixList) Type() string { return "cidr" }

// policyMemoryBudget is --policy-max-memory in bytes (0: off).
func (o *ServeOptions) policyMemoryBudget() (int64, error) {
	if o.PolicyMaxMemory == "auto" {
		return membudget.Default(), nil
	}
	q, err := resource.ParseQuantity(o.PolicyMaxMemory)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("--policy-max-memory must be auto, 0 or a quantity of bytes such as 768Mi, got %q", o.PolicyMaxMemory)
	}
	return q.Value(), nil
}
