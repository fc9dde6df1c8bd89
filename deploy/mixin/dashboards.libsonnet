// The Grafana dashboards: dashboards/*.json here, the one committed copy (written by dashboards/build.py), with
// _config.gpuEfficiencyDashboardSelector added to every GPU selector where it is set.
local dashboards = {
  'gpu-efficiency-fleet.json': import 'dashboards/gpu-efficiency-fleet.json',
  'gpu-efficiency-gpu-detail.json': import 'dashboards/gpu-efficiency-gpu-detail.json',
  'gpu-efficiency-app-throughput.json': import 'dashboards/gpu-efficiency-app-throughput.json',
};

// Every query of the exporter's series selects GPUs through the Cluster and Job variables, in this
// order (dashboards/build.py, NODE_SEL; tests/deploy/test_dashboards.py checks it); the Cluster and Job
// variables' own queries are the two others. The selector goes in front of each.
local withSelector(value, selector) =
  if std.isString(value) then
    std.strReplace(
      std.strReplace(
        std.strReplace(value, 'cluster=~"$cluster", job=~"$job"', selector + ', cluster=~"$cluster", job=~"$job"'),
        'gpueff_gpu_up{cluster=~"$cluster"}', 'gpueff_gpu_up{' + selector + ', cluster=~"$cluster"}'
      ),
      'label_values(gpueff_gpu_up, cluster)', 'label_values(gpueff_gpu_up{' + selector + '}, cluster)'
    )
  else if std.isArray(value) then [withSelector(item, selector) for item in value]
  else if std.isObject(value) then { [key]: withSelector(value[key], selector) for key in std.objectFields(value) }
  else value;

{
  grafanaDashboards+:: {
    [name]:
      if $._config.gpuEfficiencyDashboardSelector == '' then dashboards[name]
      else withSelector(dashboards[name], $._config.gpuEfficiencyDashboardSelector)
    for name in std.objectFields(dashboards)
  },
}
