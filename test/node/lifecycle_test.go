//go:build node

package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compositor-dev/compositor/api/vocab"
)

// lifecycle upgrades Compositor with a changed value, then uninstalls it, and
// requires that the upgrade kept what Compositor wrote (the webhooks' CA bundle, the
// CA, the leader) and that the uninstall left nothing of Compositor's own: no webhook
// configurations (left behind, with failurePolicy Fail and no server, they would
// refuse every write of a composition, definition or policy), ClusterRoles,
// ClusterRoleBindings, admission policies, pods, Leases, Secrets or other objects of
// the release in its namespace. The chart owns the webhook configurations, the Lease
// and the built-in CA Secret, which Compositor fills in: Helm deletes them.
//
// What deliberately remains is the users' and what serves them:
//   - the CRDs: the chart's own (crds/, which Helm never deletes) and those generated
//     for definitions; deleting a CRD deletes every object of it, users' data;
//   - the CompositionDefinitions and compositions, and what Compositor generated for
//     each served version (controller Deployment, ServiceAccount, roles, in
//     Compositor's namespace and labelled with the version's identity), which the
//     definition's finalizer removes: the compositions' releases stay installed and
//     reconciled;
//   - the namespace (Helm does not delete one it created with --create-namespace);
//   - Secret compositor-release-seal, the key that seals Helm's release records: the
//     controller Deployments that stay need it, and a reinstall must find the same key,
//     or every release record would read as tampered; and Compositor's records of the
//     migrations it made (compositor-seal-migration, compositor-identity-moves);
//   - a definition's whole upgrade plan (compositor-plan.<definition UID>).
//
// The verified chart archives Compositor keeps in Secrets of its namespace
// (chart-<digest>), created at runtime, are owned by its ServiceAccount, which the chart
// owns: the garbage collector deletes them after the uninstall.
//
// A definition should be deleted before Compositor is uninstalled: its finalizer needs
// Compositor to remove what was generated for it.
func lifecycle(t *testing.T) {
	diagnoseOnFailure(t)
	const ca = "compositor-webhook-ca"
	bundles := func() string {
		return kubectl(t, "get", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "compositor",
			"-o", `jsonpath={range .items[*]}{.kind}:{range .webhooks[*]}{.name}={.timeoutSeconds}/{.rules[*].apiGroups}/{.clientConfig.caBundle}{" "}{end}{"\n"}{end}`)
	}
	caBefore := kubectl(t, "get", "secret", ca, "-n", releaseNS, "-o", "jsonpath={.data}")
	bundlesBefore := bundles()
	// Compositor fills in the rules and CA bundle (base64 of "-----BEGIN": LS0t) of
	// the configurations the chart created.
	// Three webhooks: compositions' defaults, every write's validation, and the guard
	// of compositions' status.
	if strings.Count(bundlesBefore, "=5/") != 3 || strings.Count(bundlesBefore, "krateo.io") != 4 || strings.Count(bundlesBefore, "]/LS0t") != 3 {
		t.Fatalf("want the three webhooks with timeout 5, their rules and a CA bundle before the upgrade:\n%s", bundlesBefore)
	}
	for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
		if owner := kubectl(t, "get", kind, "compositor", "-o", `jsonpath={.metadata.annotations.meta\.helm\.sh/release-name}`); owner != release {
			t.Fatalf("%s compositor is not the release's (meta.helm.sh/release-name %q)", kind, owner)
		}
	}

	// The upgrade: a changed value, which both the chart and Compositor write.
	started := time.Now()
	helm(t, "upgrade", release, "charts/compositor", "-n", releaseNS, "--reuse-values",
		"--set", "webhook.timeoutSeconds=10", "--wait", "--timeout", "3m")
	t.Logf("helm upgrade compositor: %s", time.Since(started).Round(100*time.Millisecond))
	eventually(t, "both webhooks at timeout 10, their rules and CA bundle kept", 2*time.Minute, func() error {
		got := bundles()
		want := strings.ReplaceAll(bundlesBefore, "=5/", "=10/")
		if got != want {
			return fmt.Errorf("got\n%s\nwant\n%s", got, want)
		}
		return nil
	})
	if caAfter := kubectl(t, "get", "secret", ca, "-n", releaseNS, "-o", "jsonpath={.data}"); caAfter != caBefore {
		t.Fatalf("the upgrade changed the CA Secret %s", ca)
	}
	kubectl(t, "rollout", "status", "deployment", release, "-n", releaseNS, "--timeout", "3m")
	eventually(t, "a replica of the upgrade holds the lease and admission answers", 2*time.Minute, func() error {
		out, err := command(t, time.Minute, "", "kubectl", "annotate", "--overwrite", "fireworksapp", "demo", "-n", definitionNS, "node.compositor.dev/after-upgrade=true")
		if err != nil {
			return fmt.Errorf("annotating a composition: %v: %s", err, out)
		}
		holder := kubectl(t, "get", "lease", leaseName, "-n", releaseNS, "-o", "jsonpath={.spec.holderIdentity}")
		pods := kubectl(t, "get", "pods", "-n", releaseNS, "-l", "app.kubernetes.io/instance="+release, "-o", "name")
		if holder == "" || !strings.Contains(pods, "pod/"+strings.SplitN(holder, "_", 2)[0]+"\n") {
			return fmt.Errorf("lease holder %q, pods:\n%s", holder, pods)
		}
		return nil
	})

	// The chart archives kept so far are owned by Compositor's ServiceAccount.
	archives := kubectl(t, "get", "secrets", "-n", releaseNS, "-l", "compositor.dev/chart-archive=true",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}{"\n"}{end}`)
	if strings.TrimSpace(archives) == "" {
		t.Fatalf("no chart archive kept in %s before the uninstall", releaseNS)
	}
	for _, line := range strings.Split(strings.TrimSpace(archives), "\n") {
		if !strings.HasSuffix(line, " ServiceAccount/"+release) {
			t.Errorf("chart archive not owned by ServiceAccount %s: %q", release, line)
		}
	}

	// The uninstall.
	started = time.Now()
	helm(t, "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "3m")
	t.Logf("helm uninstall compositor: %s", time.Since(started).Round(100*time.Millisecond))
	eventually(t, "nothing of Compositor's own is left", 2*time.Minute, func() error {
		var left []string
		get := func(args ...string) {
			out, err := command(t, time.Minute, "", "kubectl", append([]string{"get", "-o", "name", "--ignore-not-found"}, args...)...)
			if err != nil {
				left = append(left, fmt.Sprintf("kubectl get %s: %v: %s", strings.Join(args, " "), err, out))
				return
			}
			for _, line := range strings.Fields(out) {
				left = append(left, line)
			}
		}
		get("mutatingwebhookconfiguration,validatingwebhookconfiguration", "compositor")
		get("mutatingwebhookconfiguration,validatingwebhookconfiguration,clusterrole,clusterrolebinding,"+
			"validatingadmissionpolicy,validatingadmissionpolicybinding", "-l", "app.kubernetes.io/instance="+release)
		get("clusterrole,clusterrolebinding", "compositor")
		// What Compositor generated for a served version lives in its namespace too,
		// labelled with the version's identity, and stays (see above).
		generated := "!" + vocab.LabelDefinitionNamespace
		get("pods,deployments,replicasets,services,serviceaccounts,configmaps,leases,roles,rolebindings,poddisruptionbudgets", "-n", releaseNS, "-l", generated)
		get("secrets", "-n", releaseNS, "-l", generated)
		var real []string
		for _, l := range left {
			switch l {
			case "serviceaccount/default", "configmap/kube-root-ca.crt": // the namespace's own
			case "secret/compositor-release-seal": // kept on purpose: see above
			case "configmap/compositor-seal-migration", "configmap/compositor-identity-moves":
				// Compositor's records of the migrations it made: kept with the key, so a
				// reinstall does not take the same data for an older build's.
			default:
				if strings.HasPrefix(l, "configmap/compositor-plan.") {
					continue // a definition's whole plan: it stays with the definition
				}
				real = append(real, l)
			}
		}
		if len(real) > 0 {
			return fmt.Errorf("left:\n%s", strings.Join(real, "\n"))
		}
		return nil
	})

	// What deliberately remains: the CRDs, the definition and what it generated, the
	// compositions and their releases.
	kubectl(t, "get", "crd", "compositiondefinitions.core.krateo.io", "fireworksapps.composition.krateo.io")
	kubectl(t, "get", "compositiondefinition", "fireworksapp-1-1-5", "-n", definitionNS)
	kubectl(t, "get", "deployment", controllerName("v1-1-6"), "-n", releaseNS)
	if err := releaseAt("demo", "fireworks-app-1.1.6")(t); err != nil {
		t.Fatalf("the composition's release after the uninstall: %v", err)
	}
}
