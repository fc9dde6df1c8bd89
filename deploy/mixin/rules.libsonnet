// The recording rules of rules-source.libsonnet (generated from deploy/prometheus/rules-source.yml),
// with _config's series selector and cluster label.
local render = import 'lib/render.libsonnet';
local source = import 'rules-source.libsonnet';

{
  prometheusRules+:: {
    local config = $._config,
    groups+: [
      group {
        rules: [
          rule { expr: render.renameLabel(render.gpuSelector(rule.expr, config.gpuEfficiencySeriesSelector), 'cluster', config.clusterLabel) }
          for rule in group.rules
        ],
      }
      for group in source.recording_groups
    ],
  },
}
