// The Grafana dashboards: dashboards/*.json here, the one committed copy (written by
// dashboards/build.py), with _config's dashboard settings applied: title prefix, uids (and the links
// between the dashboards), tags, refresh, timezone, cluster label and GPU selector.
local render = import 'lib/render.libsonnet';

local shipped = {
  'gpu-efficiency-fleet.json': import 'dashboards/gpu-efficiency-fleet.json',
  'gpu-efficiency-gpu-detail.json': import 'dashboards/gpu-efficiency-gpu-detail.json',
  'gpu-efficiency-app-throughput.json': import 'dashboards/gpu-efficiency-app-throughput.json',
};
// The prefix of the shipped titles (dashboards/build.py), replaced by _config.dashboardNamePrefix.
local shippedPrefix = 'GPU efficiency / ';
// The fields that hold PromQL, legends and data links: the cluster label is renamed there only.
local queryFields = ['expr', 'query', 'definition', 'legendFormat', 'url'];

// Every query of the exporter's series selects GPUs through the Cluster and Job variables, in this
// order (dashboards/build.py, NODE_SEL; tests/deploy/test_dashboards.py checks it); the Cluster and Job
// variables' own queries are the two others. The selector goes in front of each.
local withSelector(text, selector) =
  render.replaceAll(text, [
    ['cluster=~"$cluster", job=~"$job"', selector + ', cluster=~"$cluster", job=~"$job"'],
    ['gpueff_gpu_up{cluster=~"$cluster"}', 'gpueff_gpu_up{' + selector + ', cluster=~"$cluster"}'],
    ['label_values(gpueff_gpu_up, cluster)', 'label_values(gpueff_gpu_up{' + selector + '}, cluster)'],
  ]);

{
  grafanaDashboards+:: {
    local config = $._config,
    local uids = config.dashboardUIDs,
    local links(text) = render.replaceAll(text, [
      ['/d/' + shipped[name].uid + '/', '/d/' + uids[name] + '/']
      for name in std.objectFields(shipped)
      if uids[name] != shipped[name].uid
    ]),
    local queries(dashboard) =
      local selected = if config.gpuEfficiencyDashboardSelector == '' then dashboard else render.mapStrings(dashboard, function(text) withSelector(text, config.gpuEfficiencyDashboardSelector), queryFields);
      if config.clusterLabel == 'cluster' then selected else render.mapStrings(selected, function(text) render.renameLabel(text, 'cluster', config.clusterLabel), queryFields),
    [name]:
      local dashboard = shipped[name];
      assert std.startsWith(dashboard.title, shippedPrefix) : '%s: its title does not begin with %s' % [name, shippedPrefix];
      assert std.objectHas(uids, name) : '_config.dashboardUIDs has no uid for %s' % name;
      render.mapStrings(queries(dashboard), links, ['url']) {
        uid: uids[name],
        title: config.dashboardNamePrefix + dashboard.title[std.length(shippedPrefix):],
        tags: config.dashboardTags,
        links: [link { tags: config.dashboardTags } for link in dashboard.links],
        refresh: config.dashboardRefresh,
        timezone: config.dashboardTimezone,
      }
    for name in std.objectFields(shipped)
  },
}
