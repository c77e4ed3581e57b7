package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/reconciler/constraints"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// allowedReposTemplate is written for this test in the shape of gatekeeper-library's
// templates: Rego v0, a lib, parameters with a schema, Pods matched, and a CEL half
// that Compositor does not run.
const allowedReposTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: e2eallowedrepos
spec:
  crd:
    spec:
      names:
        kind: E2EAllowedRepos
      validation:
        openAPIV3Schema:
          type: object
          properties:
            repos:
              type: array
              items: {type: string}
  targets:
    - target: admission.k8s.gatekeeper.sh
      code:
        - engine: K8sNativeValidation
          source:
            validations:
              - expression: "true"
        - engine: Rego
          source:
            libs:
              - |
                package lib.e2econtainers

                containers[c] {
                  c := input.review.object.spec.containers[_]
                }
                containers[c] {
                  c := input.review.object.spec.initContainers[_]
                }
            rego: |
              package e2eallowedrepos

              import data.lib.e2econtainers.containers

              violation[{"msg": msg}] {
                c := containers[_]
                not allowed(c.image)
                msg := sprintf("container <%v> has an invalid image repo <%v>, allowed repos are %v", [c.name, c.image, input.parameters.repos])
              }

              allowed(image) {
                startswith(image, input.parameters.repos[_])
              }
`

const allowedReposConstraint = `apiVersion: constraints.gatekeeper.sh/v1beta1
kind: E2EAllowedRepos
metadata:
  name: internal-registry-only
spec:
  match:
    kinds:
      - apiGroups: [""]
        kinds: [Pod]
    namespaces: [gatekeeper-*]
  parameters:
    repos: ["registry.internal/"]
`

// teamLabelTemplate judges compositions themselves: a constraint whose match selects
// the composition's kind.
const teamLabelTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: e2eteamlabel
spec:
  crd:
    spec:
      names:
        kind: E2ETeamLabel
  targets:
    - target: admission.k8s.gatekeeper.sh
      code:
        - engine: Rego
          source:
            version: v1
            rego: |
              package e2eteamlabel

              violation contains {"msg": msg} if {
                not input.review.object.metadata.labels.team
                msg := sprintf("%v %v needs a team label (written by %v)", [input.review.kind.kind, input.review.name, input.review.userInfo.username])
              }
`

const teamLabelConstraint = `apiVersion: constraints.gatekeeper.sh/v1beta1
kind: E2ETeamLabel
metadata:
  name: compositions-need-a-team
spec:
  match:
    kinds:
      - apiGroups: [composition.krateo.io]
        kinds: [FireworksApp]
`

// replicaCapTemplate caps a Deployment's replicas on creation and leaves updates
// alone, as the pod-security library's templates do (is_update).
const replicaCapTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: e2ereplicacap
spec:
  crd:
    spec:
      names:
        kind: E2EReplicaCap
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package e2ereplicacap

        violation[{"msg": msg}] {
          not input.review.operation == "UPDATE"
          input.review.object.spec.replicas > 3
          msg := sprintf("%v replicas, at most 3", [input.review.object.spec.replicas])
        }
`

const replicaCapConstraint = `apiVersion: constraints.gatekeeper.sh/v1beta1
kind: E2EReplicaCap
metadata:
  name: at-most-three
spec:
  match:
    kinds:
      - apiGroups: [apps]
        kinds: [Deployment]
`

// uniqueHostTemplate reads data.inventory and does not opt into the release inventory:
// it must be refused, never silently allowed.
const uniqueHostTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: e2euniquehost
spec:
  crd:
    spec:
      names:
        kind: E2EUniqueHost
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package e2euniquehost

        violation[{"msg": "host taken"}] {
          other := data.inventory.namespace[_][_]["Ingress"][_]
          other.spec.rules[_].host == input.review.object.spec.rules[_].host
        }
`

// TestGatekeeperConstraintsJudgeWhatACompositionRenders follows issue #31: a
// ConstraintTemplate and a Constraint applied unchanged with kubectl (Compositor serves
// their API, Gatekeeper being absent), a chart whose Deployment's pod template breaks
// the constraint, the composition refused at `kubectl apply` with the template's
// message, the constraint's name and the rendered object; compliant values admitted
// and installed. A constraint on the composition's own kind judges the composition,
// seeing its author; a referential template is refused, saying why. An object of the
// release the tenant deleted, which Helm's upgrade creates again, is judged at the
// install gate as a creation, not as an update a template may leave alone.
func TestGatekeeperConstraintsJudgeWhatACompositionRenders(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	repo := sampleRepository(t)
	ctx := context.Background()
	const ns = "gatekeeper-apps"
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
		return res.Stdout
	}
	applyEventually := func(manifest string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			res := cp.Kubectl(ctx, manifest, "apply", "-f", "-")
			assert.NoError(c, res.Err, res.Stderr)
		}, time.Minute, 250*time.Millisecond)
	}

	// The templates and constraints, as a security team applies them.
	kubectl(allowedReposTemplate+"---\n"+teamLabelTemplate+"---\n"+uniqueHostTemplate, "apply", "-f", "-")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "wait", "crd/e2eallowedrepos.constraints.gatekeeper.sh", "crd/e2eteamlabel.constraints.gatekeeper.sh", "--for", "condition=Established", "--timeout", "10s")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 250*time.Millisecond)
	applyEventually(allowedReposConstraint)
	applyEventually(teamLabelConstraint)
	assert.Contains(t, kubectl("", "get", "constraints"), "internal-registry-only")
	// A constraint the engine would read otherwise than written is refused at apply.
	res := cp.Kubectl(ctx, "apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: E2EAllowedRepos\nmetadata: {name: typo}\nspec:\n  enforcementAction: Deny\n  match: {namespaces: gatekeeper-apps}\n", "apply", "-f", "-")
	require.Error(t, res.Err)
	assert.Contains(t, res.Stderr, "spec.enforcementAction")
	assert.Contains(t, res.Stderr, "spec.match.namespaces")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "get", "constrainttemplate", "e2eallowedrepos", "-o", "jsonpath={.status.created}")
		assert.NoError(c, res.Err, res.Stderr)
		assert.Equal(c, "true", res.Stdout)
	}, time.Minute, 250*time.Millisecond)

	// The referential template is refused in its status, with the reason.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "get", "constrainttemplate", "e2euniquehost", "-o", "jsonpath={.status.created} {.status.byPod[0].errors[0].code} {.status.byPod[0].errors[0].message}")
		assert.NoError(c, res.Err, res.Stderr)
		assert.Contains(c, res.Stdout, "false unsupported")
		assert.Contains(c, res.Stdout, "data.inventory")
		assert.Contains(c, res.Stdout, "compositor.dev/inventory")
	}, time.Minute, 250*time.Millisecond)

	kubectl("", "create", "namespace", ns)
	kubectl(definition(repo.URL, ns, "fireworksapp", "1.1.5"), "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "fireworksapp", "-n", ns, "--for", "condition=Ready=True", "--timeout", "120s")

	composition := func(labels, values string) string {
		return "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata:\n  name: shop\n  namespace: " + ns + "\n" + labels + "spec:\n" + values
	}
	// The chart's default image, nginx, is not from the internal registry, and the
	// composition has no team label: refused at apply, every violation shown.
	var refusal string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, composition("", "  replicaCount: 1\n"), "apply", "-f", "-")
		if !assert.Error(c, res.Err, "the composition is refused") {
			cp.Kubectl(ctx, "", "delete", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", ns, "--wait")
			return
		}
		refusal = res.Stderr
		assert.Contains(c, refusal, "E2EAllowedRepos/internal-registry-only")
		assert.Contains(c, refusal, "E2ETeamLabel/compositions-need-a-team")
	}, time.Minute, 500*time.Millisecond)
	assert.Contains(t, refusal, `Deployment/shop-fireworks-app (its pod template): container <web> has an invalid image repo <nginx:`)
	assert.Contains(t, refusal, `allowed repos are ["registry.internal/"] [constraint E2EAllowedRepos/internal-registry-only]`)
	assert.Regexp(t, `FireworksApp shop needs a team label \(written by [^)]+\) \[constraint E2ETeamLabel/compositions-need-a-team\]`, refusal)
	assert.NotContains(t, refusal, "(written by )", "the author is the user kubectl authenticated as")
	assert.False(t, strings.Contains(kubectl("", "get", "fireworksapps.v1-1-5.composition.krateo.io", "-n", ns, "-o", "name"), "shop"), "nothing was created")

	// Compliant values and the label: admitted, and installed.
	kubectl(composition("  labels: {team: payments}\n", "  replicaCount: 1\n  image: {repository: registry.internal/nginx}\n"), "apply", "-f", "-")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Helm(ctx, "list", "-n", ns, "-o", "json")
		if assert.NoError(c, res.Err, res.Stderr) {
			assert.Contains(c, res.Stdout, `"name":"shop"`)
			assert.Contains(c, res.Stdout, `"status":"deployed"`)
			assert.Contains(c, res.Stdout, `"chart":"fireworks-app-1.1.5"`)
		}
	}, 2*time.Minute, 250*time.Millisecond)
	image := kubectl("", "get", "deployment", "shop-fireworks-app", "-n", ns, "-o", "jsonpath={.spec.template.spec.containers[0].image}")
	assert.True(t, strings.HasPrefix(image, "registry.internal/nginx:"), image)

	// A change back to a refused image is refused as an update, and the release keeps
	// its values.
	res = cp.Kubectl(ctx, "", "patch", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", ns, "--type", "merge", "-p", `{"spec":{"image":{"repository":"docker.io/nginx"}}}`)
	require.Error(t, res.Err)
	assert.Contains(t, res.Stderr, "invalid image repo <docker.io/nginx:")

	// A template that leaves updates alone, as the pod-security library's do: an object
	// the release had and the tenant deleted is created again by Helm's upgrade, so the
	// install gate judges it as a creation, and refuses it.
	kubectl(replicaCapTemplate, "apply", "-f", "-")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "wait", "crd/e2ereplicacap.constraints.gatekeeper.sh", "--for", "condition=Established", "--timeout", "10s")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 250*time.Millisecond)
	applyEventually(replicaCapConstraint)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		// In force: a new composition with too many replicas is refused.
		res := cp.Kubectl(ctx, strings.Replace(composition("  labels: {team: payments}\n", "  replicaCount: 5\n  image: {repository: registry.internal/nginx}\n"), "name: shop", "name: probe", 1), "apply", "--dry-run=server", "-f", "-")
		if assert.Error(c, res.Err) {
			assert.Contains(c, res.Stderr, "E2EReplicaCap/at-most-three")
		}
	}, time.Minute, 500*time.Millisecond)
	kubectl("", "delete", "deployment", "shop-fireworks-app", "-n", ns)
	// Admission renders the old spec, which had the Deployment: an update, let through.
	kubectl("", "patch", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", ns, "--type", "merge", "-p", `{"spec":{"replicaCount":5}}`)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "get", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].reason} {.status.conditions[?(@.type=="Ready")].message}`)
		if assert.NoError(c, res.Err, res.Stderr) {
			assert.Contains(c, res.Stdout, "PolicyDenied")
			assert.Contains(c, res.Stdout, "Deployment/shop-fireworks-app: 5 replicas, at most 3 [constraint E2EReplicaCap/at-most-three]")
		}
	}, 2*time.Minute, 250*time.Millisecond)
	res = cp.Kubectl(ctx, "", "get", "deployment", "shop-fireworks-app", "-n", ns)
	assert.Error(t, res.Err, "the Deployment was not created again")
	kubectl("", "delete", "e2ereplicacap", "at-most-three")

	// Deleting the constraint lifts it.
	kubectl("", "delete", "e2eallowedrepos", "internal-registry-only")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "patch", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", ns, "--type", "merge", "-p", `{"spec":{"image":{"repository":"docker.io/nginx"}}}`)
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 500*time.Millisecond)
}

// TestGatekeeperConstraintsBesideGatekeeper: with Gatekeeper's ConstraintTemplate CRD
// in place (here made by the test, as Gatekeeper's installation does), Compositor
// writes nothing of Gatekeeper's: no constraint CRD, no template status. It reads the
// templates and the constraints Gatekeeper's CRDs serve and enforces them all the same.
func TestGatekeeperConstraintsBesideGatekeeper(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	gatekeepers, err := constraints.TemplateCRD()
	require.NoError(t, err)
	delete(gatekeepers.Labels, "app.kubernetes.io/managed-by")
	require.NoError(t, cp.Client.Create(ctx, gatekeepers))
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	repo := sampleRepository(t)
	const ns = "gatekeeper-beside"
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
		return res.Stdout
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, allowedReposTemplate, "apply", "-f", "-")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 250*time.Millisecond)

	// Once Compositor has compiled the template, it has made no constraint CRD: that is
	// Gatekeeper's to make.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "get", "events", "-A", "--field-selector", "reason=ConstraintTemplateEnforced", "-o", "name")
		assert.NoError(c, res.Err, res.Stderr)
		assert.NotEmpty(c, res.Stdout)
	}, time.Minute, 250*time.Millisecond)
	res := cp.Kubectl(ctx, "", "get", "crd", "e2eallowedrepos.constraints.gatekeeper.sh")
	require.Error(t, res.Err, "Compositor made the constraint CRD beside Gatekeeper")
	// Gatekeeper's part, played by the test.
	kubectl(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: e2eallowedrepos.constraints.gatekeeper.sh
spec:
  group: constraints.gatekeeper.sh
  scope: Cluster
  names: {kind: E2EAllowedRepos, plural: e2eallowedrepos, singular: e2eallowedrepos, listKind: E2EAllowedReposList}
  versions:
    - name: v1beta1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
            status: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, "apply", "-f", "-")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, strings.Replace(allowedReposConstraint, "gatekeeper-*", "gatekeeper-beside", 1), "apply", "-f", "-")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 250*time.Millisecond)

	kubectl("", "create", "namespace", ns)
	kubectl(definition(repo.URL, ns, "fireworksapp", "1.1.5"), "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "fireworksapp", "-n", ns, "--for", "condition=Ready=True", "--timeout", "120s")
	shop := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: shop, namespace: " + ns + "}\nspec: {replicaCount: 1}\n"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, shop, "apply", "--dry-run=server", "-f", "-")
		if assert.Error(c, res.Err) {
			assert.Contains(c, res.Stderr, "has an invalid image repo <nginx:")
			assert.Contains(c, res.Stderr, "[constraint E2EAllowedRepos/internal-registry-only]")
		}
	}, time.Minute, 500*time.Millisecond)

	// Gatekeeper's status and CRD are left as they are.
	assert.Empty(t, kubectl("", "get", "constrainttemplate", "e2eallowedrepos", "-o", "jsonpath={.status}"))
	assert.Empty(t, kubectl("", "get", "crd", "constrainttemplates.templates.gatekeeper.sh", "-o", `jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by}`))
}
