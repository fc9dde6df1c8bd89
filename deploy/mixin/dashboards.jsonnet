// mkdir -p dashboards_out && jsonnet -m dashboards_out dashboards.jsonnet: one file per dashboard.
local dashboards = (import 'mixin.libsonnet').grafanaDashboards;

{
  [name]: dashboards[name]
  for name in std.objectFields(dashboards)
}
