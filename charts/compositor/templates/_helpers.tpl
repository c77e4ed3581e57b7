{{/* The name of every object of the release. */}}
{{- define "compositor.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "compositor.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "compositor.labels" -}}
{{ include "compositor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "compositor.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Service the API server reaches the webhooks through. */}}
{{- define "compositor.webhookService" -}}
{{ include "compositor.fullname" . }}-webhook
{{- end -}}

{{/* The Secret of the webhook certificate in cert-manager mode. */}}
{{- define "compositor.certSecret" -}}
{{ include "compositor.fullname" . }}-webhook-tls
{{- end -}}

{{/*
The ConfigMap holding the CA of the API server's webhook client certificate
(webhook.clientAuth), empty when the webhooks hear any caller.
*/}}
{{- define "compositor.webhookClientCA" -}}
{{- if .Values.webhook.clientAuth.existingConfigMap -}}
{{ .Values.webhook.clientAuth.existingConfigMap }}
{{- else if .Values.webhook.clientAuth.caBundle -}}
{{ include "compositor.fullname" . }}-webhook-client-ca
{{- end -}}
{{- end -}}
