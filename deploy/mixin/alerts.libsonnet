// The recording rules and alerts, from rules.libsonnet (generated from
// deploy/prometheus/rules-source.yml), with _config's selector and runbook base filled in.
local generated = import 'rules.libsonnet';

// Every string inside ``value`` with each [placeholder, text] pair of ``pairs`` replaced.
local fill(value, pairs) =
  if std.isString(value) then std.foldl(function(text, pair) std.strReplace(text, pair[0], pair[1]), pairs, value)
  else if std.isArray(value) then [fill(item, pairs) for item in value]
  else if std.isObject(value) then { [key]: fill(value[key], pairs) for key in std.objectFields(value) }
  else value;

{
  prometheusRules+:: {
    groups+: generated.prometheusRules.groups,
  },
  prometheusAlerts+:: {
    groups+: fill(generated.prometheusAlerts.groups, [
      ['$job_selector', $._config.gpuEfficiencyExporterSelector],
      ['$runbook_base_url', $._config.runbookURLBase],
    ]),
  },
}
