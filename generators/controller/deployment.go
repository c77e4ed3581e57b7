// Package controller generates the Deployment that runs the composition controller of
// one served version of a generated API (docs/architecture.md#controllers):
// `compositor controller` under the ServiceAccount that generators/rbac creates for
// that version, hardened to the "restricted" Pod Security Standard, in Compositor's
// own namespace (which no tenant writes) and labelled with its definition's identity
// labels: an owner reference cannot cross namespaces. It is a pure function; the
// reconciler applies the result.
package controller

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
)

const (
	// DefaultImage runs the controller when Options.Image is empty: the image `make image`
	// builds, tagged with the chart's appVersion (image_test.go keeps the two in step).
	DefaultImage = "ghcr.io/compositor-dev/compositor:0.1.0"
	// ContainerName is the name of the controller's container.
	ContainerName = "controller"
	// HealthPort serves /healthz and /readyz (--health-probe-bind-address).
	HealthPort = 8081
	// MetricsPort serves /metrics (--metrics-bind-address).
	MetricsPort = 8080
	// TmpDir is the writable emptyDir of the otherwise read-only container: Helm's
	// cache, config and data live under it.
	TmpDir = "/tmp"
	// AppName is the value of LabelName on controller pods.
	AppName = "compositor-controller"
	// runAsID is the non-root user and group the container runs as (distroless "nonroot").
	runAsID = 65532
)

// Options describe the controller of one served version.
type Options struct {
	// Definition is the controller's; the controller acts for the definitions of its
	// namespace (--namespace). Its annotation krateo.io/connector-verbose: "true" turns
	// on debug logs (CORE_PROVIDER_DEBUG). Its name and UID must be set.
	Definition *corev1alpha1.CompositionDefinition
	// Namespace is Compositor's, where the Deployment runs beside its ServiceAccount
	// (rbac.Options.IdentityNamespace). Empty means the definition's namespace, the
	// layout before issue #46, where the Deployment is owned by the definition.
	Namespace string
	// Plural is the generated CRD's resource, e.g. fireworksapps.
	Plural string
	// Version is the served CRD version, e.g. v1-1-5.
	Version string
	// Group of the generated CRD; defaults to vocab.CompositionGroup.
	Group string
	// Image of Compositor; defaults to DefaultImage.
	Image string
	// AllowChartNetworks are the address ranges the controller may fetch charts from
	// beyond the public ones (--allow-chart-network), as Compositor's own.
	AllowChartNetworks []netip.Prefix
	// ChartArchiveNamespace is Compositor's namespace, where the chart archives are kept
	// in the cluster (--chart-archive-namespace): the controller reads its chart there
	// when it has none in memory, before going to the chart source. Empty: it always
	// fetches from the chart source.
	ChartArchiveNamespace string
	// ReleaseSealNamespace is Compositor's namespace, where Secret ReleaseSealSecret
	// keeps the key that seals Helm's release records (--release-seal-namespace): the
	// controller reads it there at start, with the right rbac.Options.ReleaseSealNamespace
	// grants, and acts on no release without it.
	ReleaseSealNamespace string
	// ImagePullPolicy; empty lets the API server choose (Always for :latest).
	ImagePullPolicy corev1.PullPolicy
	// Resources default to DefaultResources().
	Resources *corev1.ResourceRequirements
	// Labels are added to the Deployment and its pods; the identity labels win.
	Labels map[string]string
}

// ReleaseSealSecret is the Secret, in Compositor's namespace, that keeps the key
// sealing Helm's release records (rbac.ReleaseSealSecret).
const ReleaseSealSecret = rbac.ReleaseSealSecret

// Name returns the name of the controller Deployment of a version of a definition of
// namespace; it is also the name of its ServiceAccount (rbac.ServiceAccountName).
func Name(namespace, plural, version string) string {
	return rbac.ServiceAccountName(namespace, plural, version)
}

// DefaultResources are the requests and limits of a controller: mostly idle, with
// memory headroom for rendering charts.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("500m"),
			corev1.ResourceMemory: resource.MustParse("512Mi"),
		},
	}
}

// SelectorLabels select the pods of one version's controller. They never change for
// a Deployment, whose selector is immutable.
func SelectorLabels(namespace, plural, version string) map[string]string {
	labels := rbac.IdentityLabels(namespace, plural, version)
	labels[vocab.LabelName] = AppName
	return labels
}

// Deployment returns the controller Deployment of one served version: one replica of
// `compositor controller --group --version --resource`, replaced with the Recreate
// strategy so that two controllers never run Helm on the same release at once.
func Deployment(opts Options) *appsv1.Deployment {
	def := opts.Definition
	if def == nil {
		def = &corev1alpha1.CompositionDefinition{}
	}
	if opts.Group == "" {
		opts.Group = vocab.CompositionGroup
	}
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	resources := DefaultResources()
	if opts.Resources != nil {
		resources = *opts.Resources.DeepCopy()
	}

	selector := SelectorLabels(def.Namespace, opts.Plural, opts.Version)
	labels := maps.Clone(opts.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	if def.Name != "" {
		labels[vocab.LabelDefinitionName] = rbac.LabelValue(def.Name)
	}
	maps.Copy(labels, selector)

	meta := metav1.ObjectMeta{
		Name:      Name(def.Namespace, opts.Plural, opts.Version),
		Namespace: opts.Namespace,
		Labels:    labels,
	}
	if opts.Namespace == "" || opts.Namespace == def.Namespace {
		meta.Namespace = def.Namespace
		meta.OwnerReferences = []metav1.OwnerReference{{
			APIVersion:         corev1alpha1.GroupVersion.String(),
			Kind:               "CompositionDefinition",
			Name:               def.Name,
			UID:                def.UID,
			Controller:         ptr.To(true),
			BlockOwnerDeletion: ptr.To(true),
		}}
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "Deployment"},
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To[int32](1),
			RevisionHistoryLimit: ptr.To[int32](2),
			Selector:             &metav1.LabelSelector{MatchLabels: selector},
			Strategy:             appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec:       podSpec(opts, def, resources),
			},
		},
	}
}

func podSpec(opts Options, def *corev1alpha1.CompositionDefinition, resources corev1.ResourceRequirements) corev1.PodSpec {
	return corev1.PodSpec{
		ServiceAccountName: rbac.ServiceAccountName(def.Namespace, opts.Plural, opts.Version),
		EnableServiceLinks: ptr.To(false),
		// Time for a Helm action under way to finish, so that no release is left
		// pending when the controller is replaced.
		TerminationGracePeriodSeconds: ptr.To[int64](60),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To[int64](runAsID),
			RunAsGroup:     ptr.To[int64](runAsID),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:            ContainerName,
			Image:           opts.Image,
			ImagePullPolicy: opts.ImagePullPolicy,
			Command:         []string{"compositor"},
			Args: slices.Concat([]string{
				"controller",
				"--group", opts.Group,
				"--version", opts.Version,
				"--resource", opts.Plural,
				// The pod runs in Compositor's namespace, not the definition's.
				"--namespace", def.Namespace,
				"--health-probe-bind-address", ":" + strconv.Itoa(HealthPort),
				"--metrics-bind-address", ":" + strconv.Itoa(MetricsPort),
			}, releaseSealArgs(opts.ReleaseSealNamespace), chartArchiveArgs(opts.ChartArchiveNamespace),
				allowChartNetworkArgs(opts.AllowChartNetworks)),
			Env: env(def),
			Ports: []corev1.ContainerPort{
				{Name: "health", ContainerPort: HealthPort, Protocol: corev1.ProtocolTCP},
				{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
			},
			LivenessProbe:  probe("/healthz", 15, 20),
			ReadinessProbe: probe("/readyz", 5, 10),
			Resources:      resources,
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Privileged:               ptr.To(false),
				ReadOnlyRootFilesystem:   ptr.To(true),
				RunAsNonRoot:             ptr.To(true),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: TmpDir}},
		}},
		Volumes: []corev1.Volume{{
			Name: "tmp",
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				SizeLimit: ptr.To(resource.MustParse("1Gi")),
			}},
		}},
	}
}

// env points Helm's directories into TmpDir (the root filesystem is read-only) and
// turns on debug logs for a verbose definition.
func env(def *corev1alpha1.CompositionDefinition) []corev1.EnvVar {
	vars := []corev1.EnvVar{
		{Name: "HELM_CACHE_HOME", Value: TmpDir + "/helm/cache"},
		{Name: "HELM_CONFIG_HOME", Value: TmpDir + "/helm/config"},
		{Name: "HELM_DATA_HOME", Value: TmpDir + "/helm/data"},
	}
	if def.Annotations[vocab.AnnotationConnectorVerbose] == "true" {
		vars = append(vars, corev1.EnvVar{Name: "CORE_PROVIDER_DEBUG", Value: "true"})
	}
	return vars
}

func probe(path string, initialDelay, period int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromString("health"), Scheme: corev1.URISchemeHTTP,
		}},
		InitialDelaySeconds: initialDelay,
		PeriodSeconds:       period,
		TimeoutSeconds:      1,
		FailureThreshold:    3,
	}
}

// releaseSealArgs passes the namespace of the release seal Secret, if any.
func releaseSealArgs(namespace string) []string {
	if namespace == "" {
		return nil
	}
	return []string{"--release-seal-namespace", namespace}
}

// chartArchiveArgs passes the namespace of the kept chart archives, if any.
func chartArchiveArgs(namespace string) []string {
	if namespace == "" {
		return nil
	}
	return []string{"--chart-archive-namespace", namespace}
}

// allowChartNetworkArgs passes each allowed range as its own --allow-chart-network.
func allowChartNetworkArgs(networks []netip.Prefix) []string {
	var args []string
	for _, n := range networks {
		args = append(args, "--allow-chart-network", n.String())
	}
	return args
}
