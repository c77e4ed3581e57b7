package conversion

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
	"github.com/compositor-dev/compositor/generators/crd"
)

// fireworksFixture is the CRD of every sample chart version, with what the tests need
// to make and check objects of it.
type fireworksFixture struct {
	crd        *apiextensionsv1.CustomResourceDefinition
	schemas    *Schemas
	validators map[string]validation.SchemaValidator
}

var (
	fireworksOnce sync.Once
	fireworksFx   *fireworksFixture
	fireworksErr  error
)

func fireworks(t testing.TB) *fireworksFixture {
	t.Helper()
	fireworksOnce.Do(func() {
		c, err := conversiontest.FireworksCRD(crd.ConversionWebhook{URL: "https://127.0.0.1:9443" + crd.ConvertPath})
		if err != nil {
			fireworksErr = err
			return
		}
		fireworksFx, fireworksErr = newFixture(c)
	})
	require.NoError(t, fireworksErr)
	return fireworksFx
}

func newFixture(c *apiextensionsv1.CustomResourceDefinition) (*fireworksFixture, error) {
	schemas, err := SchemasFromCRD(c)
	if err != nil {
		return nil, err
	}
	fx := &fireworksFixture{crd: c, schemas: schemas, validators: map[string]validation.SchemaValidator{}}
	for _, v := range c.Spec.Versions {
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			return nil, err
		}
		validator, _, err := validation.NewSchemaValidator(internal)
		if err != nil {
			return nil, err
		}
		fx.validators[v.Name] = validator
	}
	return fx, nil
}

// convert converts obj to version to as the conversion webhook does: it encodes obj,
// decodes it with Decode, converts it from the version of its apiVersion, and encodes
// and decodes the result again.
func convert(s *Schemas, to string, obj map[string]any) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	in, err := Decode(raw)
	if err != nil {
		return nil, err
	}
	apiVersion, _ := in["apiVersion"].(string)
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	if err := s.Convert(in, gv.Version, to); err != nil {
		return nil, err
	}
	if raw, err = json.Marshal(in); err != nil {
		return nil, err
	}
	return Decode(raw)
}

// convertOne is convert that must succeed.
func convertOne(t testing.TB, s *Schemas, to string, obj map[string]any) map[string]any {
	t.Helper()
	out, err := convert(s, to, obj)
	require.NoError(t, err)
	return out
}

// normalize gives v the types Decode would give it, so values compare exactly.
func normalize(t testing.TB, v map[string]any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	out, err := Decode(raw)
	require.NoError(t, err)
	return out
}

// stashOf is the StashAnnotation of obj, if it has one.
func stashOf(obj map[string]any) (string, bool) {
	return conversiontest.Annotation(obj, vocab.AnnotationConversionStash)
}
