package conversion

import (
	"flag"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
)

var (
	conversionIterations = flag.Int("conversion.iterations", 20, "random objects per version pair in TestConversionRoundTrip")
	conversionSeed       = flag.Uint64("conversion.seed", 1, "seed of TestConversionRoundTrip")
)

// roundTrip counts what the round trips went through, so a test can tell it was not
// vacuous.
type roundTrip struct {
	conversions int
	stashed     int // conversions that carried values in the stash or origin annotation
}

// check converts obj, an object of path[0], through every version of path and back to
// path[0], and asserts that it comes back as it was, and that every step obeys the API
// server's rules and shows each version only the fields it has.
func (rt *roundTrip) check(t *testing.T, fx *fireworksFixture, obj map[string]any, path ...string) {
	t.Helper()
	want := normalize(t, obj)
	cur := want
	for _, to := range slices.Concat(path[1:], path[:1]) {
		got := convertOne(t, fx.schemas, to, cur)
		assertObeysServerRules(t, cur, got, to)
		assertShowsOnlyItsFields(t, fx, got, to)
		assertWritesOnlyValidValues(t, fx, cur, got, to)
		rt.conversions++
		_, stashed := stashOf(got)
		_, kept := originOf(got)
		if stashed || kept {
			rt.stashed++
		}
		cur = got
	}
	if !assert.Equal(t, want, cur, "round trip through %s", strings.Join(path, " → ")) {
		t.FailNow()
	}
}

// assertObeysServerRules checks what the API server checks of a converted object:
// apiVersion and kind, and metadata unchanged but for labels and annotations.
func assertObeysServerRules(t *testing.T, in, out map[string]any, version string) {
	t.Helper()
	assert.Equal(t, vocab.CompositionGroup+"/"+version, out["apiVersion"])
	assert.Equal(t, in["kind"], out["kind"])
	inMeta, outMeta := copyMap(in["metadata"]), copyMap(out["metadata"])
	assert.Equal(t, inMeta["labels"], outMeta["labels"], "labels")
	for _, m := range []map[string]any{inMeta, outMeta} {
		delete(m, "labels")
		delete(m, "annotations")
	}
	assert.Equal(t, inMeta, outMeta, "metadata other than labels and annotations")
	for k := range out {
		if k != "spec" && k != "status" && k != "apiVersion" && k != "metadata" {
			assert.Equal(t, in[k], out[k], k)
		}
	}
}

// assertShowsOnlyItsFields checks that the API server prunes nothing more from obj, and
// that the fields the sample versions differ in show only where they exist.
func assertShowsOnlyItsFields(t *testing.T, fx *fireworksFixture, obj map[string]any, version string) {
	t.Helper()
	if s := fx.schemas.Structural(version); s != nil {
		view := map[string]any{"spec": obj["spec"], "status": obj["status"]}
		opts := structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}
		assert.Empty(t, pruning.PruneWithOptions(deepCopyJSON(view), s, true, opts), "the API server would prune these from %s", version)
	}
	spec, _ := obj["spec"].(map[string]any)
	switch version {
	case "v1-1-5", "v1-1-6":
		assert.NotContains(t, spec, "exposure", "%s has no exposure", version)
	case "v2-0-0":
		service, _ := spec["service"].(map[string]any)
		assert.NotContains(t, service, "type", "v2-0-0 has no service.type")
	}
}

func copyMap(v any) map[string]any {
	m, _ := deepCopyJSON(v).(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m
}

// TestConversionRoundTrip converts random objects of every served version to every
// other served version and back (A→B→A, hence B→A→B too), and through all three
// versions, and asserts nothing changed. -conversion.iterations runs more.
func TestConversionRoundTrip(t *testing.T) {
	fx := fireworks(t)
	r := rand.New(rand.NewPCG(*conversionSeed, 0))
	gen := objectGen{valueGen{r: r}}
	served := fx.schemas.Served()
	require.Equal(t, []string{"v1-1-5", "v1-1-6", "v2-0-0"}, served)

	rt := &roundTrip{}
	for range *conversionIterations {
		for _, a := range served {
			for _, b := range served {
				if a != b {
					rt.check(t, fx, gen.valid(t, fx, a), a, b)
				}
			}
			rt.check(t, fx, gen.valid(t, fx, a), a, fx.schemas.Hub())
			others := without(served, a)
			rt.check(t, fx, gen.valid(t, fx, a), a, others[0], others[1])
		}
	}
	t.Logf("%d conversions, %d of them stashed values", rt.conversions, rt.stashed)
	assert.Positive(t, rt.stashed, "no conversion stashed anything: the round trips proved nothing")
}

func without(list []string, v string) []string {
	var out []string
	for _, e := range list {
		if e != v {
			out = append(out, e)
		}
	}
	return out
}

// FuzzConversionRoundTrip is TestConversionRoundTrip with the fuzzer choosing the seed,
// the versions, the path and the version the object is pinned to (whose shape its
// stored values have, so the chart's declared conversions run between it and each
// version of the path).
func FuzzConversionRoundTrip(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed, uint8(seed))
	}
	fx := fireworks(f)
	f.Fuzz(func(t *testing.T, seed uint64, route uint8) {
		served := fx.schemas.Served()
		versions := append(served, fx.schemas.Hub())
		path := []string{served[int(route)%len(served)]}
		for n := int(route>>2)%3 + 1; n > 0; n-- {
			route = route*31 + 7
			path = append(path, versions[int(route)%len(versions)])
		}
		gen := objectGen{valueGen{r: rand.New(rand.NewPCG(seed, uint64(route)))}}
		obj := gen.valid(t, fx, path[0])
		// Pinned to any served version: the declared conversions run both ways.
		obj["metadata"].(map[string]any)["labels"] = map[string]any{vocab.LabelCompositionVersion: served[int(seed%uint64(len(served)))]}
		(&roundTrip{}).check(t, fx, obj, path...)
	})
}

// assertWritesOnlyValidValues checks that conversion gives a version only values its
// schema accepts, but for values the object had already: a value another version
// allows and this one does not (a replica count above its maximum) is shown as it is,
// and writes that leave it unchanged are admitted (the API server ratchets them).
func assertWritesOnlyValidValues(t *testing.T, fx *fireworksFixture, in, out map[string]any, version string) {
	t.Helper()
	v, ok := fx.validators[version]
	if !ok || version == fx.schemas.Hub() {
		return
	}
	for _, e := range validation.ValidateCustomResource(nil, map[string]any{"spec": out["spec"]}, v) {
		tokens := strings.Split(e.Field, ".")
		was, had := getAt(in, tokens)
		is, has := getAt(out, tokens)
		assert.True(t, had && has && equalJSON(was, is), "conversion to %s wrote %s, which %s refuses: %s", version, e.Field, version, e.Error())
	}
}
