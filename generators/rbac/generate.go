package rbac

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
)

// API groups the controller of a generated API reads or writes besides the chart's.
const (
	eventsGroup = "events.k8s.io"
)

// HelmVerbs are the verbs Helm needs on a type it installs: get to find the live
// object, create, patch or update to install and upgrade, delete to uninstall, and
// list and watch to wait for readiness.
var HelmVerbs = []string{"create", "delete", "get", "list", "patch", "update", "watch"}

// ReleaseStorageVerbs are the verbs Helm's Secret storage driver needs on the Secrets
// that hold its releases, in the release namespace.
var ReleaseStorageVerbs = []string{"create", "delete", "get", "list", "patch", "update"}

// ReleaseSealSecret is the Secret, in Compositor's namespace, that keeps the key
// sealing Helm's release records (reconciler/composition ReleaseSeal): compositor serve
// makes it on its first start. A ReleaseSealRole may get it, and no other Secret.
const ReleaseSealSecret = "compositor-release-seal"

// SealKeySecretPrefix starts the name of the Secret, in Compositor's namespace, that
// keeps one definition's key (reconciler/composition KeySecretName): derived from the
// master key in ReleaseSealSecret, which no controller reads. A ReleaseSealRole may get
// the key Secrets of the definitions its controller serves, and no other Secret.
const SealKeySecretPrefix = "compositor-seal-"

// ErrInvalidOptions means Options cannot give valid object names.
var ErrInvalidOptions = errors.New("invalid RBAC options")

// Options describe one served version of a definition's generated API.
type Options struct {
	// Namespace is the definition's namespace. Its tenants may write there, so nothing
	// of the controller's identity lives there but the Role reading the chart's
	// credentials Secret (which is there too).
	Namespace string
	// IdentityNamespace is Compositor's own namespace, which no tenant writes: the
	// ServiceAccount lives there, and so does the controller Deployment. A Pod, a token
	// Secret or a TokenRequest can only use a ServiceAccount of its own namespace, so no
	// tenant of Namespace can mount or mint the controller's token. Empty means
	// Namespace, the layout before issue #46, left only to offline previews (compositor
	// lint) and tests: compositor serve always knows its namespace.
	IdentityNamespace string
	// WatchCompositions is for a controller Deployment, whose informer lists and
	// watches its compositions itself: it may read ConfigMap Names.BoundNamespaces, in
	// ReleaseSealNamespace, which lists the namespaces where its release role is bound
	// (and with it list and watch there), and watches there only. An in-process
	// controller reads through Compositor's informers. Neither gets a cluster-wide read
	// of compositions.
	WatchCompositions bool
	// FormerServiceAccount, while an installation moves from the layout where the
	// ServiceAccount lived in Namespace (LegacyServiceAccountName), makes the release
	// bindings name that ServiceAccount too, so that the controller still running as
	// it keeps writing its compositions and installing, in the namespaces where its
	// definition owns compositions, until the new one serves. No other binding names
	// it: a tenant of Namespace may mint its token, so it never reaches the seal keys,
	// the chart archive, the credentials or anything cluster-wide. Only Compositor's
	// own record of moves (IdentityMovesConfigMap) may set it, never an object in
	// Namespace.
	FormerServiceAccount bool
	// DefinitionName, when set, is recorded in LabelDefinitionName.
	DefinitionName string
	// Plural is the generated CRD's resource, e.g. fireworksapps.
	Plural string
	// Version is the served CRD version, e.g. v1-1-5.
	Version string
	// Group of the generated CRD; defaults to vocab.CompositionGroup.
	Group string
	// Types are what the chart creates, from ResourceTypes.
	Types []ResourceType
	// RemovedTypes are namespaced types that other chart versions of the kind create
	// and this one does not. A composition moved here from one of them is upgraded to
	// this chart, and Helm deletes what the old revision had and the new one does not,
	// if it can read it: the controller gets RemovalVerbs on them, no more.
	RemovedTypes []ResourceType
	// Labels are added to every object; the identity labels win over them.
	Labels map[string]string
	// CredentialsSecret names the Secret, in Namespace, of the chart's credentials;
	// empty when the chart needs none. The controller may read that Secret and no other.
	CredentialsSecret string
	// ChartArchiveNamespace is Compositor's namespace, where the chart archives are kept
	// in Secrets (chartstore Store); with ChartDigest, the controller may get the
	// Secret of that digest there, and no other. Empty generates nothing for it.
	ChartArchiveNamespace string
	// ChartDigest is the sha256 digest of the version's chart, "sha256:<64 hex>".
	ChartDigest string
	// ReleaseSealNamespace is Compositor's namespace, which keeps Secret
	// ReleaseSealSecret: the controller may get that Secret there, and no other, to seal
	// and prove Helm's release records as Compositor does. Empty generates nothing for it
	// (an in-process controller has the seal from Compositor).
	ReleaseSealNamespace string
	// SealKeySecrets name the key Secrets (SealKeySecretPrefix), in ReleaseSealNamespace,
	// of the definitions whose compositions the controller serves: it may get those,
	// by name, and no other. Required with ReleaseSealNamespace.
	SealKeySecrets []string
}

// Names are the names of the objects generated for one definition version. They hold
// the definition namespace, plural and version, so two definitions of one chart
// version in two namespaces never share an object.
type Names struct {
	// ServiceAccount, in Compositor's namespace (Options.IdentityNamespace); also the
	// name of the controller Deployment.
	ServiceAccount string
	// CompositionsRole names the ClusterRole on the compositions and its
	// ClusterRoleBinding.
	CompositionsRole string
	// ReleaseRole names the ClusterRole with the chart's namespaced rights.
	ReleaseRole string
	// ClusterRole names the ClusterRole with the chart's cluster-scoped rights and its
	// ClusterRoleBinding.
	ClusterRole string
	// ReleaseBinding names the RoleBinding of ReleaseRole in each composition namespace.
	ReleaseBinding string
	// Credentials names the Role, in the definition namespace, that reads the chart's
	// credentials Secret, and its RoleBinding.
	Credentials string
	// ChartArchive names the Role, in Compositor's namespace, that reads the Secret
	// keeping the chart archive, and its RoleBinding.
	ChartArchive string
	// ReleaseSeal names the Role, in Compositor's namespace, that reads Secret
	// ReleaseSealSecret, and its RoleBinding.
	ReleaseSeal string
	// BoundNamespaces names the ConfigMap, in Compositor's namespace, listing where the
	// release role is bound (Objects.BoundNamespaces).
	BoundNamespaces string
}

// identityPrefixLen is how much of "<namespace>-<plural>-<version>" a ServiceAccount
// name keeps before its hash, and identityHashLen how many hex digits of the hash
// follow a dash: 46+1+16 = 63 characters, a valid DNS label and label value whatever
// the lengths of its parts, and 64 bits of hash, so that no one finds another
// namespace, plural and version of the same name.
const (
	identityPrefixLen = 46
	identityHashLen   = 16
)

// ServiceAccountName returns the name of the ServiceAccount (and of the controller
// Deployment) of one served version of a definition of namespace, in Compositor's
// namespace: "<namespace>-<plural>-<version>", cut to 46 characters, a dash and the
// first 16 hex digits of the SHA-256 of "<namespace>/<plural>/<version>". Every
// definition namespace gets its own, so two teams' definitions of one chart version
// never share an identity; the readable part says whose it is.
func ServiceAccountName(namespace, plural, version string) string {
	readable := namespace + "-" + plural + "-" + version
	if len(readable) > identityPrefixLen {
		readable = readable[:identityPrefixLen]
	}
	sum := sha256.Sum256([]byte(namespace + "/" + plural + "/" + version))
	return readable + "-" + hex.EncodeToString(sum[:])[:identityHashLen]
}

// LegacyServiceAccountName is the name the ServiceAccount and the controller
// Deployment of a version had, in the definition's namespace, before they moved to
// Compositor's: <plural>-<version>-controller. Compositor removes such objects,
// found by their identity labels, once the new ones serve.
func LegacyServiceAccountName(plural, version string) string {
	return plural + "-" + version + "-controller"
}

// IdentityMovesConfigMap is Compositor's own record, in its namespace where no tenant
// writes, of the versions whose controller moves from the definition's namespace to
// Compositor's: written once, when an installation from before the move first starts,
// with a key (MoveKey) per version a definition then served (MoveHandover for those
// whose old controller Deployment ran, MoveRemove for the others); a key goes when
// its move is done and none is ever added after. A version is moving only while its
// key is there: nothing in a tenant's namespace can start a move again.
const IdentityMovesConfigMap = "compositor-identity-moves"

// Values of a version's key in IdentityMovesConfigMap.
const (
	// MoveHandover: the version's old controller Deployment ran when the record was
	// written; it keeps its release bindings, and may write the status of its
	// definition's compositions, until the new one serves.
	MoveHandover = "moving"
	// MoveRemove: the version had an identity in the definition's namespace and no
	// controller to hand over from: it is removed.
	MoveRemove = "remove"
)

// MoveKey is the key of a version in IdentityMovesConfigMap: "<namespace>.<plural>.
// <version>", unambiguous as each part is a DNS label, which has no dot.
func MoveKey(namespace, plural, version string) string {
	return namespace + "." + plural + "." + version
}

// NamesFor returns the object names for a definition namespace, plural and version.
func NamesFor(namespace, plural, version string) Names {
	prefix := "compositor:" + namespace + ":" + plural + "-" + version
	return Names{
		ServiceAccount:   ServiceAccountName(namespace, plural, version),
		CompositionsRole: prefix + ":compositions",
		ReleaseRole:      prefix + ":release",
		ClusterRole:      prefix + ":cluster",
		ReleaseBinding:   prefix,
		Credentials:      prefix + ":credentials",
		ChartArchive:     prefix + ":chart-archive",
		ReleaseSeal:      prefix + ":release-seal",
		BoundNamespaces:  ServiceAccountName(namespace, plural, version) + "-namespaces",
	}
}

// IdentityLabels select every object generated for one definition version, in any
// namespace: the ServiceAccount, the roles, the bindings and the controller.
func IdentityLabels(namespace, plural, version string) map[string]string {
	return map[string]string{
		vocab.LabelManagedBy:           vocab.ManagedBy,
		vocab.LabelDefinitionNamespace: namespace,
		vocab.LabelResource:            plural,
		vocab.LabelVersion:             version,
	}
}

// LabelValue makes s a valid label value: s itself when it is one, else a prefix of
// it followed by a hash of the whole (definition names may be longer than 63).
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	prefix := []byte{}
	for i := 0; i < len(s) && len(prefix) < 52; i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || (len(prefix) > 0 && (c == '-' || c == '_' || c == '.')) {
			prefix = append(prefix, c)
		}
	}
	if len(prefix) == 0 {
		return hex.EncodeToString(sum[:])[:16]
	}
	return string(prefix) + "-" + hex.EncodeToString(sum[:])[:10]
}

// Objects are the RBAC objects of one definition version. Apply them with List;
// bind ReleaseRole in each namespace that holds compositions with ReleaseBinding.
type Objects struct {
	// ServiceAccount the version's controller runs as.
	ServiceAccount *corev1.ServiceAccount
	// CompositionsRole lets the controller record events and read definitions and
	// policies in every namespace. Reading and writing its compositions is the
	// ReleaseRole's.
	CompositionsRole *rbacv1.ClusterRole
	// CompositionsBinding binds CompositionsRole cluster-wide.
	CompositionsBinding *rbacv1.ClusterRoleBinding
	// ReleaseRole holds the chart's namespaced rights, Helm's release Secrets, and the
	// rights on the compositions themselves (get, list, watch, update, their status and
	// finalizers).
	// It is never bound cluster-wide: ReleaseBinding binds it in one namespace, where
	// the definition owns compositions.
	ReleaseRole *rbacv1.ClusterRole
	// ClusterRole holds the chart's cluster-scoped rights; nil when it has none.
	ClusterRole *rbacv1.ClusterRole
	// ClusterBinding binds ClusterRole cluster-wide; nil with ClusterRole.
	ClusterBinding *rbacv1.ClusterRoleBinding
	// CredentialsRole lets the controller get the chart's credentials Secret, by name,
	// in the definition namespace; nil when the chart needs no credentials.
	CredentialsRole *rbacv1.Role
	// CredentialsBinding binds CredentialsRole; nil with it.
	CredentialsBinding *rbacv1.RoleBinding
	// ChartArchiveRole lets the controller get the Secret that keeps its chart archive,
	// by name, in Compositor's namespace, so that it installs without the chart source;
	// nil without Options.ChartArchiveNamespace.
	ChartArchiveRole *rbacv1.Role
	// ChartArchiveBinding binds ChartArchiveRole, in Compositor's namespace, to the
	// ServiceAccount; nil with it.
	ChartArchiveBinding *rbacv1.RoleBinding
	// ReleaseSealRole lets the controller get Secret ReleaseSealSecret, by name, in
	// Compositor's namespace: the key that seals Helm's release records; nil without
	// Options.ReleaseSealNamespace.
	ReleaseSealRole *rbacv1.Role
	// ReleaseSealBinding binds ReleaseSealRole, in Compositor's namespace, to the
	// ServiceAccount; nil with it.
	ReleaseSealBinding *rbacv1.RoleBinding
	// BoundNamespaces, with Options.WatchCompositions and ReleaseSealNamespace, is the
	// ConfigMap, in Compositor's namespace, whose keys are the namespaces where the
	// release role is bound (reconciler/binding keeps it): the controller Deployment
	// watches its compositions there only. ReleaseSealRole may read it, by name.
	BoundNamespaces types.NamespacedName

	releaseBindingName  string
	labels              map[string]string
	definitionNamespace string
	compositions        schema.GroupResource
	// subjects the release bindings name: the ServiceAccount, and while an
	// installation moves (Options.FormerServiceAccount) the one it had in the
	// definition namespace. Every other binding names the ServiceAccount only.
	subjects []rbacv1.Subject
}

// Generate returns the RBAC objects of one definition version. They pass Check.
func Generate(opts Options) (*Objects, error) {
	if opts.Group == "" {
		opts.Group = vocab.CompositionGroup
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	names := NamesFor(opts.Namespace, opts.Plural, opts.Version)
	labels := maps.Clone(opts.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	if opts.DefinitionName != "" {
		labels[vocab.LabelDefinitionName] = LabelValue(opts.DefinitionName)
	}
	maps.Copy(labels, IdentityLabels(opts.Namespace, opts.Plural, opts.Version))

	var namespaced, cluster []ResourceType
	for _, t := range opts.Types {
		if t.Namespaced {
			namespaced = append(namespaced, t)
		} else {
			cluster = append(cluster, t)
		}
	}

	sa := &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: objectMeta(names.ServiceAccount, cmp.Or(opts.IdentityNamespace, opts.Namespace), labels),
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}
	releaseSubjects := slices.Clone(subjects)
	if opts.FormerServiceAccount {
		releaseSubjects = append(releaseSubjects, LegacySubject(opts.Namespace, opts.Plural, opts.Version))
	}
	objs := &Objects{
		ServiceAccount:   sa,
		CompositionsRole: clusterRole(names.CompositionsRole, labels, compositionRules()),
		ReleaseRole: clusterRole(names.ReleaseRole, labels, releaseRules(opts.Group, opts.Plural, namespaced,
			removedOnly(opts.RemovedTypes, namespaced))),
		releaseBindingName:  names.ReleaseBinding,
		labels:              labels,
		definitionNamespace: opts.Namespace,
		compositions:        schema.GroupResource{Group: opts.Group, Resource: opts.Plural},
		subjects:            releaseSubjects,
	}
	objs.CompositionsBinding = clusterRoleBinding(objs.CompositionsRole, subjects)
	if len(cluster) > 0 {
		objs.ClusterRole = clusterRole(names.ClusterRole, labels, typeRules(cluster, HelmVerbs))
		objs.ClusterBinding = clusterRoleBinding(objs.ClusterRole, subjects)
	}
	if opts.CredentialsSecret != "" {
		objs.CredentialsRole, objs.CredentialsBinding = secretReader(names.Credentials, opts.Namespace, opts.CredentialsSecret, labels, subjects)
	}
	if opts.ChartArchiveNamespace != "" {
		objs.ChartArchiveRole, objs.ChartArchiveBinding = secretReader(names.ChartArchive, opts.ChartArchiveNamespace,
			chartfetch.KeptArchiveSecretName(opts.ChartDigest), labels, subjects)
	}
	if opts.ReleaseSealNamespace != "" {
		objs.ReleaseSealRole, objs.ReleaseSealBinding = secretReader(names.ReleaseSeal, opts.ReleaseSealNamespace,
			"", labels, subjects)
		keys := slices.Clone(opts.SealKeySecrets)
		slices.Sort(keys)
		objs.ReleaseSealRole.Rules[0].ResourceNames = slices.Compact(keys)
		// And, in the same namespace, the Gatekeeper constraints serve enforces.
		objs.ReleaseSealRole.Rules = append(objs.ReleaseSealRole.Rules, constraintsRule())
		if opts.WatchCompositions {
			objs.BoundNamespaces = types.NamespacedName{Namespace: opts.ReleaseSealNamespace, Name: names.BoundNamespaces}
			objs.ReleaseSealRole.Rules = append(objs.ReleaseSealRole.Rules, configMapReader(names.BoundNamespaces))
		}
	}
	if err := Check(objs); err != nil {
		return nil, err
	}
	return objs, nil
}

// LegacySubject is the ServiceAccount a version's controller ran as before it moved to
// Compositor's namespace: LegacyServiceAccountName in the definition namespace.
func LegacySubject(namespace, plural, version string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: LegacyServiceAccountName(plural, version), Namespace: namespace}
}

// secretReader is a Role named name in namespace that may get the one Secret secret
// there, and its RoleBinding of the same name to subjects.
func secretReader(name, namespace, secret string, labels map[string]string, subjects []rbacv1.Subject) (*rbacv1.Role, *rbacv1.RoleBinding) {
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: objectMeta(name, namespace, labels),
		Rules:      []rbacv1.PolicyRule{credentialsRule(secret)},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: objectMeta(name, namespace, labels),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   slices.Clone(subjects),
	}
	return role, binding
}

// isDigest tells a "sha256:" digest of 64 lowercase hex digits.
func isDigest(digest string) bool {
	hexDigest, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexDigest) != sha256.Size*2 {
		return false
	}
	_, err := hex.DecodeString(hexDigest)
	return err == nil && strings.ToLower(hexDigest) == hexDigest
}

func (o Options) validate() error {
	var problems []string
	for _, f := range []struct{ name, value string }{
		{"namespace", o.Namespace}, {"plural", o.Plural}, {"version", o.Version},
		{"identity namespace", cmp.Or(o.IdentityNamespace, o.Namespace)},
	} {
		for _, msg := range validation.IsDNS1123Label(f.value) {
			problems = append(problems, fmt.Sprintf("%s %q: %s", f.name, f.value, msg))
		}
	}
	if o.CredentialsSecret != "" {
		for _, msg := range validation.IsDNS1123Subdomain(o.CredentialsSecret) {
			problems = append(problems, fmt.Sprintf("credentials Secret %q: %s", o.CredentialsSecret, msg))
		}
	}
	if o.ChartArchiveNamespace != "" {
		for _, msg := range validation.IsDNS1123Label(o.ChartArchiveNamespace) {
			problems = append(problems, fmt.Sprintf("chart archive namespace %q: %s", o.ChartArchiveNamespace, msg))
		}
		if !isDigest(o.ChartDigest) {
			problems = append(problems, fmt.Sprintf("chart digest %q: want sha256: and 64 lowercase hex digits", o.ChartDigest))
		}
	}
	if o.ReleaseSealNamespace != "" {
		for _, msg := range validation.IsDNS1123Label(o.ReleaseSealNamespace) {
			problems = append(problems, fmt.Sprintf("release seal namespace %q: %s", o.ReleaseSealNamespace, msg))
		}
		if len(o.SealKeySecrets) == 0 {
			problems = append(problems, "a release seal namespace needs the key Secrets of the definitions served")
		}
		for _, name := range o.SealKeySecrets {
			if !sealKeySecretName.MatchString(name) {
				problems = append(problems, fmt.Sprintf("seal key Secret %q: want %s and 24 hex digits", name, SealKeySecretPrefix))
			}
		}
	}
	for _, msg := range validation.IsDNS1123Subdomain(o.Group) {
		problems = append(problems, fmt.Sprintf("group %q: %s", o.Group, msg))
	}
	for _, t := range o.Types {
		if t.Resource == "" {
			problems = append(problems, fmt.Sprintf("type %s %s has no resource", t.Group, t.Kind))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %v", ErrInvalidOptions, problems)
	}
	return nil
}

// ReleaseBinding returns the RoleBinding, in namespace, of ReleaseRole to the
// ServiceAccount: it lets the controller write its compositions and install their
// releases in that namespace only.
func (o *Objects) ReleaseBinding(namespace string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: objectMeta(o.releaseBindingName, namespace, o.labels),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: o.ReleaseRole.Name},
		Subjects:   slices.Clone(o.subjects),
	}
}

// WithFormer returns objects whose release bindings also name the ServiceAccount the
// version's controller ran as in the definition namespace (LegacySubject), as
// Options.FormerServiceAccount does for the others: while an installation moves, the
// controller Deployment still running as it keeps its rights until the new one
// serves.
func (o *Objects) WithFormer() *Objects {
	out := *o
	legacy := LegacySubject(o.definitionNamespace, o.labels[vocab.LabelResource], o.labels[vocab.LabelVersion])
	if !slices.Contains(o.subjects, legacy) {
		out.subjects = append(slices.Clone(o.subjects), legacy)
	}
	return &out
}

// List returns the objects in the order to apply them: the ServiceAccount, the roles,
// then the bindings. ReleaseBindings are not included.
func (o *Objects) List() []client.Object {
	list := []client.Object{o.ServiceAccount, o.CompositionsRole, o.ReleaseRole}
	if o.ClusterRole != nil {
		list = append(list, o.ClusterRole)
	}
	if o.CredentialsRole != nil {
		list = append(list, o.CredentialsRole)
	}
	if o.ChartArchiveRole != nil {
		list = append(list, o.ChartArchiveRole)
	}
	if o.ReleaseSealRole != nil {
		list = append(list, o.ReleaseSealRole)
	}
	list = append(list, o.CompositionsBinding)
	if o.ClusterBinding != nil {
		list = append(list, o.ClusterBinding)
	}
	if o.CredentialsBinding != nil {
		list = append(list, o.CredentialsBinding)
	}
	if o.ChartArchiveBinding != nil {
		list = append(list, o.ChartArchiveBinding)
	}
	if o.ReleaseSealBinding != nil {
		list = append(list, o.ReleaseSealBinding)
	}
	return list
}

// ConstraintsConfigMap is the ConfigMap, in Compositor's namespace, where compositor
// serve writes the Gatekeeper templates and constraints it enforces, so that the
// generated controllers judge with them at their install gate. The ReleaseSealRole
// may read it, by name.
const ConstraintsConfigMap = "compositor-constraints"

// constraintsRule reads and watches ConstraintsConfigMap by name.
func constraintsRule() rbacv1.PolicyRule { return configMapReader(ConstraintsConfigMap) }

// configMapReader reads and watches one ConfigMap by name.
func configMapReader(name string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}, ResourceNames: []string{name}}
}

// credentialsRule reads one Secret by name.
func credentialsRule(secret string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{secret}}
}

func objectMeta(name, namespace string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: maps.Clone(labels)}
}

func clusterRole(name string, labels map[string]string, rules []rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
		ObjectMeta: objectMeta(name, "", labels),
		Rules:      rules,
	}
}

func clusterRoleBinding(role *rbacv1.ClusterRole, subjects []rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
		ObjectMeta: objectMeta(role.Name, "", role.Labels),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   slices.Clone(subjects),
	}
}

// compositionRules are what a controller needs in every namespace: record events,
// read definitions, namespaces and policies. Reading and writing compositions is bound
// per namespace (compositionWriteRules).
func compositionRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{eventsGroup}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{vocab.DefinitionGroup}, Resources: []string{vocab.DefinitionResource}, Verbs: []string{"get", "list", "watch"}},
		// To tell a namespace being deleted, where a release goes with its namespace.
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		// To judge what it installs with the rendered policies, as admission does.
		{APIGroups: []string{vocab.PolicyGroup}, Resources: []string{vocab.PolicyResource}, Verbs: []string{"get", "list", "watch"}},
	}
}

// compositionWriteRules let a controller reconcile the compositions of its resource in
// the namespace where they are bound: read, list, watch and update them, their status
// and finalizers.
func compositionWriteRules(group, plural string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{group}, Resources: []string{plural}, Verbs: []string{"get", "list", "watch", "patch", "update"}},
		{APIGroups: []string{group}, Resources: []string{plural + "/status"}, Verbs: []string{"get", "patch", "update"}},
		{APIGroups: []string{group}, Resources: []string{plural + "/finalizers"}, Verbs: []string{"update"}},
	}
}

// releaseRules grant the compositions of group and plural (compositionWriteRules),
// HelmVerbs on the chart's namespaced types, RemovalVerbs on the types it removes,
// Helm's release storage on Secrets, unless the chart's own Secrets already cover it,
// and the compositions' CompositionRevisions (RevisionRule).
func releaseRules(group, plural string, namespaced, removed []ResourceType) []rbacv1.PolicyRule {
	rules := slices.Concat(compositionWriteRules(group, plural), typeRules(namespaced, HelmVerbs), typeRules(removed, RemovalVerbs))
	if !slices.ContainsFunc(namespaced, func(t ResourceType) bool { return t.Group == "" && t.Resource == "secrets" }) {
		rules = append(rules, rbacv1.PolicyRule{
			APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: slices.Clone(ReleaseStorageVerbs),
		})
	}
	return append(rules, RevisionRule())
}

// RevisionVerbs are what a controller does with its compositions' CompositionRevisions:
// it writes one per install, replaces an object of its name that is not its record,
// and deletes the oldest beyond the definition's limit.
var RevisionVerbs = []string{"create", "delete", "get", "list", "update"}

// RevisionRule lets the controller keep its compositions' CompositionRevisions, in
// the namespaces where the release role is bound.
func RevisionRule() rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{vocab.DefinitionGroup}, Resources: []string{vocab.RevisionResource}, Verbs: slices.Clone(RevisionVerbs)}
}

// typeRules returns one rule per API group, groups and resources sorted.
func typeRules(types []ResourceType, verbs []string) []rbacv1.PolicyRule {
	byGroup := map[string][]string{}
	for _, t := range types {
		if !slices.Contains(byGroup[t.Group], t.Resource) {
			byGroup[t.Group] = append(byGroup[t.Group], t.Resource)
		}
	}
	groups := slices.Sorted(maps.Keys(byGroup))
	rules := make([]rbacv1.PolicyRule, 0, len(groups))
	for _, g := range groups {
		resources := byGroup[g]
		sort.Strings(resources)
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: resources, Verbs: slices.Clone(verbs)})
	}
	return rules
}

// RemovalVerbs are the verbs Helm needs to delete an object a new revision no longer
// has: it reads it (and leaves it alone when it cannot), then deletes it.
var RemovalVerbs = []string{"delete", "get"}

// removedOnly are the namespaced types of removed that are not among types, without
// those Compositor never grants.
func removedOnly(removed, types []ResourceType) []ResourceType {
	var out []ResourceType
	for _, t := range removed {
		if _, refused := Refused(t.Group, t.Resource); !t.Namespaced || refused || slices.ContainsFunc(types, func(u ResourceType) bool { return u.GroupResource() == t.GroupResource() }) {
			continue
		}
		if !slices.ContainsFunc(out, func(u ResourceType) bool { return u.GroupResource() == t.GroupResource() }) {
			out = append(out, t)
		}
	}
	return out
}
