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
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpueff.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{/* registry/repository:tag, or registry/repository@digest; global.imageRegistry wins over image.registry. */}}
{{- define "gpueff.image" -}}
{{- $registry := default .Values.image.registry ((.Values.global).imageRegistry) -}}
{{- $repository := ternary (printf "%s/%s" (trimSuffix "/" $registry) .Values.image.repository) .Values.image.repository (ne $registry "") -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default (printf "%s%s" .Chart.AppVersion (ternary "-dcgm" "" .Values.dcgm.enabled)) .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* What the web config turns on, as a dict of booleans: tls, basicAuth, clientCertificates (read from the
inline config, or taken from the values that describe an existingSecret). */}}
{{- define "gpueff.webFeatures" -}}
{{- $web := .Values.webConfig -}}
{{- if and $web.existingSecret $web.config -}}
{{- fail "webConfig: set config (inline) or existingSecret, not both" -}}
{{- end -}}
{{- if $web.config -}}
{{- $tls := get $web.config "tls_server_config" | default dict -}}
{{- $clientAuth := get $tls "client_auth_type" | default "NoClientCert" -}}
{{- toJson (dict "enabled" true "tls" (not (empty $tls)) "basicAuth" (not (empty (get $web.config "basic_auth_users"))) "clientCertificates" (eq $clientAuth "RequireAndVerifyClientCert" "RequireAnyClientCert")) -}}
{{- else if $web.existingSecret -}}
{{- toJson (dict "enabled" true "tls" $web.tls "basicAuth" $web.basicAuth "clientCertificates" $web.clientCertificates) -}}
{{- else -}}
{{- toJson (dict "enabled" false "tls" false "basicAuth" false "clientCertificates" false) -}}
{{- end -}}
{{- end -}}

{{- define "gpueff.webConfigSecretName" -}}
{{- default (printf "%s-web-config" (include "gpueff.fullname" . | trunc 52 | trimSuffix "-")) .Values.webConfig.existingSecret -}}
{{- end -}}

{{/* The pod security context: podSecurityContext over the user the chart picks (uid 0 without
capabilities while the root-only pod-resources socket is mounted, else the image's 65532). */}}
{{- define "gpueff.podSecurityContext" -}}
{{- $context := ternary (dict "runAsUser" 0 "runAsGroup" 0 "runAsNonRoot" false) (dict "runAsUser" 65532 "runAsGroup" 65532 "runAsNonRoot" true) .Values.podResources.enabled -}}
{{- toYaml (mergeOverwrite $context (deepCopy .Values.podSecurityContext)) -}}
{{- end -}}

{{- define "gpueff.securityContext" -}}
{{- $context := deepCopy .Values.securityContext -}}
{{- if .Values.hostDriver.enabled -}}
{{- $_ := set $context "privileged" true -}}
{{- end -}}
{{- if $context.privileged -}}
{{- /* The API refuses privileged beside allowPrivilegeEscalation: false (the default here). */ -}}
{{- $context = omit $context "allowPrivilegeEscalation" -}}
{{- end -}}
{{- if .Values.profilingAdmin -}}
{{- $capabilities := get $context "capabilities" | default dict -}}
{{- $_ := set $capabilities "add" (append (get $capabilities "add" | default list) "SYS_ADMIN" | uniq) -}}
{{- $_ := set $context "capabilities" $capabilities -}}
{{- end -}}
{{- toYaml $context -}}
{{- end -}}

{{/* affinity, with the GPU node terms as required node affinity unless affinity.nodeAffinity is given. */}}
{{- define "gpueff.affinity" -}}
{{- $affinity := deepCopy .Values.affinity -}}
{{- if and .Values.gpuNodeSelectorTerms (not (hasKey $affinity "nodeAffinity")) -}}
{{- $_ := set $affinity "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" .Values.gpuNodeSelectorTerms)) -}}
{{- end -}}
{{- if $affinity -}}
{{- toYaml $affinity -}}
{{- end -}}
{{- end -}}

{{/* One scrape endpoint of a ServiceMonitor or PodMonitor: (dict "root" $ "monitor" .Values.serviceMonitor). */}}
{{- define "gpueff.scrapeEndpoint" -}}
{{- $root := .root -}}
{{- $monitor := .monitor -}}
{{- $web := include "gpueff.webFeatures" $root | fromJson -}}
{{- if and $web.basicAuth (not $monitor.basicAuth) -}}
{{- fail "webConfig turns basic auth on: set basicAuth in serviceMonitor/podMonitor (a Secret with the username and password), or Prometheus gets 401" -}}
{{- end -}}
{{- if and $web.clientCertificates (not $monitor.tlsConfig) -}}
{{- fail "webConfig requires client certificates: set tlsConfig (cert and keySecret) in serviceMonitor/podMonitor, or Prometheus cannot connect" -}}
{{- end -}}
- port: metrics
  path: /metrics
  scheme: {{ default (ternary "https" "http" $web.tls) $monitor.scheme }}
  interval: {{ $monitor.interval }}
  scrapeTimeout: {{ $monitor.scrapeTimeout }}
  honorLabels: {{ $monitor.honorLabels }}
  {{- with $monitor.tlsConfig }}
  tlsConfig:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $monitor.basicAuth }}
  basicAuth:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  relabelings:
    - sourceLabels: [__meta_kubernetes_pod_node_name]
      targetLabel: node
    - sourceLabels: [__meta_kubernetes_pod_node_name]
      targetLabel: instance
    - action: labeldrop
      regex: pod|namespace|container
    {{- with $monitor.relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $monitor.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
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
{{- $kubernetes := dict "enabled" .Values.podResources.enabled "refresh_interval" .Values.podResources.refreshInterval "process_attribution" .Values.hostPID "pod_labels" .Values.podResources.podLabels "dra_drivers" .Values.podResources.draDrivers "pod_label_keys" .Values.podResources.podLabelKeys -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "kubernetes" (mergeOverwrite $kubernetes (get $config "kubernetes" | default dict)) -}}
{{- $_ := set $config "sharing" (mergeOverwrite (dict "enabled" .Values.sharing.enabled) (get $config "sharing" | default dict)) -}}
{{- toYaml $config -}}
{{- end -}}

{{/* Whether the exporter reads the API server (DRA ResourceSlices, pod labels): then the token is
mounted and a ClusterRole lets it list what it reads, on its own node only. */}}
{{- define "gpueff.apiAccess" -}}
{{- if and .Values.podResources.enabled (or .Values.podResources.draDrivers .Values.podResources.podLabelKeys) -}}true{{- end -}}
{{- end -}}

{{/* The prometheus.io/* annotations of Prometheus' example kubernetes-service-endpoints and
kubernetes-pods scrape jobs (a Prometheus without the operator); the port is the container's, which
both jobs put beside the pod's address. */}}
{{- define "gpueff.prometheusAnnotations" -}}
{{- $web := include "gpueff.webFeatures" . | fromJson -}}
prometheus.io/scrape: "true"
prometheus.io/port: "9947"
prometheus.io/path: /metrics
prometheus.io/scheme: {{ ternary "https" "http" $web.tls }}
{{- end -}}
