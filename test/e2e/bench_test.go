package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// BenchmarkDefinitionReady measures the definition reconciler end to end on the real
// API server: from the create of a CompositionDefinition of a chart already seen, each
// in a namespace of its own, to its Ready condition, with its CRD version, RBAC and
// controller applied. Each is deleted, untimed, before the next.
//
//	CI=true go test -run '^$' -bench DefinitionReady ./test/e2e
func BenchmarkDefinitionReady(b *testing.B) {
	cp := controlplane.Start(b)
	startCompositor(b, cp)
	repo := sampleRepository(b)
	ctx := context.Background()

	ready := func(namespace string) *corev1alpha1.CompositionDefinition {
		def := &corev1alpha1.CompositionDefinition{}
		require.NoError(b, yaml.Unmarshal([]byte(definition(repo.URL, namespace, "fireworks", "1.1.5")), def))
		require.NoError(b, cp.Client.Create(ctx, def))
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got := &corev1alpha1.CompositionDefinition{}
			if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(def), got); err != nil {
				return false, err
			}
			return meta.IsStatusConditionTrue(got.Status.Conditions, corev1alpha1.ConditionReady), nil
		})
		require.NoError(b, err, "definition %s/%s not Ready", def.Namespace, def.Name)
		return def
	}
	namespace := func(name string) string {
		require.NoError(b, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
		return name
	}
	// The first definition downloads the chart and creates the CRD.
	ready(namespace("bench-first"))

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ns := namespace(fmt.Sprintf("bench-%d", i))
		b.StartTimer()
		def := ready(ns)
		// Gone before the next one, so that every iteration meets the same cluster.
		b.StopTimer()
		require.NoError(b, cp.Client.Delete(ctx, def))
		require.NoError(b, wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := cp.Client.Get(ctx, client.ObjectKeyFromObject(def), &corev1alpha1.CompositionDefinition{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}))
		b.StartTimer()
	}
}
