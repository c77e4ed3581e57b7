package e2e

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

const auditReplicas = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: audit-replicas
spec:
  enforcementAction: dryrun
  match:
    kinds: [{group: composition.krateo.io, kind: "*"}]
  rego: |
    package compositor.auditreplicas

    deny contains {"msg": "fewer than 2 replicas", "path": "spec.replicaCount"} if {
      object.get(input.review.object.spec, "replicaCount", 1) < 2
    }
`

const auditTeamLabel = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: audit-team-label
spec:
  enforcementAction: dryrun
  match:
    kinds: [{group: core.krateo.io, kind: CompositionDefinition}]
  rego: |
    package compositor.auditteamlabel

    deny contains "the label team names who owns the definition" if {
      not input.review.object.metadata.labels.team
    }
`

const atMostTwoReplicas = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: at-most-two-replicas
spec:
  target: rendered
  match:
    kinds: [{group: composition.krateo.io, kind: FireworksApp}]
  rego: |
    package compositor.atmosttworeplicas

    deny contains {"msg": sprintf("%d replicas are more than 2", [obj.spec.replicas]), "path": "spec.replicas"} if {
      some obj in input.rendered
      obj.kind == "Deployment"
      obj.spec.replicas > 2
    }
`

func fireworksApp(name string, replicas int) string {
	return "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: " + name + ", namespace: fireworksapp-system}\nspec: {replicaCount: " + strconv.Itoa(replicas) + "}\n"
}

func applyPolicies(t *testing.T, cp *controlplane.ControlPlane, manifests ...string) {
	t.Helper()
	ctx := context.Background()
	for _, m := range manifests {
		res := cp.Kubectl(ctx, m, "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
	}
}

// requireAudit waits until the audit status of the policy equals want, apart from
// lastRunTime, which it requires to be set.
func requireAudit(t *testing.T, cp *controlplane.ControlPlane, policy string, want policyv1alpha1.AuditStatus) {
	t.Helper()
	start := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		obj := &policyv1alpha1.CompositionPolicy{}
		require.NoError(c, cp.Client.Get(context.Background(), client.ObjectKey{Name: policy}, obj))
		got := obj.Status.Audit
		assert.NotNil(c, got.LastRunTime)
		got.LastRunTime = nil
		assert.Equal(c, want, got)
	}, 2*time.Minute, 200*time.Millisecond, "audit status of %s", policy)
	t.Logf("audit status of %s as expected after %s", policy, time.Since(start).Round(10*time.Millisecond))
}

func fireworksViolation(name, message string) policyv1alpha1.AuditViolation {
	return policyv1alpha1.AuditViolation{APIVersion: "composition.krateo.io/v1-1-5", Kind: "FireworksApp", Namespace: "fireworksapp-system", Name: name, Message: message}
}

func TestAuditReportsExistingViolationsInPolicyStatus(t *testing.T) {
	cp := controlplane.Start(t)
	var metricsAddr string
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.AuditInterval = time.Second
		o.MetricsAddr = freePort(t)
		metricsAddr = o.MetricsAddr
	})
	readyDefinition(t, cp)
	ctx := context.Background()

	for name, replicas := range map[string]int{"single": 1, "triple": 3} {
		res := cp.Kubectl(ctx, fireworksApp(name, replicas), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
	}
	applyPolicies(t, cp, auditReplicas, auditTeamLabel)

	t.Run("dryrun policies show existing violators in their audit status", func(t *testing.T) {
		requireAudit(t, cp, "audit-replicas", policyv1alpha1.AuditStatus{ViolationCount: 1, Examples: []policyv1alpha1.AuditViolation{
			fireworksViolation("single", "spec.replicaCount: fewer than 2 replicas"),
		}})
		requireAudit(t, cp, "audit-team-label", policyv1alpha1.AuditStatus{ViolationCount: 1, Examples: []policyv1alpha1.AuditViolation{{
			APIVersion: "core.krateo.io/v1alpha1", Kind: "CompositionDefinition", Namespace: "fireworksapp-system", Name: "fireworksapp-1-1-5",
			Message: "the label team names who owns the definition",
		}}})
	})

	t.Run("a dryrun violation is never shown to the user, only audited", func(t *testing.T) {
		// The policy is in force: the audit above evaluated it with the webhook's engine.
		counted := dryRunViolations(t, metricsAddr, "policy audit-replicas")
		res := cp.Kubectl(ctx, fireworksApp("another", 1), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		assert.Empty(t, res.Stderr, "no warning for a dryrun policy")
		assert.Equal(t, "fireworksapp.composition.krateo.io/another created\n", res.Stdout)
		assert.Equal(t, counted+1, dryRunViolations(t, metricsAddr, "policy audit-replicas"),
			"the metrics count the dryrun violation once")

		requireAudit(t, cp, "audit-replicas", policyv1alpha1.AuditStatus{ViolationCount: 2, Examples: []policyv1alpha1.AuditViolation{
			fireworksViolation("another", "spec.replicaCount: fewer than 2 replicas"),
			fireworksViolation("single", "spec.replicaCount: fewer than 2 replicas"),
		}})
	})

	t.Run("a deny policy added later audits what it would now refuse", func(t *testing.T) {
		applyPolicies(t, cp, atMostTwoReplicas)
		requireAudit(t, cp, "at-most-two-replicas", policyv1alpha1.AuditStatus{ViolationCount: 1, Examples: []policyv1alpha1.AuditViolation{
			fireworksViolation("triple", "Deployment/triple-fireworks-app spec.replicas: 3 replicas are more than 2"),
		}})

		res := cp.Kubectl(ctx, fireworksApp("quadruple", 4), "apply", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, "Deployment/quadruple-fireworks-app spec.replicas: 4 replicas are more than 2 [policy at-most-two-replicas]")
	})

	t.Run("fixed objects leave the audit", func(t *testing.T) {
		unchanged := &policyv1alpha1.CompositionPolicy{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "audit-team-label"}, unchanged))

		res := cp.Kubectl(ctx, "", "patch", "fireworksapp", "single", "-n", "fireworksapp-system", "--type", "merge", "-p", `{"spec":{"replicaCount":2}}`)
		require.NoError(t, res.Err, res.Stderr)
		requireAudit(t, cp, "audit-replicas", policyv1alpha1.AuditStatus{ViolationCount: 1, Examples: []policyv1alpha1.AuditViolation{
			fireworksViolation("another", "spec.replicaCount: fewer than 2 replicas"),
		}})
		res = cp.Kubectl(ctx, "", "delete", "fireworksapp", "another", "-n", "fireworksapp-system")
		require.NoError(t, res.Err, res.Stderr)
		requireAudit(t, cp, "audit-replicas", policyv1alpha1.AuditStatus{})

		// The passes that saw these changes found nothing new for audit-team-label, and
		// its status was not written again.
		after := &policyv1alpha1.CompositionPolicy{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "audit-team-label"}, after))
		assert.Equal(t, unchanged.ResourceVersion, after.ResourceVersion)
	})
}

// dryRunViolations reads from Compositor's /metrics how many dryrun violations of source
// admission has found.
func dryRunViolations(t *testing.T, addr, source string) float64 {
	t.Helper()
	return counter(t, addr, "compositor_admission_violations_total", map[string]string{"source": source, "action": "dryrun"})
}

// counter reads from Compositor's /metrics at addr the value of the counter family
// whose labels include want; 0 when it has not been counted yet.
func counter(t *testing.T, addr, family string, want map[string]string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	f, ok := families[family]
	if !ok {
		return 0
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if matches(labels, want) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// matches tells whether labels hold every label of want.
func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}
