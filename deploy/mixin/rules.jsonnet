// jsonnet -S rules.jsonnet > rules.yaml: the recording rules as a Prometheus rules file.
std.manifestYamlDoc((import 'mixin.libsonnet').prometheusRules)
