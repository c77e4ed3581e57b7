package rbac

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestScanTemplate(t *testing.T) {
	pair := func(api, kind string) typeRef { return typeRef{APIVersion: api, Kind: kind, Source: "t.yaml"} }
	tests := []struct {
		name    string
		text    string
		partial bool
		want    []typeRef
		dynamic bool
	}{
		{name: "one document", text: "apiVersion: v1\nkind: ConfigMap\n", want: []typeRef{pair("v1", "ConfigMap")}},
		{name: "kind first", text: "kind: Service\napiVersion: v1\n", want: []typeRef{pair("v1", "Service")}},
		{name: "quotes and comments", text: "apiVersion: \"apps/v1\" # workloads\nkind: 'Deployment'\n", want: []typeRef{pair("apps/v1", "Deployment")}},
		{name: "several documents", text: "---\napiVersion: v1\nkind: Service\n---\n# a comment\n---\napiVersion: batch/v1\nkind: Job\n", want: []typeRef{pair("v1", "Service"), pair("batch/v1", "Job")}},
		{name: "nested references", text: "apiVersion: v1\nkind: Pod\nmetadata:\n  ownerReferences:\n    - apiVersion: apps/v1\n      kind: ReplicaSet\n", want: []typeRef{pair("v1", "Pod")}},
		{name: "templated kind", text: "apiVersion: v1\nkind: {{ .Values.kind }}\n", dynamic: true},
		{name: "templated apiVersion", text: "apiVersion: {{ include \"x.apiVersion\" . }}\nkind: Deployment\n", dynamic: true},
		{name: "a document made by include", text: "{{ include \"lib.deployment\" . }}\n", dynamic: true},
		{name: "a document made by toYaml", text: "{{- range .Values.extraObjects }}\n---\n{{ toYaml . }}\n{{- end }}\n", dynamic: true},
		{name: "an include in a partial is a fragment", text: "{{- define \"x\" -}}\n{{ include \"y\" . }}\n{{- end }}\n", partial: true},
		{name: "control only", text: "{{- if .Values.x }}\n{{- $a := 1 }}\n{{- /* note */}}\n{{- end }}\n"},
		{name: "a kind without apiVersion", text: "kind: ConfigMap\nmetadata: {}\n", dynamic: true},
		{name: "a List", text: "apiVersion: v1\nkind: List\nitems: []\n", dynamic: true},
		{name: "a kind named like a list", text: "apiVersion: policy.example.com/v1\nkind: AllowList\n", want: []typeRef{pair("policy.example.com/v1", "AllowList")}},
		{name: "CRLF", text: "apiVersion: v1\r\nkind: Secret\r\n", want: []typeRef{pair("v1", "Secret")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dynamic := scanTemplate("t.yaml", []byte(tt.text), tt.partial)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.dynamic, dynamic)
		})
	}
}

// FuzzScanTemplate: the scan reads chart text Compositor did not write; it must never
// panic, and what it reports as literal must look like an apiVersion and a kind.
func FuzzScanTemplate(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\n---\nkind: {{ .Values.k }}\n"), false)
	f.Add([]byte("{{ include \"x\" . }}\n---\napiVersion: \"apps/v1\" # c\nkind: 'Deployment'\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, partial bool) {
		refs, _ := scanTemplate("f.yaml", data, partial)
		for _, r := range refs {
			if !literalAPIVersion.MatchString(r.APIVersion) || !literalKind.MatchString(r.Kind) {
				t.Fatalf("not literal: %+v", r)
			}
		}
	})
}
