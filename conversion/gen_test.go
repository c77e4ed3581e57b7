package conversion

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
)

// objectGen makes random objects valid under a served version's schema by walking its
// structural schema. Fields a schema keeps unknown get extra keys no sample version
// declares, so the tests see unknown fields kept through every version.
type objectGen struct {
	valueGen
}

// valid returns a random object of version, checked with the API server's validation
// of that version.
func (g objectGen) valid(t testing.TB, fx *fireworksFixture, version string) map[string]any {
	t.Helper()
	root := fx.schemas.Structural(version)
	require.NotNil(t, root, version)
	for range 200 {
		spec := root.Properties["spec"]
		status := root.Properties["status"]
		obj := map[string]any{
			"apiVersion": vocab.CompositionGroup + "/" + version,
			"kind":       fx.schemas.GroupKind().Kind,
			"metadata":   g.metadata(version),
			"spec":       g.value(&spec, 0),
		}
		if g.r.IntN(2) == 0 {
			obj["status"] = g.value(&status, 0)
		}
		if errs := validation.ValidateCustomResource(nil, obj, fx.validators[version]); len(errs) == 0 {
			return obj
		}
	}
	t.Fatalf("the generator made no valid %s object in 200 tries", version)
	return nil
}

func (g objectGen) metadata(version string) map[string]any {
	m := map[string]any{
		"name":              fmt.Sprintf("app-%d", g.r.IntN(1000)),
		"namespace":         "team-" + strconv.Itoa(g.r.IntN(5)),
		"uid":               fmt.Sprintf("%08x-0000-4000-8000-%012x", g.r.Uint32(), g.r.Uint64()&0xffffffffffff),
		"resourceVersion":   strconv.Itoa(g.r.IntN(100000)),
		"generation":        int64(1 + g.r.IntN(20)),
		"creationTimestamp": time.Unix(1.7e9+g.r.Int64N(1e7), 0).UTC().Format(time.RFC3339),
		"labels":            map[string]any{"krateo.io/composition-version": version},
		"managedFields": []any{map[string]any{
			"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": vocab.CompositionGroup + "/" + version,
			"time": "2025-01-02T03:04:05Z", "fieldsType": "FieldsV1",
			"fieldsV1": map[string]any{"f:spec": map[string]any{"f:replicaCount": map[string]any{}}},
		}},
	}
	if g.r.IntN(2) == 0 {
		m["annotations"] = map[string]any{
			"krateo.io/release-name":                           "rel-" + strconv.Itoa(g.r.IntN(10)),
			"kubectl.kubernetes.io/last-applied-configuration": `{"spec":{"replicaCount":1}}`,
		}
	}
	if g.r.IntN(3) == 0 {
		m["finalizers"] = []any{"composition.krateo.io/finalizer"}
	}
	return m
}
