package rbac

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/api/vocab"
)

// ErrUnsafe means RBAC objects break an invariant of Check. Generate never returns
// such objects; the message lists every violation.
var ErrUnsafe = errors.New("RBAC objects break Compositor's invariants")

// readVerbs are the verbs that change nothing.
var readVerbs = []string{"get", "list", "watch"}

// dangerousVerbs hand out rights beyond the rules that carry them.
var dangerousVerbs = []string{"escalate", "bind", "impersonate"}

// Check asserts the invariants of a definition version's RBAC objects and returns
// ErrUnsafe listing every violation:
//
//   - no wildcard ("*") in groups, resources, verbs or resource names, and no
//     non-resource URLs or aggregation rules;
//   - no escalate, bind or impersonate, anywhere;
//   - nothing in the RBAC group, and no write on a type Refused refuses;
//   - no Secrets in the roles bound cluster-wide (CompositionsRole, ClusterRole):
//     Helm's release Secrets are only reachable through per-namespace ReleaseBindings;
//   - no subresources but the compositions' own status and finalizers, and those only
//     in the ReleaseRole, bound per namespace;
//   - the CredentialsRole, if any, only gets one Secret by name in the definition's
//     namespace;
//   - the ChartArchiveRole, if any, only gets one Secret by name, a kept chart archive
//     (chart-<hex>), in the namespace of its RoleBinding;
//   - the ReleaseSealRole, if any, only gets the key Secrets of its definitions
//     (SealKeySecretPrefix), by name, never ReleaseSealSecret (and
//     reads ConfigMaps ConstraintsConfigMap and BoundNamespaces, by name), in the
//     namespace of its RoleBinding;
//   - every binding binds its own role to the ServiceAccount only (and the release
//     binding, while an installation moves, to the one it had in the definition
//     namespace, LegacySubject, besides: no other binding ever names it).
func Check(objs *Objects) error {
	if objs == nil {
		return fmt.Errorf("%w: no objects", ErrUnsafe)
	}
	var v []string
	add := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }

	if objs.ServiceAccount == nil || objs.CompositionsRole == nil || objs.CompositionsBinding == nil || objs.ReleaseRole == nil {
		add("the ServiceAccount, CompositionsRole, CompositionsBinding and ReleaseRole are required")
		return fmt.Errorf("%w: %s", ErrUnsafe, strings.Join(v, "; "))
	}
	if (objs.ClusterRole == nil) != (objs.ClusterBinding == nil) {
		add("ClusterRole and ClusterBinding come together")
	}

	// The compositions' own subresources, in the role bound per namespace only.
	own := func(group, resource string) bool {
		return group == objs.compositions.Group &&
			(resource == objs.compositions.Resource+"/status" || resource == objs.compositions.Resource+"/finalizers")
	}
	none := func(string, string) bool { return false }
	type role struct {
		role         *rbacv1.ClusterRole
		clusterWide  bool
		subresources func(group, resource string) bool
	}
	roles := []role{
		{objs.CompositionsRole, true, none},
		{objs.ReleaseRole, false, own},
	}
	if objs.ClusterRole != nil {
		roles = append(roles, role{objs.ClusterRole, true, none})
	}
	for _, r := range roles {
		checkRole(r.role, r.clusterWide, r.subresources, add)
	}

	sa := objs.ServiceAccount
	checkBinding := func(kind, name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, role *rbacv1.ClusterRole) {
		want := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}
		if ref != want {
			add("%s %s refers to %s %s, not to %s", kind, name, ref.Kind, ref.Name, role.Name)
		}
		checkSubjects(objs, kind+" "+name, subjects, role == objs.ReleaseRole, add)
	}
	b := objs.CompositionsBinding
	checkBinding("ClusterRoleBinding", b.Name, b.RoleRef, b.Subjects, objs.CompositionsRole)
	if b := objs.ClusterBinding; b != nil && objs.ClusterRole != nil {
		checkBinding("ClusterRoleBinding", b.Name, b.RoleRef, b.Subjects, objs.ClusterRole)
	}
	rb := objs.ReleaseBinding(sa.Namespace)
	checkBinding("RoleBinding", rb.Name, rb.RoleRef, rb.Subjects, objs.ReleaseRole)
	checkCredentials(objs, add)
	checkChartArchive(objs, add)
	checkReleaseSeal(objs, add)

	if len(v) > 0 {
		return fmt.Errorf("%w: %s", ErrUnsafe, strings.Join(v, "; "))
	}
	return nil
}

// checkCredentials asserts that the CredentialsRole reads one named Secret in the
// definition's namespace, bound to the ServiceAccount only.
func checkCredentials(objs *Objects, add func(string, ...any)) {
	checkSecretReader("Credentials", objs.CredentialsRole, objs.CredentialsBinding, objs, add,
		func(secret string) bool { return !strings.Contains(secret, "*") }, "one named Secret")
	if role, binding := objs.CredentialsRole, objs.CredentialsBinding; role != nil && binding != nil &&
		(role.Namespace != objs.definitionNamespace || binding.Namespace != objs.definitionNamespace) {
		add("Role %s and RoleBinding %s must be in the definition's namespace %s", role.Name, binding.Name, objs.definitionNamespace)
	}
}

// checkChartArchive asserts that the ChartArchiveRole reads one kept chart archive by
// name, bound in its own namespace to the ServiceAccount only.
func checkChartArchive(objs *Objects, add func(string, ...any)) {
	role, binding := objs.ChartArchiveRole, objs.ChartArchiveBinding
	checkSecretReader("ChartArchive", role, binding, objs, add, keptArchiveName.MatchString, "one kept chart archive")
	if role != nil && binding != nil && (role.Namespace == "" || binding.Namespace != role.Namespace) {
		add("Role %s and RoleBinding %s must be in one namespace", role.Name, binding.Name)
	}
}

// checkReleaseSeal asserts that the ReleaseSealRole gets the key Secrets of its
// definitions by name, never the master key Secret ReleaseSealSecret nor another,
// bound in its own namespace to the ServiceAccount only.
func checkReleaseSeal(objs *Objects, add func(string, ...any)) {
	role, binding := objs.ReleaseSealRole, objs.ReleaseSealBinding
	// Besides the seal, the role may read ConfigMap ConstraintsConfigMap and, for a
	// controller Deployment, its BoundNamespaces, each by name.
	if role != nil {
		readers := []rbacv1.PolicyRule{constraintsRule()}
		if objs.BoundNamespaces.Name != "" {
			readers = append(readers, configMapReader(objs.BoundNamespaces.Name))
		}
		role = role.DeepCopy()
		for n := len(role.Rules); n > 1 && slices.ContainsFunc(readers, func(r rbacv1.PolicyRule) bool { return equalRules(role.Rules[n-1], r) }); n-- {
			role.Rules = role.Rules[:n-1]
		}
	}
	// The master key is never among them: only key Secrets of definitions.
	if role != nil && len(role.Rules) == 1 {
		keys := role.Rules[0].ResourceNames
		if len(keys) == 0 || !slices.IsSortedFunc(keys, strings.Compare) ||
			slices.ContainsFunc(keys, func(name string) bool { return !sealKeySecretName.MatchString(name) }) ||
			!equalRules(role.Rules[0], rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: keys}) {
			add("Role %s grants more than get on the key Secrets of its definitions: %v", role.Name, role.Rules)
		}
		if len(keys) > 0 {
			role = role.DeepCopy()
			role.Rules[0] = credentialsRule(keys[0]) // checked above: the others are like it
		}
	}
	checkSecretReader("ReleaseSeal", role, binding, objs, add,
		func(secret string) bool { return sealKeySecretName.MatchString(secret) }, "the key Secrets of its definitions")
	if role != nil && binding != nil && (role.Namespace == "" || binding.Namespace != role.Namespace) {
		add("Role %s and RoleBinding %s must be in one namespace", role.Name, binding.Name)
	}
}

// checkSecretReader asserts that role gets one Secret by a name allowed (what names
// it) and that binding binds role, and only role, to the ServiceAccount only. kind
// prefixes the fields' names in what it reports.
func checkSecretReader(kind string, role *rbacv1.Role, binding *rbacv1.RoleBinding, objs *Objects,
	add func(string, ...any), allowed func(secret string) bool, what string) {
	if (role == nil) != (binding == nil) {
		add("%sRole and %sBinding come together", kind, kind)
		return
	}
	if role == nil {
		return
	}
	if len(role.Rules) != 1 || len(role.Rules[0].ResourceNames) != 1 ||
		!equalRules(role.Rules[0], credentialsRule(role.Rules[0].ResourceNames[0])) || !allowed(role.Rules[0].ResourceNames[0]) {
		add("Role %s grants more than get on %s: %v", role.Name, what, role.Rules)
	}
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}); binding.RoleRef != want {
		add("RoleBinding %s refers to %s %s, not to Role %s", binding.Name, binding.RoleRef.Kind, binding.RoleRef.Name, role.Name)
	}
	checkSubjects(objs, "RoleBinding "+binding.Name, binding.Subjects, false, add)
}

// checkSubjects asserts that a binding names the ServiceAccount only or, when former
// (the release binding, while an installation moves), the one it had in the
// definition namespace (LegacySubject) besides.
func checkSubjects(objs *Objects, what string, subjects []rbacv1.Subject, former bool, add func(string, ...any)) {
	sa := objs.ServiceAccount
	self := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}
	legacy := LegacySubject(objs.definitionNamespace, objs.labels[vocab.LabelResource], objs.labels[vocab.LabelVersion])
	if !slices.Equal(subjects, []rbacv1.Subject{self}) && (!former || !slices.Equal(subjects, []rbacv1.Subject{self, legacy})) {
		add("%s binds %v, not only ServiceAccount %s/%s", what, subjects, sa.Namespace, sa.Name)
	}
}

// sealKeySecretName matches reconciler/composition KeySecretName.
var sealKeySecretName = regexp.MustCompile(`^` + SealKeySecretPrefix + `[0-9a-f]{24}$`)

// keptArchiveName matches chartfetch.KeptArchiveSecretName of a sha256 digest.
var keptArchiveName = regexp.MustCompile(`^chart-[0-9a-f]{20}$`)

func equalRules(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.ResourceNames, b.ResourceNames) && len(a.NonResourceURLs) == 0
}

func checkRole(role *rbacv1.ClusterRole, clusterWide bool, subresources func(group, resource string) bool, add func(string, ...any)) {
	name := "ClusterRole " + role.Name
	if role.AggregationRule != nil {
		add("%s aggregates other roles", name)
	}
	for i, rule := range role.Rules {
		at := fmt.Sprintf("%s rule %d", name, i)
		if len(rule.NonResourceURLs) > 0 {
			add("%s grants non-resource URLs %v", at, rule.NonResourceURLs)
		}
		if len(rule.APIGroups) == 0 || len(rule.Resources) == 0 || len(rule.Verbs) == 0 {
			add("%s needs groups, resources and verbs", at)
		}
		for _, list := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames} {
			for _, s := range list {
				if strings.Contains(s, "*") {
					add("%s has the wildcard %q", at, s)
				}
			}
		}
		for _, verb := range rule.Verbs {
			if slices.Contains(dangerousVerbs, verb) {
				add("%s grants %s", at, verb)
			}
		}
		writes := slices.ContainsFunc(rule.Verbs, func(verb string) bool { return !slices.Contains(readVerbs, verb) })
		for _, group := range rule.APIGroups {
			for _, resource := range rule.Resources {
				what := formatGR(schema.GroupResource{Group: group, Resource: resource})
				if group == rbacv1.GroupName {
					add("%s grants rights on %s", at, what)
				} else if reason, refused := Refused(group, resource); refused && writes {
					add("%s writes %s: %s", at, what, reason)
				}
				if clusterWide && group == "" && (resource == "secrets" || strings.HasPrefix(resource, "secrets/")) {
					add("%s grants Secrets cluster-wide", at)
				}
				if strings.Contains(resource, "/") && !subresources(group, resource) {
					add("%s grants the subresource %s", at, what)
				}
			}
		}
	}
}
