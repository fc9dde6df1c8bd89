// jsonnet -S alerts.jsonnet > alerts.yaml: the alerts as a Prometheus rules file.
std.manifestYamlDoc((import 'mixin.libsonnet').prometheusAlerts)
