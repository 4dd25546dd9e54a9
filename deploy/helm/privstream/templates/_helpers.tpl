{{/* The resources' base name: the release name when it contains the chart's name. */}}
{{- define "privstream.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels every selector uses; the pods carry them with component: worker. */}}
{{- define "privstream.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "privstream.labels" -}}
{{ include "privstream.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "privstream.serviceAccountName" -}}
{{- default (include "privstream.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
The memory limit: 192 MiB + 256 bytes x ledgerPairs, rounded up to a multiple of
64 MiB (docs/deployment.md "Memory limit with a ledger"), unless set explicitly.
*/}}
{{- define "privstream.memoryLimit" -}}
{{- if .Values.resources.limits.memory -}}
{{- .Values.resources.limits.memory -}}
{{- else -}}
{{- $step := mul 64 1048576 -}}
{{- $needed := add (mul 192 1048576) (mul 256 (int64 .Values.ledgerPairs)) -}}
{{- printf "%dMi" (mul (div (add $needed (sub $step 1)) $step) 64) -}}
{{- end -}}
{{- end -}}
