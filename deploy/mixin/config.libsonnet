// The mixin's settings, node-mixin style. Override any of them, e.g.
//   (import 'mixin.libsonnet') + { _config+:: {
//     gpuEfficiencyExporterSelector: 'job="gpu"',
//     alerts+: { GpuTemperatureHigh+: { threshold: 80, severity: 'critical' } },
//   } }
// README.md lists them all; tests/deploy/test_mixin.py checks that each reaches what it renders.
local source = import 'rules-source.libsonnet';

{
  _config+:: {
    // PromQL label matchers that select this exporter's scrape targets: the exporter-health alerts
    // (GpuEfficiencyExporterDown, GpuEfficiencyExporterVanished) look at up{<these>}. The default is
    // the job the shipped prometheus.yml, Kubernetes manifests and Helm chart (no fullnameOverride)
    // produce; kube-prometheus's ServiceMonitor for the exporter's Service names the job after the
    // Service.
    gpuEfficiencyExporterSelector: source.job_selector,
    // PromQL label matchers added to every gpueff_ series the recording rules and alerts read,
    // e.g. 'cluster="prod"' to run this mixin for one cluster of a global Prometheus. Empty: all.
    gpuEfficiencySeriesSelector: '',
    // The same for every GPU query and variable of the dashboards; the series selector unless set.
    gpuEfficiencyDashboardSelector: self.gpuEfficiencySeriesSelector,
    // The label that tells clusters apart (kubernetes-mixin's clusterLabel): every aggregation of the
    // rules keeps it, the dashboards' Cluster variable reads it.
    clusterLabel: 'cluster',
    // Regular expressions (PromQL's, anchored) of the namespaces and pods whose GPUs the waste alerts
    // never name: bursty serving that idles between requests, a benchmark farm. Empty: none.
    wasteExemptNamespaces: source.exempt_namespaces,
    wasteExemptPods: source.exempt_pods,
    // Each alert's runbook_url is this base, '#' and the alert's name in lower case (a heading of
    // docs/dashboards-and-alerts.md): point it at your own copy of that page if you keep one.
    runbookURLBase: source.runbook_base_url,
    // Per alert: enabled, threshold (the number in its expression, where it has one), for and
    // severity; the defaults are the source's (the Helm chart's prometheusRule.alerts take the same).
    alerts: {
      [rule.alert]: { enabled: true } + { [key]: rule[key] for key in ['threshold', 'for', 'severity'] if std.objectHas(rule, key) }
      for group in source.alert_groups
      for rule in group.rules
    },
    // The dashboards' titles are this prefix and their name ('GPU efficiency / Fleet overview').
    dashboardNamePrefix: 'GPU efficiency / ',
    // Every dashboard's tags; the dashboards' links to each other list the dashboards with all of them.
    dashboardTags: ['gpu', 'gpu-efficiency'],
    // Each dashboard's uid (its URL: /d/<uid>/); the links between them follow.
    dashboardUIDs: {
      'gpu-efficiency-fleet.json': 'gpueff-fleet',
      'gpu-efficiency-gpu-detail.json': 'gpueff-gpu-detail',
      'gpu-efficiency-app-throughput.json': 'gpueff-app-throughput',
    },
    dashboardRefresh: '30s',
    dashboardTimezone: 'browser',
  },
}
