package crd

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// ruleCase is one rule of docs/architecture.md#schema-translation: a schema (and
// values.yaml), what the spec schema must look like, what the report must say, and
// values the CRD must admit unchanged or refuse.
type ruleCase struct {
	name   string
	schema string
	values string
	check  func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report)
	admit  []string // spec values (JSON) the API server must store unchanged
	refuse []string // spec values the API server must refuse
}

func runRuleCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, report, err := Translate([]byte(tc.schema), []byte(tc.values))
			require.NoError(t, err)
			crd, _, err := Build(BuildOptions{ChartName: "rules", Versions: []ServedVersion{{ChartVersion: "1.0.0", Spec: spec}}, Conversion: testWebhook})
			require.NoError(t, err, "spec: %s", mustJSON(spec))
			if tc.check != nil {
				tc.check(t, spec, report)
			}
			a := newAdmitter(t, crd, "v1-0-0")
			for _, v := range tc.admit {
				assert.NoError(t, a.admit(decodeString(t, v)), "admit %s", v)
			}
			for _, v := range tc.refuse {
				assert.Error(t, a.admit(decodeString(t, v)), "refuse %s", v)
			}
		})
	}
}

func decodeString(t *testing.T, s string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(s), &v), s)
	return v
}

func prop(t *testing.T, p *apiextensionsv1.JSONSchemaProps, path ...string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	cur := *p
	for _, k := range path {
		next, ok := cur.Properties[k]
		require.True(t, ok, "no property %q in %s", k, mustJSON(cur))
		cur = next
	}
	return cur
}

func hasLoss(r Report, path, keyword string) bool {
	for _, l := range r {
		if l.Path == path && l.Keyword == keyword {
			return true
		}
	}
	return false
}

func assertLoss(t *testing.T, r Report, path, keyword string) {
	t.Helper()
	assert.True(t, hasLoss(r, path, keyword), "report lacks %s %s:\n%s", path, keyword, r)
}

func enumOf(t *testing.T, p apiextensionsv1.JSONSchemaProps) []string {
	t.Helper()
	values := p.Enum
	if values == nil {
		for _, a := range p.AllOf {
			values = append(values, a.Enum...)
		}
	}
	var out []string
	for _, v := range values {
		out = append(out, string(v.Raw))
	}
	return out
}

func TestRuleNumbers(t *testing.T) {
	runRuleCases(t, []ruleCase{{
		name:   "large integer limits are not truncated",
		schema: `{"type":"object","properties":{"n":{"type":"integer","minimum":-9007199254740993,"maximum":9007199254740993}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			n := prop(t, spec, "n")
			assert.Equal(t, 9007199254740992.0, *n.Maximum) // nearest float64, as the API server rounds values
			assert.Empty(t, r)
		},
		admit:  []string{`{"n":9007199254740993}`, `{"n":-9007199254740993}`},
		refuse: []string{`{"n":9007199254741100}`},
	}, {
		name:   "inexact exclusive limit becomes inclusive, reported",
		schema: `{"type":"object","properties":{"f":{"type":"number","exclusiveMinimum":0.1}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			f := prop(t, spec, "f")
			assert.False(t, f.ExclusiveMinimum)
			assertLoss(t, r, "f", "exclusiveMinimum")
		},
		admit:  []string{`{"f":0.10000000000000001}`, `{"f":0.2}`},
		refuse: []string{`{"f":0.05}`},
	}, {
		name:   "fractional multipleOf is left to the webhook",
		schema: `{"type":"object","properties":{"f":{"type":"number","multipleOf":0.1},"i":{"type":"integer","multipleOf":5}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Nil(t, prop(t, spec, "f").MultipleOf)
			assert.Equal(t, 5.0, *prop(t, spec, "i").MultipleOf)
			assertLoss(t, r, "f", "multipleOf")
			assert.False(t, hasLoss(r, "i", "multipleOf"))
		},
		admit:  []string{`{"f":0.3,"i":10}`},
		refuse: []string{`{"i":7}`},
	}, {
		name:   "enum numbers keep their exact digits",
		schema: `{"type":"object","properties":{"n":{"enum":[12345678901234567890, 1.50]}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Equal(t, []string{"12345678901234567890", "1.50"}, enumOf(t, prop(t, spec, "n")))
			assert.Equal(t, "number", prop(t, spec, "n").Type)
		},
		admit:  []string{`{"n":1.5}`},
		refuse: []string{`{"n":2}`},
	}})
}

func TestRuleDrafts(t *testing.T) {
	runRuleCases(t, []ruleCase{{
		name:   "no $schema means 2020-12: prefixItems is a tuple",
		schema: `{"type":"object","properties":{"t":{"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"}}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assertLoss(t, r, "t", "prefixItems")
			assert.True(t, *prop(t, spec, "t").Items.Schema.XPreserveUnknownFields)
		},
		admit: []string{`{"t":["a",1,2]}`},
	}, {
		name:   "draft-07 items as a list is a tuple",
		schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"t":{"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"integer"}}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assertLoss(t, r, "t", "items")
			assertLoss(t, r, "t", "additionalItems")
		},
		admit: []string{`{"t":["a",1]}`},
	}, {
		name:   "draft-04 boolean exclusiveMinimum",
		schema: `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"integer","minimum":3,"exclusiveMinimum":true}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			n := prop(t, spec, "n")
			assert.Equal(t, 3.0, *n.Minimum)
			assert.True(t, n.ExclusiveMinimum)
		},
		admit:  []string{`{"n":4}`},
		refuse: []string{`{"n":3}`},
	}, {
		name:   "draft-07 ignores siblings of $ref",
		schema: `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"s":{"type":"string"}},"type":"object","properties":{"a":{"$ref":"#/definitions/s","maxLength":1}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			a := prop(t, spec, "a")
			assert.Equal(t, "string", a.Type)
			assert.Nil(t, a.MaxLength)
		},
		admit: []string{`{"a":"long"}`},
	}, {
		name:   "2020-12 applies siblings of $ref",
		schema: `{"$defs":{"s":{"type":"string"}},"type":"object","properties":{"a":{"$ref":"#/$defs/s","maxLength":1}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Equal(t, int64(1), *prop(t, spec, "a").MaxLength)
		},
		refuse: []string{`{"a":"long"}`},
	}})

	_, _, err := Translate([]byte(`{"$schema":"https://example.com/my-dialect"}`), nil)
	assert.ErrorIs(t, err, ErrUnsupportedDraft)
	_, _, err = Translate([]byte(`{"type":"object","properties":{"a":{"type":"strin"}}}`), nil)
	assert.ErrorIs(t, err, ErrInvalidSchema)
	_, _, err = Translate([]byte(`{"type":`), nil)
	assert.ErrorIs(t, err, ErrInvalidSchema)
	_, _, err = Translate([]byte(`{"type":"array"}`), nil)
	assert.ErrorIs(t, err, ErrRootNotObject)
	_, _, err = Translate([]byte(`{"type":"object"}`), []byte("- a list\n"))
	assert.ErrorIs(t, err, ErrInvalidValues)
}

func TestRuleRefs(t *testing.T) {
	runRuleCases(t, []ruleCase{{
		name:   "local $ref into $defs and definitions is inlined",
		schema: `{"type":"object","$defs":{"port":{"type":"integer","minimum":1}},"definitions":{"name":{"type":"string","pattern":"^[a-z]+$"}},"properties":{"port":{"$ref":"#/$defs/port"},"name":{"$ref":"#/definitions/name"}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Equal(t, "integer", prop(t, spec, "port").Type)
			assert.Equal(t, "^[a-z]+$", prop(t, spec, "name").Pattern)
			assert.Empty(t, r)
		},
		refuse: []string{`{"port":0}`, `{"name":"A"}`},
	}, {
		name:   "anchors and $id-relative references",
		schema: `{"$id":"https://charts.example/values.json","type":"object","$defs":{"a":{"$anchor":"size","type":"string"},"b":{"$id":"b.json","type":"integer"}},"properties":{"x":{"$ref":"#size"},"y":{"$ref":"b.json"}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Equal(t, "string", prop(t, spec, "x").Type)
			assert.Equal(t, "integer", prop(t, spec, "y").Type)
		},
	}, {
		name:   "recursion stops with a fragment that keeps unknown fields",
		schema: `{"type":"object","$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},"properties":{"tree":{"$ref":"#/$defs/node"}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			item := prop(t, spec, "tree", "children").Items.Schema
			assert.True(t, *item.XPreserveUnknownFields)
			assert.Empty(t, item.Type)
			assertLoss(t, r, "tree.children[]", "$ref")
		},
		admit:  []string{`{"tree":{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}}`},
		refuse: []string{`{"tree":{"name":1}}`},
	}})
}

// A remote $ref is never fetched, whatever its scheme.
func TestRuleRemoteRefNeverFetched(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"type":"string"}`))
	}))
	defer srv.Close()
	schema := `{"type":"object","properties":{
		"http":{"$ref":"` + srv.URL + `/defs.json#/x"},
		"plain":{"$ref":"` + srv.URL + `/s.json"},
		"file":{"$ref":"file:///etc/passwd"},
		"relative":{"$ref":"other.json"}}}`
	spec, report, err := Translate([]byte(schema), nil)
	require.NoError(t, err)
	assert.Zero(t, hits.Load(), "a remote reference was fetched")
	for _, k := range []string{"http", "plain", "file", "relative"} {
		p := prop(t, spec, k)
		assert.True(t, *p.XPreserveUnknownFields, k)
		assert.Empty(t, p.Type, k)
		assertLoss(t, report, k, "$ref")
	}
}

func TestRuleTypes(t *testing.T) {
	runRuleCases(t, []ruleCase{{
		name:   "[T, null] is T and nullable",
		schema: `{"type":"object","properties":{"s":{"type":["string","null"]}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			s := prop(t, spec, "s")
			assert.Equal(t, "string", s.Type)
			assert.True(t, s.Nullable)
		},
		admit:  []string{`{"s":null}`, `{"s":"x"}`},
		refuse: []string{`{"s":1}`},
	}, {
		name:   "integer|string is int-or-string",
		schema: `{"type":"object","properties":{"port":{"type":["integer","string"]}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			p := prop(t, spec, "port")
			assert.True(t, p.XIntOrString)
			assert.Empty(t, p.Type)
			assert.Empty(t, r)
		},
		admit:  []string{`{"port":80}`, `{"port":"http"}`},
		refuse: []string{`{"port":true}`, `{"port":1.5}`},
	}, {
		name:   "other mixes keep any value, reported",
		schema: `{"type":"object","properties":{"m":{"type":["string","boolean"]}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			m := prop(t, spec, "m")
			assert.True(t, *m.XPreserveUnknownFields)
			assert.Empty(t, m.Type)
			assertLoss(t, r, "m", "type")
		},
		admit: []string{`{"m":"x"}`, `{"m":true}`, `{"m":{"deep":1}}`},
	}, {
		name:   "untyped keeps any value, without a report",
		schema: `{"type":"object","properties":{"u":{"description":"anything"}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.True(t, *prop(t, spec, "u").XPreserveUnknownFields)
			assert.Empty(t, r)
		},
		admit: []string{`{"u":[1,"a",{"b":null}]}`, `{"u":null}`},
	}, {
		name:   "an untyped schema with properties is an object when values.yaml defaults a map there",
		schema: `{"type":"object","properties":{"image":{"properties":{"tag":{"type":"string"}}},"free":{"properties":{"a":{"type":"string"}}}}}`,
		values: "image:\n  tag: latest\n",
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Equal(t, "object", prop(t, spec, "image").Type)
			assert.Equal(t, "string", prop(t, spec, "image", "tag").Type)
			assert.Empty(t, prop(t, spec, "free").Type)
		},
		admit: []string{`{"free":"any"}`},
	}})
}

func TestRuleObjects(t *testing.T) {
	runRuleCases(t, []ruleCase{{
		name:   "open objects keep unknown fields",
		schema: `{"type":"object","properties":{"o":{"type":"object","properties":{"a":{"type":"string"}}}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.True(t, *spec.XPreserveUnknownFields)
			assert.True(t, *prop(t, spec, "o").XPreserveUnknownFields)
		},
		admit: []string{`{"extra":1,"o":{"a":"x","b":[1]}}`},
	}, {
		// A pruned key would be gone before the webhook judges it: a typo lost silently
		// for clients that do not ask for strict field validation.
		name:   "additionalProperties false keeps unknown fields for the webhook to refuse",
		schema: `{"type":"object","additionalProperties":false,"properties":{"o":{"type":"object","additionalProperties":false,"properties":{"a":{"type":"string"}}}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.True(t, *spec.XPreserveUnknownFields)
			assert.True(t, *prop(t, spec, "o").XPreserveUnknownFields)
			assert.Equal(t, "string", prop(t, spec, "o", "a").Type, "declared keys keep their schema")
			assertLoss(t, r, "", "additionalProperties")
			assertLoss(t, r, "o", "additionalProperties")
		},
		admit:  []string{`{"o":{"a":"x"}}`, `{"o":{"b":"x"}}`, `{"typo":1}`},
		refuse: []string{`{"o":{"a":1}}`},
	}, {
		name:   "typed additionalProperties without properties is a map",
		schema: `{"type":"object","properties":{"labels":{"type":"object","additionalProperties":{"type":"string","maxLength":5}}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			l := prop(t, spec, "labels")
			require.NotNil(t, l.AdditionalProperties)
			assert.Equal(t, "string", l.AdditionalProperties.Schema.Type)
			assert.Nil(t, l.XPreserveUnknownFields)
		},
		admit:  []string{`{"labels":{"a":"b","c":"d"}}`},
		refuse: []string{`{"labels":{"a":1}}`, `{"labels":{"a":"toolong"}}`},
	}, {
		name:   "typed additionalProperties next to properties keeps unknown fields, reported",
		schema: `{"type":"object","properties":{"o":{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"integer"}}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.True(t, *prop(t, spec, "o").XPreserveUnknownFields)
			assertLoss(t, r, "o", "additionalProperties")
		},
		admit: []string{`{"o":{"a":"x","b":1}}`},
	}, {
		name:   "required only for keys without a default",
		schema: `{"type":"object","required":["service","name"],"properties":{"service":{"type":"object","required":["port","host"],"properties":{"port":{"type":"integer"},"host":{"type":"string"}}},"name":{"type":"string"}}}`,
		values: "service:\n  port: 80\n",
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Equal(t, []string{"name"}, spec.Required)
			assert.Equal(t, []string{"host"}, prop(t, spec, "service").Required)
		},
		admit:  []string{`{"name":"a","service":{"host":"h"}}`},
		refuse: []string{`{"service":{"host":"h"}}`, `{"name":"a","service":{}}`},
	}, {
		// A null the CRD could not keep would be deleted before the webhook sees it:
		// Helm deletes a default with it, and refuses it where there is none.
		name:   "every property is nullable, an enum among them still checked",
		schema: `{"type":"object","properties":{"mode":{"type":"string","enum":["a","b"]},"other":{"type":"string","enum":["a","b"]},"o":{"type":"object","properties":{"n":{"type":"integer"}}},"m":{"type":"object","additionalProperties":{"type":"integer"}},"l":{"type":"array","items":{"type":"integer"}}}}`,
		values: "mode: a\n",
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			mode := prop(t, spec, "mode")
			assert.True(t, mode.Nullable)
			assert.Nil(t, mode.Enum, "Kubernetes checks enum even for null")
			assert.Equal(t, []string{`"a"`, `"b"`}, enumOf(t, mode))
			assert.True(t, prop(t, spec, "other").Nullable, "no default: Helm refuses the null, the webhook says so")
			assert.True(t, prop(t, spec, "o", "n").Nullable)
			assert.True(t, prop(t, spec, "m").AdditionalProperties.Schema.Nullable)
			assert.False(t, prop(t, spec, "l").Items.Schema.Nullable, "a null list item is refused, never pruned")
		},
		admit:  []string{`{"mode":null}`, `{"mode":"b"}`, `{"other":null}`, `{"o":{"n":null}}`, `{"m":{"k":null}}`},
		refuse: []string{`{"mode":"c"}`, `{"other":"c"}`, `{"l":[null]}`},
	}})
}

func TestRuleCombinators(t *testing.T) {
	runRuleCases(t, []ruleCase{{
		name: "allOf is merged into the parent",
		schema: `{"type":"object","properties":{"a":{"allOf":[
			{"type":"object","properties":{"x":{"type":"integer","maximum":10}}},
			{"properties":{"x":{"maximum":5},"y":{"type":"string"}},"required":["y"]}]}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			a := prop(t, spec, "a")
			assert.Empty(t, a.AllOf)
			assert.Equal(t, 5.0, *prop(t, &a, "x").Maximum)
			assert.Equal(t, "string", prop(t, &a, "y").Type)
			assert.Equal(t, []string{"y"}, a.Required)
		},
		admit:  []string{`{"a":{"x":5,"y":"s"}}`},
		refuse: []string{`{"a":{"x":6,"y":"s"}}`, `{"a":{"x":1}}`},
	}, {
		name: "oneOf of different kinds joins the parent exactly",
		schema: `{"type":"object","properties":{"storage":{"oneOf":[{"type":"null"},
			{"type":"object","required":["size"],"properties":{"size":{"type":"string","pattern":"^[0-9]+Gi$"}}}]},
			"port":{"oneOf":[{"type":"integer","minimum":1},{"type":"string","pattern":"^[a-z]+$"}]}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			s := prop(t, spec, "storage")
			assert.Equal(t, "object", s.Type)
			assert.True(t, s.Nullable)
			assert.Equal(t, []string{"size"}, s.Required)
			assert.Empty(t, s.OneOf)
			assert.Empty(t, s.AnyOf)
			p := prop(t, spec, "port")
			assert.True(t, p.XIntOrString)
			assert.Equal(t, 1.0, *p.Minimum)
			assert.Equal(t, "^[a-z]+$", p.Pattern)
			assert.Empty(t, r)
		},
		admit:  []string{`{"storage":null}`, `{"storage":{"size":"1Gi"}}`, `{"port":8080}`, `{"port":"http"}`},
		refuse: []string{`{"storage":{"size":"1GB"}}`, `{"storage":{}}`, `{"port":0}`, `{"port":"HTTP"}`},
	}, {
		name: "anyOf/oneOf of objects: properties hoisted, value validations left in branches",
		schema: `{"type":"object","properties":{"auth":{"type":"object","oneOf":[
			{"required":["token"],"properties":{"token":{"type":"string","minLength":8}}},
			{"required":["user","password"],"properties":{"user":{"type":"string"},"password":{"type":"string"}}}]}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			a := prop(t, spec, "auth")
			for _, k := range []string{"token", "user", "password"} {
				assert.Contains(t, a.Properties, k)
			}
			require.Len(t, a.AnyOf, 2)
			assert.Empty(t, a.OneOf)
			assert.Equal(t, []string{"token"}, a.AnyOf[0].Required)
			assert.Equal(t, int64(8), *a.AnyOf[0].Properties["token"].MinLength)
			assert.Empty(t, a.AnyOf[0].Properties["token"].Type, "no type inside a branch")
			assertLoss(t, r, "auth", "oneOf")
		},
		admit:  []string{`{"auth":{"token":"12345678"}}`, `{"auth":{"user":"u","password":"p"}}`},
		refuse: []string{`{"auth":{}}`, `{"auth":{"token":"short"}}`},
	}, {
		name:   "anyOf with an unconstrained branch is left to the webhook",
		schema: `{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"string","minLength":3}]}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Equal(t, "string", prop(t, spec, "v").Type)
			assert.Empty(t, prop(t, spec, "v").AnyOf)
		},
		admit: []string{`{"v":"a"}`},
	}})
}

func TestRuleWebhookOnlyKeywords(t *testing.T) {
	schema := `{"type":"object","properties":{
		"cond":{"type":"object","if":{"required":["a"]},"then":{"required":["b"]},"else":{}},
		"neg":{"type":"string","not":{"const":"x"}},
		"list":{"type":"array","contains":{"type":"integer"}},
		"open":{"type":"object","unevaluatedProperties":false},
		"tuple":{"type":"array","prefixItems":[{"type":"string"}]},
		"pat":{"type":"object","patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false},
		"dep":{"type":"object","dependentSchemas":{"a":{"required":["b"]}},"dependentRequired":{"c":["d"]}},
		"names":{"type":"object","propertyNames":{"maxLength":3}}}}`
	spec, report, err := Translate([]byte(schema), nil)
	require.NoError(t, err)
	for path, keywords := range map[string][]string{
		"cond": {"if"}, "neg": {"not"}, "list": {"contains"}, "open": {"unevaluatedProperties"},
		"tuple": {"prefixItems"}, "pat": {"patternProperties", "additionalProperties"},
		"dep": {"dependentSchemas", "dependentRequired"}, "names": {"propertyNames"},
	} {
		for _, kw := range keywords {
			assertLoss(t, report, path, kw)
		}
	}
	// patternProperties keys must survive: additionalProperties false is not applied.
	assert.True(t, *prop(t, spec, "pat").XPreserveUnknownFields)
	for _, l := range report {
		assert.NotEmpty(t, l.Reason)
		assert.True(t, strings.HasPrefix(l.SchemaPath, "#/properties/"), l.SchemaPath)
	}
}

func TestRuleValueKeywords(t *testing.T) {
	runRuleCases(t, []ruleCase{{
		name:   "const is a one-element enum",
		schema: `{"type":"object","properties":{"kind":{"const":"web"}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			k := prop(t, spec, "kind")
			assert.Equal(t, []string{`"web"`}, enumOf(t, k))
			assert.Equal(t, "string", k.Type)
		},
		admit:  []string{`{"kind":"web"}`},
		refuse: []string{`{"kind":"db"}`},
	}, {
		name:   "numeric exclusive limits become the boolean form",
		schema: `{"type":"object","properties":{"n":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10,"minimum":-5}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			n := prop(t, spec, "n")
			assert.Equal(t, 0.0, *n.Minimum)
			assert.True(t, n.ExclusiveMinimum)
			assert.Equal(t, 10.0, *n.Maximum)
			assert.True(t, n.ExclusiveMaximum)
		},
		admit:  []string{`{"n":1}`, `{"n":9}`},
		refuse: []string{`{"n":0}`, `{"n":10}`},
	}, {
		name:   "formats: only those Kubernetes checks the same way, and only where Helm asserts them",
		schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"ip":{"type":"string","format":"ipv4"},"mail":{"type":"string","format":"email"},"wait":{"type":"string","format":"duration"}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Equal(t, "ipv4", prop(t, spec, "ip").Format)
			assert.Empty(t, prop(t, spec, "mail").Format)
			assert.Empty(t, prop(t, spec, "wait").Format)
			assertLoss(t, r, "mail", "format")
			assertLoss(t, r, "wait", "format")
		},
		admit:  []string{`{"ip":"10.0.0.1","wait":"P1D","mail":"a@b"}`},
		refuse: []string{`{"ip":"10.0.0"}`},
	}, {
		name:   "2020-12 formats are annotations, as in Helm",
		schema: `{"type":"object","properties":{"ip":{"type":"string","format":"ipv4"}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Empty(t, prop(t, spec, "ip").Format)
			assert.Empty(t, r)
		},
		admit: []string{`{"ip":"not an ip"}`},
	}, {
		name:   "defaults are never emitted",
		schema: `{"type":"object","properties":{"n":{"type":"integer","default":3},"o":{"type":"object","default":{"a":1}}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.NotContains(t, mustJSON(spec), `"default"`)
		},
	}, {
		name:   "uniqueItems on scalars is a set",
		schema: `{"type":"object","properties":{"tags":{"type":"array","uniqueItems":true,"items":{"type":"string"}},"objs":{"type":"array","uniqueItems":true,"items":{"type":"object"}}}}`,
		check: func(t *testing.T, spec *apiextensionsv1.JSONSchemaProps, r Report) {
			assert.Equal(t, "set", *prop(t, spec, "tags").XListType)
			assert.Nil(t, prop(t, spec, "objs").XListType)
			assertLoss(t, r, "objs", "uniqueItems")
		},
		admit:  []string{`{"tags":["a","b"],"objs":[{"a":1},{"a":1}]}`},
		refuse: []string{`{"tags":["a","a"]}`},
	}})

	// Go's regexp cannot compile lookbehind; Helm's validator (jsonschema v6, same
	// engine) cannot either, so such a schema is refused as invalid, not half-applied.
	_, _, err := Translate([]byte(`{"type":"object","properties":{"p":{"type":"string","pattern":"(?<=a)b"}}}`), nil)
	assert.ErrorIs(t, err, ErrInvalidSchema)
}

func TestNoSchema(t *testing.T) {
	spec, report, err := Translate(nil, []byte("a: 1\n"))
	require.NoError(t, err)
	assert.Equal(t, "object", spec.Type)
	assert.True(t, *spec.XPreserveUnknownFields)
	assertLoss(t, report, "", "values.schema.json")
}

func TestSchemaTooComplex(t *testing.T) {
	// Each level references the previous one twice: 2^30 expansions if unchecked.
	var b strings.Builder
	b.WriteString(`{"type":"object","$defs":{"d0":{"type":"string"}`)
	for i := 1; i <= 30; i++ {
		b.WriteString(`,"d` + strconv.Itoa(i) + `":{"type":"object","properties":{"a":{"$ref":"#/$defs/d` + strconv.Itoa(i-1) + `"},"b":{"$ref":"#/$defs/d` + strconv.Itoa(i-1) + `"}}}`)
	}
	b.WriteString(`},"properties":{"x":{"$ref":"#/$defs/d30"}}}`)
	_, _, err := Translate([]byte(b.String()), nil)
	assert.ErrorIs(t, err, ErrSchemaTooComplex)
}
