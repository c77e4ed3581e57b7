package policies

import (
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

func TestEditDistanceCountsASwapAsOneEdit(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"replicaCount", "replicaCuont", 1}, {"tag", "tga", 1}, {"port", "prot", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"same", "same", 0}} {
		assert.Equal(t, c.want, editDistance(c.a, c.b), "%s %s", c.a, c.b)
	}
}
