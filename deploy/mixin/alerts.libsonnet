// The alerts of rules-source.libsonnet (generated from deploy/prometheus/rules-source.yml), each
// with its _config.alerts settings (a disabled one left out), the selectors, cluster label and
// runbook base of _config.
local render = import 'lib/render.libsonnet';
local source = import 'rules-source.libsonnet';

{
  prometheusAlerts+:: {
    local config = $._config,
    local settings = render.alertSettings(source, config),
    local groups = [
      {
        name: group.name,
        rules: [render.alertRule(rule, settings[rule.alert], config) for rule in group.rules if settings[rule.alert].enabled],
      }
      for group in source.alert_groups
    ],
    groups+: [group for group in groups if group.rules != []],
  },
}
