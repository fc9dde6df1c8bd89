{{- define "gpueff.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpueff.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpueff.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpueff.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpueff.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpueff.labels" -}}
helm.sh/chart: {{ include "gpueff.chart" . }}
{{ include "gpueff.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-efficiency-exporter
{{- end -}}

{{- define "gpueff.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpueff.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The exporter's config.yml: .Values.config with the kubernetes and sharing sections the chart derives. */}}
{{- define "gpueff.config" -}}
{{- if and .Values.sharing.enabled (not .Values.hostPID) -}}
{{- fail "sharing.enabled needs hostPID: true (the fair split reads each GPU process's cgroup in the host's /proc)" -}}
{{- end -}}
{{- $kubernetes := dict "enabled" .Values.podResources.enabled "refresh_interval" .Values.podResources.refreshInterval "process_attribution" .Values.hostPID "pod_labels" .Values.podResources.podLabels -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "kubernetes" (mergeOverwrite $kubernetes (get $config "kubernetes" | default dict)) -}}
{{- $_ := set $config "sharing" (mergeOverwrite (dict "enabled" .Values.sharing.enabled) (get $config "sharing" | default dict)) -}}
{{- toYaml $config -}}
{{- end -}}
