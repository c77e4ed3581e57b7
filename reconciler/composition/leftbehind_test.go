package composition

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A release moved to a chart version that no longer renders a kind is upgraded by that
// version's controller, whose rights are its chart's. Helm deletes what the old
// revision had only when it can read it, and skips the rest without a word: the gate
// names what is left behind, and with the right to read and delete the kind (the
// RBAC generator's RemovedTypes) nothing is.
func TestUpgradeNamesWhatItCannotDelete(t *testing.T) {
	for _, tc := range []struct {
		name         string
		mayRemove    bool
		wantLeft     []string
		serviceStays bool
	}{
		{"without rights on the dropped kind", false, []string{"Service left-behind/web (this version's controller may not read services)"}, true},
		{"with get and delete on it", true, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newAttackEnv(t, "left-behind")
			ctx := context.Background()
			cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {a: b}\n"
			svc := "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}\n"
			version := func(v string, templates ...string) *chart.Chart {
				ch := &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "web", Version: v}}
				for i, tpl := range templates {
					ch.Templates = append(ch.Templates, &chartcommon.File{Name: "templates/" + string(rune('a'+i)) + ".yaml", Data: []byte(tpl)})
				}
				return ch
			}
			_, rel, err := env.helm.UpgradeInstall(ctx, env.namespace, "web", version("2.0.0", cm, svc), nil, InstallOptions{Gate: env.gate(ctx, nil)})
			require.NoError(t, err)

			// The older version's controller: its chart's kinds, Helm's storage, and, when
			// generated with the newer chart's types removed, get and delete on those.
			rules := []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"}},
				{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete", "get", "list", "patch", "update"}},
			}
			if tc.mayRemove {
				rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"delete", "get"}})
			}
			require.NoError(t, env.cp.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "older", Namespace: env.namespace}, Rules: rules}))
			require.NoError(t, env.cp.Client.Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "older", Namespace: env.namespace},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "older"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "older-controller"}},
			}))
			as := rest.CopyConfig(env.cp.Config)
			as.Impersonate = rest.ImpersonationConfig{UserName: "older-controller"}

			gate := env.gate(ctx, nil)
			_, _, err = env.helm.As(as).UpgradeInstall(ctx, env.namespace, "web", version("1.1.5", cm), nil, InstallOptions{Last: rel, Gate: gate})
			require.NoError(t, err)
			assert.Equal(t, tc.wantLeft, gate.leftBehind)
			err = env.cp.Client.Get(ctx, client.ObjectKey{Namespace: env.namespace, Name: "web"}, &corev1.Service{})
			if tc.serviceStays {
				assert.NoError(t, err, "Helm skipped what it could not read")
			} else {
				assert.True(t, apierrors.IsNotFound(err), "the Service went with the upgrade: %v", err)
			}
		})
	}
}
