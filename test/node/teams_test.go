//go:build node

package node

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/compositor-dev/compositor/generators/rbac"
	compositionctl "github.com/compositor-dev/compositor/reconciler/composition"
)

// teamNS is the namespace of the second team, Y, beside definitionNS (X).
const teamNS = "fireworksapp-team-y"

// twoTeams (issue #46, deployments mode, on the real node): a second team's definition
// Y, in teamNS, serves the same chart as the seed flow's definition X (fireworks-app
// 1.1.6, so one kind and version, two controllers), with a composition demo, named as
// X's. Then:
//   - each controller's ServiceAccount may get its own definition's key Secret and not
//     the other's nor the master key: asked of the API server's authorizer as the
//     ServiceAccount, and tried with a real token of X's, from a TokenRequest, which
//     gets X's key and is refused (403) Y's key and the master key;
//   - X's latest release record of demo, copied as it is by an admin into teamNS as
//     the revision after Y's latest, is refused: Y's composition, updated, reports
//     ReleaseTampered, and nothing is installed (no new revision, the records and Y's
//     Deployment as they were). Once the copy is deleted, the update installs.
//
// Y's composition, definition and namespace go at the end, so the tests after it find
// the seed flow's installation as it was.
func twoTeams(t *testing.T) {
	diagnoseOnFailure(t)
	cfg := restConfig(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	if out := kubectl(t, "get", "namespace", teamNS, "-o", "name", "--ignore-not-found"); out != "" {
		t.Fatalf("namespace %s is there already (an earlier run's): `make cluster-down` and let `make test-node` start a fresh cluster", teamNS)
	}
	kubectl(t, "create", "namespace", teamNS)
	t.Cleanup(func() { removeTeam(t) })

	// Definition Y: the chart X serves now, from the same repository.
	chartURL := kubectl(t, "get", "compositiondefinition", "fireworksapp-1-1-5", "-n", definitionNS, "-o", "jsonpath={.spec.chart.url}")
	started := time.Now()
	kubectlApply(t, fmt.Sprintf(`apiVersion: core.krateo.io/v1alpha1
kind: CompositionDefinition
metadata:
  name: fireworksapp
  namespace: %s
spec:
  chart:
    repo: fireworks-app
    url: %s
    version: 1.1.6
    insecureSkipVerifyTLS: true
`, teamNS, chartURL))
	kubectl(t, "wait", "compositiondefinition", "fireworksapp", "-n", teamNS, "--for", "condition=Ready=True", "--timeout", "3m")
	controllerX := controllerName("v1-1-6")
	controllerY := rbac.ServiceAccountName(teamNS, "fireworksapps", "v1-1-6")
	waitAvailable(t, controllerY)
	t.Logf("definition Y and its controller %s: %s", controllerY, time.Since(started).Round(100*time.Millisecond))

	// Y's composition, installed by Y's controller: revision 1, one replica.
	started = time.Now()
	kubectlApply(t, fmt.Sprintf(`apiVersion: composition.krateo.io/v1-1-6
kind: FireworksApp
metadata:
  name: demo
  namespace: %s
spec:
  replicaCount: 1
`, teamNS))
	kubectl(t, "wait", "fireworksapp", "demo", "-n", teamNS, "--for", "condition=Ready=True", "--timeout", "3m")
	eventually(t, "helm list shows demo in "+teamNS+" at fireworks-app-1.1.6, deployed", time.Minute, func() error {
		return releaseIn(teamNS, "demo", "fireworks-app-1.1.6")(t)
	})
	t.Logf("composition of Y installed: %s", time.Since(started).Round(100*time.Millisecond))

	// (a) Each controller gets its definition's key and no other, nor the master key.
	keyX, keyY := keySecret(t, definitionNS, "fireworksapp-1-1-5"), keySecret(t, teamNS, "fireworksapp")
	for _, c := range []struct{ sa, own, other string }{{controllerX, keyX, keyY}, {controllerY, keyY, keyX}} {
		if got := canI(t, c.sa, "get", "secret/"+c.own); got != "yes" {
			t.Fatalf("%s may not get its definition's key %s: %q", c.sa, c.own, got)
		}
		for _, name := range []string{c.other, rbac.ReleaseSealSecret} {
			if got := canI(t, c.sa, "get", "secret/"+name); got != "no" {
				t.Fatalf("%s may get Secret %s in %s: %q, want no", c.sa, name, releaseNS, got)
			}
		}
	}
	t.Logf("the authorizer: %s gets key %s only, %s key %s only; neither the other's nor %s", controllerX, keyX, controllerY, keyY, rbac.ReleaseSealSecret)

	// A real token of X's controller, which the cluster admin asks for.
	expiry := int64(600)
	tr, err := kube.CoreV1().ServiceAccounts(releaseNS).CreateToken(ctx, controllerX,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", controllerX, err)
	}
	tokenCfg := rest.AnonymousClientConfig(cfg) // the server's CA, no client certificate
	tokenCfg.BearerToken = tr.Status.Token
	asX := kubernetes.NewForConfigOrDie(tokenCfg)
	review, err := asX.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with the token: %v", err)
	}
	if want := "system:serviceaccount:" + releaseNS + ":" + controllerX; review.Status.UserInfo.Username != want {
		t.Fatalf("the token is %q, want %s", review.Status.UserInfo.Username, want)
	}
	if _, err := asX.CoreV1().Secrets(releaseNS).Get(ctx, keyX, metav1.GetOptions{}); err != nil {
		t.Fatalf("the token of %s does not get its definition's key %s: %v", controllerX, keyX, err)
	}
	for _, name := range []string{keyY, rbac.ReleaseSealSecret} {
		_, err := asX.CoreV1().Secrets(releaseNS).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("the token of %s gets Secret %s/%s: %v, want 403 Forbidden", controllerX, releaseNS, name, err)
		}
		t.Logf("the token of %s, get secret %s: %v", controllerX, name, err)
	}

	// (b) X's record, copied into Y's namespace as the revision after Y's latest.
	fromX := releaseRecords(t, kube, definitionNS, "demo")
	own := releaseRecords(t, kube, teamNS, "demo")
	if len(own) != 1 {
		t.Fatalf("want Y's one record of demo, found %d", len(own))
	}
	latest := fromX[len(fromX)-1]
	next := recordVersion(own[0]) + 1
	copied := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: teamNS, Name: fmt.Sprintf("sh.helm.release.v1.demo.v%d", next),
			Labels: latest.Labels, Annotations: latest.Annotations,
		},
		Type: latest.Type, Data: latest.Data,
	}
	copied.Labels["version"] = strconv.Itoa(next)
	copied, err = kube.CoreV1().Secrets(teamNS).Create(ctx, copied, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("copying %s/%s into %s: %v", definitionNS, latest.Name, teamNS, err)
	}
	copyLeft = copied.Name
	t.Logf("copied %s/%s (X's demo, revision %d) to %s/%s", definitionNS, latest.Name, recordVersion(latest), teamNS, copied.Name)
	deployment := func() (replicas int32, generation int64) {
		d, err := kube.AppsV1().Deployments(teamNS).Get(ctx, "demo-fireworks-app", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Y's Deployment: %v", err)
		}
		return *d.Spec.Replicas, d.Generation
	}
	replicas, generation := deployment()
	if replicas != 1 {
		t.Fatalf("Y's Deployment has %d replicas before the update, want 1", replicas)
	}

	started = time.Now()
	kubectl(t, "patch", "fireworksapp", "demo", "-n", teamNS, "--type", "merge", "-p", `{"spec":{"replicaCount":3}}`)
	eventually(t, "Y's composition refuses the copied record", 2*time.Minute, func() error {
		out := kubectl(t, "get", "fireworksapp", "demo", "-n", teamNS, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}`)
		// The last line: kubectl's warnings (a deprecated version) come before it.
		lines := strings.Split(strings.TrimSpace(out), "\n")
		got := lines[len(lines)-1]
		if !strings.HasPrefix(got, "False "+compositionctl.ReasonReleaseTampered+": ") ||
			!strings.Contains(got, copied.Name) || !strings.Contains(got, "nothing was installed or deleted") {
			return fmt.Errorf("Ready: %q", got)
		}
		t.Logf("Ready: %s", got)
		return nil
	})
	// Nothing was installed from it: the records as they were, Y's Deployment too.
	after := releaseRecords(t, kube, teamNS, "demo")
	if len(after) != 2 || after[0].ResourceVersion != own[0].ResourceVersion || after[1].Name != copied.Name || after[1].ResourceVersion != copied.ResourceVersion {
		t.Fatalf("the records of demo in %s changed: %v", teamNS, recordNames(after))
	}
	if r, g := deployment(); r != replicas || g != generation {
		t.Fatalf("Y's Deployment changed (replicas %d, generation %d; before %d, %d)", r, g, replicas, generation)
	}
	t.Logf("ReleaseTampered, nothing installed: %s", time.Since(started).Round(100*time.Millisecond))

	// Without the copy, the same update installs: the refusal was the copy's.
	started = time.Now()
	if err := kube.CoreV1().Secrets(teamNS).Delete(ctx, copied.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	copyLeft = ""
	kubectl(t, "patch", "fireworksapp", "demo", "-n", teamNS, "--type", "merge", "-p", `{"spec":{"replicaCount":2}}`)
	eventually(t, "Y's composition installs the update once the copy is gone", 2*time.Minute, func() error {
		if r, _ := deployment(); r != 2 {
			return fmt.Errorf("Y's Deployment has %d replicas", r)
		}
		return releaseIn(teamNS, "demo", "fireworks-app-1.1.6")(t)
	})
	t.Logf("the update installed once the copy was deleted: %s", time.Since(started).Round(100*time.Millisecond))
}

// canI asks the API server's authorizer whether Compositor's ServiceAccount sa may
// verb what in Compositor's namespace: "yes" or "no".
func canI(t *testing.T, sa, verb, what string) string {
	t.Helper()
	out, _ := command(t, time.Minute, "", "kubectl", "auth", "can-i", verb, what, "-n", releaseNS, "--as=system:serviceaccount:"+releaseNS+":"+sa)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// keySecret waits for the key Secret of the definition namespace/name, by its UID.
func keySecret(t *testing.T, namespace, name string) string {
	t.Helper()
	uid := kubectl(t, "get", "compositiondefinition", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}")
	key := compositionctl.KeySecretName(types.UID(uid))
	eventually(t, "the key Secret "+key+" of "+namespace+"/"+name, time.Minute, func() error {
		of := kubectl(t, "get", "secret", key, "-n", releaseNS, "--ignore-not-found", "-o", "jsonpath={.metadata.labels.compositor\\.dev/seal-key-of}")
		if of != uid {
			return fmt.Errorf("labelled %q", of)
		}
		return nil
	})
	return key
}

// releaseRecords lists the Helm release records of release name in namespace, by
// revision.
func releaseRecords(t *testing.T, kube kubernetes.Interface, namespace, name string) []corev1.Secret {
	t.Helper()
	list, err := kube.CoreV1().Secrets(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "owner=helm,name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		t.Fatalf("no release record of %s in %s", name, namespace)
	}
	sort.Slice(list.Items, func(i, j int) bool { return recordVersion(list.Items[i]) < recordVersion(list.Items[j]) })
	return list.Items
}

func recordVersion(s corev1.Secret) int {
	v, _ := strconv.Atoi(s.Labels["version"])
	return v
}

func recordNames(records []corev1.Secret) []string {
	var names []string
	for _, s := range records {
		names = append(names, s.Name+"@"+s.ResourceVersion)
	}
	return names
}

// copyLeft names the copied record while it is in teamNS: removeTeam deletes it
// first, or Y's controller would refuse to uninstall demo.
var copyLeft string

// removeTeam deletes Y's composition (its controller uninstalls it), then its
// definition (whose finalizer removes what was generated for it), then its namespace.
func removeTeam(t *testing.T) {
	started := time.Now()
	steps := [][]string{
		{"delete", "fireworksapp", "demo", "-n", teamNS, "--ignore-not-found", "--wait", "--timeout", "2m"},
		{"delete", "compositiondefinition", "fireworksapp", "-n", teamNS, "--ignore-not-found", "--wait", "--timeout", "2m"},
	}
	if copyLeft != "" {
		steps = append([][]string{{"delete", "secret", copyLeft, "-n", teamNS, "--ignore-not-found"}}, steps...)
		copyLeft = ""
	}
	for _, args := range steps {
		if out, err := command(t, 3*time.Minute, "", "kubectl", args...); err != nil {
			t.Errorf("cleanup: kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	deleteNamespace(t, teamNS)
	t.Logf("Y's composition, definition and namespace removed: %s", time.Since(started).Round(100*time.Millisecond))
}
