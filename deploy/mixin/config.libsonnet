// The mixin's settings. Override any of them with
//   (import 'gpu-efficiency-exporter-mixin/mixin.libsonnet') + { _config+:: { gpuEfficiencyExporterSelector: 'job="gpu"' } }
local generated = import 'rules.libsonnet';

{
  _config+:: {
    // PromQL label matchers that select this exporter's scrape targets: the exporter-health alerts
    // (GpuEfficiencyExporterDown, GpuEfficiencyExporterVanished) look at up{<these>}. The default is
    // the job the shipped prometheus.yml, Kubernetes manifests and Helm chart (no fullnameOverride)
    // produce; kube-prometheus's ServiceMonitor for the exporter's Service names the job after the
    // Service.
    gpuEfficiencyExporterSelector: generated.defaults.job_selector,
    // PromQL label matchers added to every GPU query and variable of the dashboards, e.g.
    // 'job="gpu"' or 'cluster="prod"'. Empty (the default): every job that serves gpueff_ series,
    // narrowed by the dashboards' Cluster and Job variables.
    gpuEfficiencyDashboardSelector: '',
    // Each alert's runbook_url is this base, '#' and the alert's name in lower case (a heading of
    // docs/dashboards-and-alerts.md): point it at your own copy of that page if you keep one.
    runbookURLBase: generated.defaults.runbook_base_url,
  },
}
