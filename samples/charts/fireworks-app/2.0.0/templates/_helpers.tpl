{{/* Name shared by the Deployment and the Service. */}}
{{- define "fireworks-app.fullname" -}}
{{ .Release.Name }}-fireworks-app
{{- end }}

{{- define "fireworks-app.labels" -}}
app.kubernetes.io/name: fireworks-app
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "fireworks-app.selectorLabels" -}}
app.kubernetes.io/name: fireworks-app
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
