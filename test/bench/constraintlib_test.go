package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// probedConstraints are the constraints the denial probe (constraintDenials) breaks:
// every one that a composition's values can.
var probedConstraints = []string{
	"DeploymentReplicaLimits/one-to-eight-replicas",
	"FireworksCacheMemory/cache-memory-cap",
	"FireworksImageRegistry/approved-registries",
	"FireworksPausedAnnotation/paused-is-boolean",
	"FireworksReplicaCap/team-replica-cap",
	"FireworksServiceExposure/team-service-exposure",
	"FireworksStorageCap/storage-cap",
	"FireworksTagNotLatest/pinned-composition-images",
	"FireworksTeamLabel/team-label-format",
	"PodAllowedPullPolicy/images-are-pulled",
	"PodAllowedRegistries/pods-from-approved-registries",
	"PodDisallowedTags/no-moving-tags",
	"ServiceAllowedTypes/no-load-balancers",
	"ServicePortRange/service-ports",
}

// TestConstraintLibraryAdmitsTheBenchComposition holds test/bench/constraints to what
// bench-constraints relies on: 50 templates that compile, one constraint each, that
// admit every composition the load sends, so that the measured path is the whole
// evaluation and not an early denial, and that find what the denial probe breaks.
func TestConstraintLibraryAdmitsTheBenchComposition(t *testing.T) {
	ctx := context.Background()
	lib, err := loadConstraintLibrary(ctx, "constraints")
	if err != nil {
		t.Fatal(err)
	}
	if len(lib.Templates) != 50 || len(lib.Constraints) != 50 {
		t.Fatalf("%d templates and %d constraints, want 50 of each", len(lib.Templates), len(lib.Constraints))
	}
	e, err := newLocalEngine(ctx, "policies", lib)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := admittedSpec()
	if err != nil {
		t.Fatal(err)
	}
	calls := append(compositionCreates(benchNamespace, 10, spec), compositionUpdates(benchNamespace, 10, spec)...)
	for _, c := range append(calls, compositionUpdatesUnremembered(benchNamespace, 10, spec)...) {
		d, err := e.check(ctx, c.body)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Violations) > 0 {
			t.Errorf("the bench composition is not admitted cleanly: %v", d.Violations)
		}
	}

	probe := constraintDenials(benchNamespace, 1, spec)[0]
	d, err := e.check(ctx, probe.body)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, v := range d.Violations {
		if strings.HasPrefix(v.Source, "constraint ") && v.Action == v1alpha1.EnforcementDeny {
			found = append(found, v.Policy)
		}
	}
	slices.Sort(found)
	found = slices.Compact(found)
	if !slices.Equal(found, probedConstraints) {
		t.Errorf("the denial probe trips\n  %v\nwant\n  %v\n(violations: %v)", found, probedConstraints, d.Violations)
	}
	for _, id := range probedConstraints {
		if !slices.Contains(lib.constraintIDs(), id) {
			t.Errorf("probed constraint %s is not in the library", id)
		}
	}
}

// TestConstraintsSectionIsReplaced checks that the marked section replaces its old
// self and is carried over by make bench's rewrite of the file.
func TestConstraintsSectionIsReplaced(t *testing.T) {
	section := constraintsBegin + "\n## Gatekeeper constraints (issue #31)\nnew\n" + constraintsEnd + "\n"
	old := "# Benchmarks\n\n" + constraintsBegin + "\n## Gatekeeper constraints (issue #31)\nold\n" + constraintsEnd + "\n\n## How to reproduce\n"
	if got, want := replaceConstraintsSection(old, section), strings.Replace(old, "old", "new", 1); got != want {
		t.Errorf("replacing:\n%s\nwant:\n%s", got, want)
	}
	fresh := "# Benchmarks\nfigures\n\n## How to reproduce\nmake bench\n"
	got := carryConstraintsSection(old, fresh)
	if want := "# Benchmarks\nfigures\n\n" + constraintsBegin + "\n## Gatekeeper constraints (issue #31)\nold\n" + constraintsEnd + "\n\n## How to reproduce\nmake bench\n"; got != want {
		t.Errorf("carrying:\n%s\nwant:\n%s", got, want)
	}
	if got := carryConstraintsSection("# Benchmarks\n", fresh); got != fresh {
		t.Errorf("nothing to carry, got %q", got)
	}
}

// TestEveryConstraintFindsSomething holds each constraint the denial probe cannot
// reach to a violation of its own, so that no template of the library is vacuous: its
// cost in the measured path stands for a check that works.
func TestEveryConstraintFindsSomething(t *testing.T) {
	ctx := context.Background()
	lib, err := loadConstraintLibrary(ctx, "constraints")
	if err != nil {
		t.Fatal(err)
	}
	pod := func(spec map[string]any) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}, "spec": spec}
	}
	container := func(fields map[string]any) map[string]any {
		c := map[string]any{"name": "web", "image": "registry.example.com/web:1"}
		maps.Copy(c, fields)
		return map[string]any{"containers": []any{c}}
	}
	helm := map[string]any{"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/instance": "rel"}
	object := func(apiVersion, kind, name string, labels map[string]any, fields map[string]any) map[string]any {
		obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name, "labels": labels}}
		maps.Copy(obj, fields)
		return obj
	}
	deployment := func(name string, labels map[string]any, spec map[string]any) map[string]any {
		return object("apps/v1", "Deployment", name, labels, map[string]any{"spec": spec})
	}
	service := func(labels map[string]any, spec map[string]any) map[string]any {
		return object("v1", "Service", "rel-svc", labels, map[string]any{"spec": spec})
	}
	configMap := func(labels map[string]any, data map[string]any) map[string]any {
		return object("v1", "ConfigMap", "rel-config", labels, map[string]any{"data": data})
	}
	manyKeys := map[string]any{}
	for i := range 21 {
		manyKeys[fmt.Sprintf("KEY_%d", i)] = "v"
	}
	fireworks := func(size string) map[string]any {
		return object(compositionGroup+"/"+compositionVersion, compositionKind, "fw", map[string]any{"team": "a"},
			map[string]any{"spec": map[string]any{"storage": map[string]any{"size": size}}})
	}
	for _, tc := range []struct {
		constraint string
		obj, old   map[string]any
		namespace  string
	}{
		{constraint: "PodImagePinned/images-are-pinned", obj: pod(container(map[string]any{"image": "nginx"}))},
		{constraint: "PodNoPrivileged/no-privileged-containers", obj: pod(container(map[string]any{"securityContext": map[string]any{"privileged": true}}))},
		{constraint: "PodNoHostNamespaces/no-host-namespaces", obj: pod(map[string]any{"hostNetwork": true, "containers": []any{}})},
		{constraint: "PodNoHostPath/host-paths-under-var-log", obj: pod(map[string]any{"volumes": []any{map[string]any{"name": "etc", "hostPath": map[string]any{"path": "/etc"}}}})},
		{constraint: "PodAllowedCapabilities/only-bind-capability", obj: pod(container(map[string]any{"securityContext": map[string]any{"capabilities": map[string]any{"add": []any{"SYS_ADMIN"}}}}))},
		{constraint: "PodHostPortRange/host-ports-in-reserved-range", obj: pod(container(map[string]any{"ports": []any{map[string]any{"containerPort": 80, "hostPort": 80}}}))},
		{constraint: "PodContainerNames/container-names", obj: pod(container(map[string]any{"name": "Web_1"}))},
		{constraint: "PodNoPrivilegeEscalation/no-privilege-escalation", obj: pod(container(map[string]any{"securityContext": map[string]any{"allowPrivilegeEscalation": true}}))},
		{constraint: "PodNoRootUser/no-root-user", obj: pod(container(map[string]any{"securityContext": map[string]any{"runAsUser": 0}}))},
		{constraint: "PodAllowedVolumeTypes/restricted-volume-types", obj: pod(map[string]any{"volumes": []any{map[string]any{"name": "n", "nfs": map[string]any{"server": "x"}}}})},
		{constraint: "PodEnvFromRelease/env-from-own-release", obj: map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "p", "labels": map[string]any{"app.kubernetes.io/instance": "rel"}},
			"spec":     container(map[string]any{"envFrom": []any{map[string]any{"configMapRef": map[string]any{"name": "other-config"}}}})}},
		{constraint: "PodMaxContainers/at-most-four-containers", obj: pod(map[string]any{"containers": []any{
			map[string]any{"name": "a"}, map[string]any{"name": "b"}, map[string]any{"name": "c"}, map[string]any{"name": "d"}, map[string]any{"name": "e"}}})},
		{constraint: "PodContainerPorts/web-ports-only", obj: pod(container(map[string]any{"ports": []any{map[string]any{"containerPort": 22}}}))},
		{constraint: "PodSeccompProfile/seccomp-runtime-default", obj: pod(map[string]any{"securityContext": map[string]any{"seccompProfile": map[string]any{"type": "Unconfined"}}})},
		{constraint: "PodProcMount/default-proc-mount", obj: pod(container(map[string]any{"securityContext": map[string]any{"procMount": "Unmasked"}}))},
		{constraint: "PodDefaultSAAutomount/no-default-sa-token", obj: pod(map[string]any{"automountServiceAccountToken": true})},
		{constraint: "DeploymentRequiredLabels/workloads-have-app-labels", obj: deployment("d", nil, map[string]any{})},
		{constraint: "DeploymentSelectorMatches/selector-selects-template", obj: deployment("d", nil, map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "a"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "b"}}}})},
		{constraint: "DeploymentRollingUpdate/keep-pods-during-updates", obj: deployment("d", nil, map[string]any{
			"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": "100%"}}})},
		{constraint: "DeploymentRevisionHistory/bounded-revision-history", obj: deployment("d", nil, map[string]any{"revisionHistoryLimit": 50})},
		{constraint: "ObjectNameLength/names-fit-dns-labels", obj: deployment(strings.Repeat("d", 60), nil, map[string]any{})},
		{constraint: "WorkloadNameFollowsRelease/named-after-release", obj: deployment("other", helm, map[string]any{})},
		{constraint: "ServiceNoExternalIPs/no-external-ips", obj: service(nil, map[string]any{"externalIPs": []any{"1.2.3.4"}})},
		{constraint: "ServicePortNames/ports-named-by-protocol", obj: service(nil, map[string]any{"ports": []any{map[string]any{"port": 80}}})},
		{constraint: "ServiceNodePortRange/team-node-ports", obj: service(nil, map[string]any{"ports": []any{map[string]any{"name": "http", "port": 80, "nodePort": 30001}}})},
		{constraint: "ServiceSelectorNotEmpty/services-select-pods", obj: service(nil, map[string]any{})},
		{constraint: "ServiceTargetPortNamed/named-target-ports", obj: service(helm, map[string]any{"ports": []any{map[string]any{"name": "http", "port": 80, "targetPort": 8080}}})},
		{constraint: "ConfigMapKeyFormat/env-style-keys", obj: configMap(helm, map[string]any{"lower": "v"})},
		{constraint: "ConfigMapMaxKeys/at-most-twenty-keys", obj: configMap(nil, manyKeys)},
		{constraint: "ConfigMapMaxSize/small-config-maps", obj: configMap(nil, map[string]any{"BIG": strings.Repeat("x", 9000)})},
		{constraint: "ConfigMapNoSecretKeys/no-credentials-in-config-maps", obj: configMap(nil, map[string]any{"DB_PASSWORD": "x"})},
		{constraint: "HelmVersionLabel/helm-objects-carry-version", obj: configMap(map[string]any{"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/version": "latest"}, nil)},
		{constraint: "AnnotationSize/small-annotations", obj: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "c", "annotations": map[string]any{"note": strings.Repeat("x", 20000)}}}},
		{constraint: "NoReservedNamespaces/tenant-namespaces-only", obj: configMap(nil, nil), namespace: "default"},
		{constraint: "ResourceNameFormat/dns-names", obj: object("v1", "ConfigMap", "Bad_Name", nil, nil)},
		{constraint: "FireworksStorageImmutable/storage-size-immutable", obj: fireworks("20Gi"), old: fireworks("10Gi")},
	} {
		t.Run(tc.constraint, func(t *testing.T) {
			ns := cmp.Or(tc.namespace, benchNamespace)
			s := gatekeeper.SubjectOf(tc.obj)
			s.Namespace, s.OldObject = ns, tc.old
			s.NamespaceObject = map[string]any{"apiVersion": "v1", "kind": "Namespace",
				"metadata": map[string]any{"name": ns, "labels": map[string]any{"kubernetes.io/metadata.name": ns}}}
			op := "CREATE"
			if tc.old != nil {
				op = "UPDATE"
			}
			var found []string
			for _, r := range lib.Library.Review(ctx, s, &gatekeeper.Request{Operation: op}) {
				if r.Err != nil {
					t.Fatalf("%s/%s: %v", r.Constraint.Kind, r.Constraint.Name, r.Err)
				}
				id := r.Constraint.Kind + "/" + r.Constraint.Name
				found = append(found, id)
				if id == tc.constraint {
					t.Log(r.Msg)
				}
			}
			if !slices.Contains(found, tc.constraint) {
				t.Errorf("%s found nothing; the violations were of %v", tc.constraint, found)
			}
		})
	}
	covered := map[string]bool{}
	for _, id := range probedConstraints {
		covered[id] = true
	}
	t.Run("coverage", func(t *testing.T) {
		src, err := os.ReadFile("constraintlib_test.go")
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range lib.constraintIDs() {
			if !covered[id] && !strings.Contains(string(src), `"`+id+`"`) {
				t.Errorf("constraint %s has no case: neither the probe nor this test shows it finds anything", id)
			}
		}
	})
}
