package policies

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"sigs.k8s.io/yaml"
)

// readsChart is a chart in the shapes real charts read their values: a schema with
// open and closed maps, with and range blocks, named templates given the root or a
// dict, toYaml, tpl, index and dig, a subchart under an alias, and global.
func readsChart(t *testing.T) *chart.Chart {
	t.Helper()
	values := func(s string) map[string]any {
		m := map[string]any{}
		require.NoError(t, yaml.Unmarshal([]byte(s), &m))
		return m
	}
	file := func(name, data string) *chartcommon.File { return &chartcommon.File{Name: name, Data: []byte(data)} }
	cache := &chart.Chart{
		Metadata: &chart.Metadata{Name: "redis", Version: "1.0.0"},
		Values:   values("port: 6379\nauth: {enabled: true}\n"),
		Templates: []*chartcommon.File{file("templates/svc.yaml",
			`port: {{ .Values.port }}{{ if .Values.auth.enabled }}{{ .Values.auth.password }}{{ end }}{{ .Values.global.imageRegistry }}`)},
	}
	root := &chart.Chart{
		Metadata: &chart.Metadata{Name: "web", Version: "1.0.0", Dependencies: []*chart.Dependency{{Name: "redis", Alias: "cache", Condition: "cache.enabled,redisOn", Tags: []string{"backend"}}}},
		Schema: []byte(`{"type": "object", "properties": {
			"replicaCount": {"type": "integer"},
			"service": {"type": "object", "properties": {"type": {"type": "string"}, "port": {"type": "integer"}}, "additionalProperties": false},
			"labels": {"type": "object", "additionalProperties": {"type": "string"}},
			"probes": {"$ref": "#/definitions/probes"}
		}, "definitions": {"probes": {"type": "object", "properties": {"liveness": {"type": "boolean"}}}}}`),
		Values: values(`
replicaCount: 1
image: {repository: nginx, tag: ""}
podAnnotations: {}
resources:
extraEnv: []
config: {level: info}
banner: "{{ .Values.greeting }}"
`),
		Templates: []*chartcommon.File{
			file("templates/_helpers.tpl", `{{ define "web.name" }}{{ .Values.nameOverride | default .Chart.Name }}{{ end }}`+
				`{{ define "web.image" }}{{ .imageRoot.repository }}:{{ .imageRoot.tag }}{{ .context.Values.imageDigest }}{{ end }}`),
			file("templates/deploy.yaml", `
name: {{ include "web.name" . }}
image: {{ include "web.image" (dict "imageRoot" .Values.image "context" $) }}
replicas: {{ .Values.replicaCount }}
{{- with .Values.podAnnotations }}
annotations: {{ toYaml . | nindent 2 }}
{{- end }}
{{- range $k, $v := .Values.extraLabels }}{{ $k }}: {{ $v }}{{ end }}
{{- $svc := .Values.service }}
port: {{ $svc.port }}
{{- with .Values.config }}
level: {{ .level }}
format: {{ .format | default "json" }}
{{- end }}
{{ tpl .Values.banner . }}
{{ index .Values "node" "selector" }}
{{ dig "tls" "secretName" "" .Values.ingress }}
{{ if hasKey .Values "debug" }}debug{{ end }}
`),
			file("templates/NOTES.txt", `{{ .Values.notes.url }}`),
		},
		Files: []*chartcommon.File{file("files/app.conf", `level={{ .Values.fileLevel }}`)},
	}
	root.SetDependencies(cache)
	return root
}

func TestUnreadValuesAreTheKeysNothingDeclaresOrReads(t *testing.T) {
	ch := readsChart(t)
	spec := map[string]any{
		// declared, read or open: none is reported
		"replicaCount":   3,
		"service":        map[string]any{"type": "ClusterIP"},
		"labels":         map[string]any{"team": "a"},
		"probes":         map[string]any{"liveness": true},
		"image":          map[string]any{"repository": "x", "tag": "1"},
		"imageDigest":    "sha256:x",
		"nameOverride":   "w",
		"podAnnotations": map[string]any{"any": "thing"},
		"resources":      map[string]any{"limits": map[string]any{"cpu": "1"}},
		"extraLabels":    map[string]any{"free": "form"},
		"config":         map[string]any{"level": "debug", "format": "text"},
		"greeting":       "hi",
		"node":           map[string]any{"selector": map[string]any{"disk": "ssd"}},
		"ingress":        map[string]any{"tls": map[string]any{"secretName": "s"}},
		"debug":          true,
		"notes":          map[string]any{"url": "u"},
		"fileLevel":      "warn",
		"cache":          map[string]any{"enabled": true, "port": 1, "auth": map[string]any{"password": "p"}},
		"redisOn":        true,
		"tags":           map[string]any{"backend": true},
		"global":         map[string]any{"imageRegistry": "r"},
		// typos and keys nothing reads
		"replicaCuont": 3,
		"config2":      map[string]any{"x": 1},
		"probes2":      true,
	}
	nested := map[string]any{
		"service": map[string]any{"prot": 80},
		"image":   map[string]any{"tga": "1"}, // handed whole to a named template: any key may be read
		"config":  map[string]any{"levle": "x"},
		"cache":   map[string]any{"prot": 1, "auth": map[string]any{"passwrod": "p"}},
		"global":  map[string]any{"imageRegistr": "r"},
		"tags":    map[string]any{"backedn": true},
		"probes":  map[string]any{"livenss": true},
	}
	for k, v := range nested {
		for nk, nv := range v.(map[string]any) {
			spec[k].(map[string]any)[nk] = nv
		}
	}

	got := map[string]string{}
	for _, u := range UnreadValues(ch, spec) {
		got[strings.Join(u.Path, ".")] = strings.Join(u.Suggestion, ".")
	}
	assert.Equal(t, map[string]string{
		"replicaCuont":        "replicaCount",
		"config2":             "config",
		"probes2":             "probes",
		"service.prot":        "service.port",
		"config.levle":        "config.level",
		"cache.prot":          "cache.port",
		"cache.auth.passwrod": "cache.auth.password",
		"global.imageRegistr": "global.imageRegistry",
		"tags.backedn":        "tags.backend",
		"probes.livenss":      "probes.liveness",
	}, got)
}

func TestUnreadValuesStaySilentWhereWhatIsReadCannotBeTold(t *testing.T) {
	file := func(name, data string) *chartcommon.File { return &chartcommon.File{Name: name, Data: []byte(data)} }
	for name, tmpl := range map[string]string{
		"the values whole":         `{{ toYaml .Values }}`,
		"the values as a dot":      `{{ with .Values }}{{ toYaml . }}{{ end }}`,
		"the values in a range":    `{{ range $k, $v := $.Values }}{{ $k }}{{ end }}`,
		"the values to a helper":   `{{ include "x" .Values }}`,
		"a template that is wrong": `{{ if }}`,
	} {
		t.Run(name, func(t *testing.T) {
			ch := &chart.Chart{Metadata: &chart.Metadata{Name: "c", Version: "1"}, Templates: []*chartcommon.File{file("templates/a.yaml", tmpl)}}
			assert.Empty(t, UnreadValues(ch, map[string]any{"whatever": map[string]any{"deep": 1}}))
		})
	}
	ch := &chart.Chart{Metadata: &chart.Metadata{Name: "c", Version: "1"}, Templates: []*chartcommon.File{file("templates/a.yaml", `{{ .Values.a }}`)}}
	assert.Equal(t, []UnreadValue{{Path: []string{"b"}, Suggestion: []string{"a"}}, {Path: []string{"zzzz"}}},
		UnreadValues(ch, map[string]any{"a": 1, "b": 2, "zzzz": 3}), "a far key has no suggestion")
}

func TestEditDistanceCountsASwapAsOneEditWithinItsLimit(t *testing.T) {
	for _, c := range []struct {
		a, b  string
		limit int
		want  int
	}{
		{"replicaCount", "replicaCuont", 2, 1}, {"tag", "tga", 1, 1}, {"port", "prot", 1, 1}, {"Port", "port", 1, 0},
		{"replicaCount", "replicacount", 2, 0}, {"abc", "", 2, 3}, {"", "ab", 2, 2}, {"kitten", "sitting", 2, 3},
		{"kitten", "sitting", 3, 3}, {"same", "same", 2, 0}, {"abcdef", "badcfe", 2, 3}, {"abcdef", "abcdxy", 2, 2},
		{strings.Repeat("a", 64), strings.Repeat("b", 64), 2, 3},
	} {
		assert.Equal(t, c.want, editDistanceWithin(c.a, c.b, c.limit), "%s %s within %d", c.a, c.b, c.limit)
	}
}

// Every key of these values is read by Helm when it renders the template (each was
// checked with Helm's engine when the case was written): none may be told. They are
// the idioms an attack on the analysis found (variables reassigned in branches and
// bodies, strings of the values rendered with tpl, keys computed from values, the
// root context used as data, .Subcharts), and the ones it found handled.
func TestUnreadValuesKnowWhatHelmReads(t *testing.T) {
	for _, c := range []struct{ name, values, tmpl, spec string }{
		{"reassign in if (last wins)", "image: {repository: nginx, tag: '1'}",
			`{{- $image := .Values.image }}{{- if .Values.global.image }}{{- $image = .Values.global.image }}{{- end }}{{ $image.repository }}:{{ $image.tag }}@{{ $image.digest }}`,
			"image: {digest: sha256:abc}"},
		{"reassign to dict default in if", "config: {port: 80}",
			`{{- $cfg := .Values.config }}{{- if not $cfg }}{{- $cfg = dict }}{{- end }}level={{ $cfg.level }}`,
			"config: {level: debug}"},
		{"reassign inside with (scope copy)", "server: {config: {port: 80}}",
			`{{- $cfg := dict "port" 80 }}{{- with .Values.server }}{{- $cfg = .config }}{{- end }}port={{ $cfg.port }} level={{ $cfg.level }}`,
			"server: {config: {level: debug}}"},
		{"reassign inside range (scope copy)", "primary: {port: 80}",
			`{{- $p := dict }}{{- range until 1 }}{{- $p = $.Values.primary }}{{- end }}{{ $p.host }}`,
			"primary: {host: h}"},
		{"user tpl string reads user key", "extraConfig: ''",
			`{{ tpl .Values.extraConfig . }}`,
			"extraConfig: 'domain={{ .Values.myDomain }}'\nmyDomain: example.com"},
		{"bitnami tplvalues.render user key", "extraDeploy: []\ncommonAnnotations: {}",
			`{{- define "common.tplvalues.render" -}}{{- if typeIs "string" .value }}{{- tpl .value .context }}{{- else }}{{- tpl (.value | toYaml) .context }}{{- end }}{{- end -}}` +
				`{{ range .Values.extraDeploy }}{{ include "common.tplvalues.render" (dict "value" . "context" $) }}{{ end }}`,
			"extraDeploy: ['{{ .Values.myApp.host }}']\nmyApp: {host: x}"},
		{"index root at a value-computed key", "environment: prod\nprod: {replicas: 3}",
			`{{- $cfg := index .Values .Values.environment }}replicas={{ $cfg.replicas }}`,
			"environment: staging\nstaging: {replicas: 1}"},
		{"index root at printf key", "mode: a\naConfig: {x: 1}",
			`{{ toYaml (index .Values (printf "%sConfig" .Values.mode)) }}`,
			"mode: b\nbConfig: {x: 1}"},
		{"index $ Values", "extra: {a: 1}",
			`{{ toYaml (index $ "Values" "extra") }}`,
			"extra: {b: 2}"},
		{"get $ Values", "extra: {a: 1}",
			`{{ toYaml (get $ "Values").extra }}`,
			"extra: {b: 2}"},
		{"toYaml $ (whole root)", "a: 1",
			`{{ toYaml $ }}`,
			"b: 2"},
		{"toJson . | sha256sum", "a: 1",
			`checksum: {{ toJson . | sha256sum }}`,
			"b: 2"},
		{"pick . Values", "a: 1",
			`{{ toYaml (pick . "Values") }}`,
			"b: 2"},
		{"$.Values in range", "svc: {port: 1}",
			`{{ range .Values.list }}{{ $.Values.svc.port }}{{ $.Values.svc.host }}{{ end }}`,
			"svc: {host: x}"},
		{"with else with", "a: {x: 1}\nb: {x: 1}",
			`{{ with .Values.a }}{{ .x }}{{ else with .Values.b }}{{ .w }}{{ end }}`,
			"b: {w: 1}"},
		{"template vs include", "a: {x: 1}",
			`{{ define "t" }}{{ .w }}{{ end }}{{ template "t" .Values.a }}`,
			"a: {w: 1}"},
		{"block override", "a: {x: 1}",
			`{{ block "b" . }}{{ .Values.a.z }}{{ end }}`,
			"a: {z: 1}"},
		{"tpl over Files.Get", "a: {x: 1}",
			`{{ tpl (.Files.Get "conf.tpl") . }}`,
			"a: {w: 1}"},
		{"dict/list/merge/set/pick/omit", "a: {x: 1}",
			`{{ $m := merge (dict) .Values.a }}{{ $m.w }}{{ $l := list .Values.b }}{{ (first $l).z }}`,
			"a: {w: 1}\nb: {z: 1}"},
		{"dig with variable map", "a: {x: 1}",
			`{{ $a := .Values.a }}{{ dig "w" "z" "" $a }}`,
			"a: {w: {z: 1}}"},
		{"pluck", "a: {x: 1}",
			`{{ pluck "w" .Values.a .Values.b | first }}`,
			"a: {w: 1}"},
		{"index with variable key on subtree", "a: {x: 1}",
			`{{ $k := "w" }}{{ index .Values.a $k }}`,
			"a: {w: 1}"},
		{"index var base with literal", "a: {x: {p: 1}}",
			`{{ $a := .Values.a }}{{ toYaml (index $a "x") }}`,
			"a: {x: {q: 1}}"},
		{"default pipeline", "a: {x: 1}",
			`{{ .Values.a.w | default "z" }}`,
			"a: {w: 1}"},
		{"required", "a: {x: 1}",
			`{{ required "w!" .Values.a.w }}`,
			"a: {w: 1}"},
		{"keys with dashes", "my-key: {x: 1}",
			`{{ index .Values "my-key" "w" }}`,
			"my-key: {w: 1}"},
		{"keys with dots", "x: 1",
			`{{ index .Values "my.key" }}`,
			"my.key: 1"},
		{"NOTES only", "x: 1",
			`{{ .Values.notes.url }}`,
			"notes: {url: u}"},
		{"Capabilities guard", "x: 1",
			`{{ if .Capabilities.APIVersions.Has "v1" }}{{ .Values.w }}{{ end }}`,
			"w: 1"},
		{"range $k $v root", "x: 1",
			`{{- range $k, $v := .Values }}{{ $k }}{{ end }}`,
			"w: 1"},
		{"Subcharts field", "x: 1",
			`{{ .Subcharts.child.Values.port }}`,
			"child: {port: 1}"},
		{"variable named Values-like in dict", "x: 1",
			`{{ define "h" }}{{ .vals.port }}{{ end }}{{ include "h" (dict "vals" .Values.svc) }}`,
			"svc: {port: 1}"},
		{"with $ inside named", "a: {x: 1}",
			`{{ define "h" }}{{ with .root }}{{ .Values.a.w }}{{ end }}{{ end }}{{ include "h" (dict "root" $) }}`,
			"a: {w: 1}"},
		{"range over root dot in named", "a: {x: 1}",
			`{{ define "h" }}{{ range $k, $v := . }}{{ $v.w }}{{ end }}{{ end }}{{ include "h" .Values.a }}`,
			"a: {w: 1}"},
		{"var from if-decl then used later", "a: {x: 1}",
			`{{ if $a := .Values.a }}{{ end }}{{ $a := .Values.b }}{{ $a.z }}`,
			"b: {z: 1}"},
		{"ternary", "a: {x: 1}",
			`{{ (ternary .Values.a .Values.b true).w }}`,
			"a: {w: 1}"},
		{"deepCopy root then Values", "a: {x: 1}",
			`{{ $r := deepCopy . }}{{ $r.Values.a.w }}`,
			"a: {w: 1}"},
		{"fromYaml toYaml roundtrip", "a: {x: 1}",
			`{{ $a := .Values.a | toYaml | fromYaml }}{{ $a.w }}`,
			"a: {w: 1}"},
		{"and/or chain", "a: {x: 1}",
			`{{ (or .Values.a dict).w }}`,
			"a: {w: 1}"},
		{"$ reassigned? root var", "a: {x: 1}",
			`{{ $root := . }}{{ range .Values.l }}{{ $root.Values.a.w }}{{ end }}`,
			"a: {w: 1}"},
		{"values string in values.yaml (subchart tpl)", "a: {x: 1}",
			`{{ .Values.a.x }}`,
			"a: {x: 2}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			values := map[string]any{}
			require.NoError(t, yaml.Unmarshal([]byte(c.values), &values))
			spec := map[string]any{}
			require.NoError(t, yaml.Unmarshal([]byte(c.spec), &spec))
			ch := &chart.Chart{Metadata: &chart.Metadata{Name: "c", Version: "1"}, Values: values,
				Templates: []*chartcommon.File{{Name: "templates/a.yaml", Data: []byte(c.tmpl)}}}
			if c.name == "tpl over Files.Get" {
				ch.Files = []*chartcommon.File{{Name: "conf.tpl", Data: []byte(`{{ .Values.a.w }}`)}}
			}
			assert.Empty(t, UnreadValues(ch, spec), "Helm reads every key of %s", c.spec)
		})
	}
}

func TestUnreadValuesOfSubchartsFollowHelm(t *testing.T) {
	file := func(name, data string) *chartcommon.File { return &chartcommon.File{Name: name, Data: []byte(data)} }
	redis := &chart.Chart{Metadata: &chart.Metadata{Name: "redis", Version: "1"},
		Templates: []*chartcommon.File{file("templates/a.yaml", `{{ .Values.password }}`)}}
	leaf := &chart.Chart{Metadata: &chart.Metadata{Name: "leaf", Version: "1"}}
	mid := &chart.Chart{Metadata: &chart.Metadata{Name: "mid", Version: "1",
		Dependencies: []*chart.Dependency{{Name: "leaf", Tags: []string{"monitoring"}}}}}
	mid.SetDependencies(leaf)
	root := &chart.Chart{Metadata: &chart.Metadata{Name: "top", Version: "1",
		Dependencies: []*chart.Dependency{{Name: "redis", Alias: "cache"}, {Name: "redis", Alias: "queue"}, {Name: "mid"}}},
		Templates: []*chartcommon.File{file("templates/a.yaml", `{{ .Subcharts.child.Values.port }}`)}}
	root.SetDependencies(redis, mid)

	got := UnreadValues(root, map[string]any{
		"cache": map[string]any{"password": "a"}, "queue": map[string]any{"password": "b"}, // one copy per alias
		"tags":  map[string]any{"monitoring": false}, // Helm reads tags at the top only
		"child": map[string]any{"port": 1},           // .Subcharts.child.Values.port
		"redis": map[string]any{"password": "c"},
		"mid":   map[string]any{"tags": map[string]any{"monitoring": true}},
	})
	assert.Equal(t, []UnreadValue{{Path: []string{"mid", "tags"}}, {Path: []string{"redis"}}}, got,
		"redis is aliased away, and a subchart's tags are not read")
}

// Attack: a values.schema.json whose definitions name each other twice, or
// themselves, is walked within a bound; what is past it is open.
func TestUnreadValuesWalkARecursiveSchemaWithinABound(t *testing.T) {
	defs := map[string]any{}
	for i := range 40 {
		next := map[string]any{"$ref": fmt.Sprintf("#/definitions/d%d", i+1)}
		defs[fmt.Sprintf("d%d", i)] = map[string]any{"allOf": []any{next, next}, "properties": map[string]any{"k": map[string]any{"type": "string"}}}
	}
	defs["d40"] = map[string]any{"type": "object", "properties": map[string]any{"leaf": map[string]any{"type": "string"}}}
	defs["filter"] = map[string]any{"type": "object", "properties": map[string]any{
		"and": map[string]any{"$ref": "#/definitions/filter"}, "or": map[string]any{"$ref": "#/definitions/filter"}, "field": map[string]any{"type": "string"}}}
	schema, err := json.Marshal(map[string]any{"type": "object", "definitions": defs, "properties": map[string]any{
		"chain": map[string]any{"$ref": "#/definitions/d0"}, "filter": map[string]any{"$ref": "#/definitions/filter"}}})
	require.NoError(t, err)
	ch := &chart.Chart{Metadata: &chart.Metadata{Name: "c", Version: "1"}, Schema: schema}
	got := UnreadValues(ch, map[string]any{
		"filter": map[string]any{"field": "x", "and": map[string]any{"anything": 1}},
		"chain":  map[string]any{"k": "x"},
		"fliter": 1,
	})
	assert.Equal(t, []UnreadValue{{Path: []string{"fliter"}, Suggestion: []string{"filter"}}}, got)
}

// Attack: a string of the composition's values is parsed as a template (a chart may
// render it with tpl); one of pipelines nested forty deep is walked once, not 2^40
// times.
func TestUnreadValuesWalkNestedPipelinesOnce(t *testing.T) {
	nested := ".Values"
	for range 40 {
		nested = `("k" | index ` + nested + `)`
	}
	ch := &chart.Chart{Metadata: &chart.Metadata{Name: "c", Version: "1"},
		Templates: []*chartcommon.File{{Name: "templates/a.yaml", Data: []byte(`{{ tpl .Values.extra . }}{{ ` + nested + ` }}`)}}}
	got := UnreadValues(ch, map[string]any{"extra": "{{ " + nested + " }}", "typo": 1})
	assert.Empty(t, got, "a key computed from what is piped may be any: every value is read")
}
