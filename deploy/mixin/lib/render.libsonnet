// What the mixin does to the rules' source (rules-source.libsonnet) and the committed dashboards
// with its _config: the same rendering as deploy/prometheus/build_prometheus_rule.py (and the Helm
// chart's PrometheusRule template) applies to deploy/prometheus/rules-source.yml.
{
  // Every [from, to] pair of ``pairs`` replaced in ``text``, in order.
  replaceAll(text, pairs)::
    std.foldl(function(out, pair) std.strReplace(out, pair[0], pair[1]), pairs, text),

  // ``value`` with ``f`` applied to every string, or only to those under the object fields named in
  // ``fields`` (any depth) where it is given.
  mapStrings(value, f, fields=null, inside=fields == null)::
    if std.isString(value) then (if inside then f(value) else value)
    else if std.isArray(value) then [self.mapStrings(item, f, fields, inside) for item in value]
    else if std.isObject(value) then {
      [key]: $.mapStrings(value[key], f, fields, inside || (fields != null && std.member(fields, key)))
      for key in std.objectFields(value)
    }
    else value,

  // A threshold as PromQL and build_prometheus_rule.py write it: an integer as one, anything else
  // in the fewest digits that read back as the same number (0.7, not 0.69999999999999996).
  number(value)::
    assert std.isNumber(value) : 'a threshold must be a number, got %s' % std.manifestJson(value);
    if value == std.floor(value) && std.abs(value) < 1e15 then std.toString(value)
    else [text for text in [std.format('%.' + digits + 'g', value) for digits in std.range(1, 17)] if std.parseJson(text) == value][0],

  // ``text`` (the _config key ``what``: a regular expression) as the inside of a double-quoted
  // PromQL string, its backslashes and quotes escaped: it can only ever be a regular expression.
  promqlString(text, what)::
    assert std.isString(text) && std.length([c for c in std.stringChars(text) if std.codepoint(c) < 32]) == 0 : '_config.%s: a regular expression on one line, got %s' % [what, std.manifestJson(text)];
    self.replaceAll(text, [['\\', '\\\\'], ['"', '\\"']]),

  // A Prometheus duration such as 10m, 1h30m or 90s: digits and a unit, one or more times.
  isDuration(text)::
    local units = ['ms', 'y', 'w', 'd', 'h', 'm', 's'];
    local parse(rest, digits) =
      if rest == '' then false
      else if std.member('0123456789', rest[0]) then parse(rest[1:], true)
      else if !digits then false
      else
        local unit = [u for u in units if std.startsWith(rest, u)];
        if unit == [] then false
        else local after = rest[std.length(unit[0]):]; after == '' || parse(after, false);
    std.isString(text) && parse(text, false),

  // ``text`` with the label matchers ``selector`` in every gpueff_ selector (the source's
  // $gpu_selector placeholders); the placeholders only, gone, where it is empty.
  gpuSelector(text, selector)::
    self.replaceAll(text, [
      ['{$gpu_selector}', if selector == '' then '' else '{' + selector + '}'],
      ['{$gpu_selector, ', if selector == '' then '{' else '{' + selector + ', '],
    ]),

  // ``text`` with the label name ``from`` renamed ``to``: in PromQL, a legend ({{cluster}}) or a
  // data link (${__field.labels.cluster}), not where it names a dashboard variable ($cluster,
  // var-cluster). Every other ``from`` in the rules' and dashboards' queries is that label's name
  // (tests/deploy/test_mixin.py checks it), so a plain replacement does; std.strReplace is
  // jsonnet's one fast string search.
  renameLabel(text, from, to)::
    local kept = [['$' + from, '$\u0000'], ['var-' + from, 'var-\u0000']];
    if from == to then text
    else $.replaceAll(text, kept + [[from, to]] + [[pair[1], pair[0]] for pair in kept]),

  // One alert of the source with its settings (enabled, threshold, for, severity) and the
  // _config's selectors and runbook base, as build_prometheus_rule.alert_rule() writes it.
  alertRule(rule, settings, config)::
    local has(key) = std.objectHas(settings, key);
    local threshold = if std.objectHas(rule, 'threshold') then $.number(settings.threshold) else null;
    local duration = if has('for') then settings['for'] else '';
    local selectors(text) = $.replaceAll(text, [
      ['$job_selector', config.gpuEfficiencyExporterSelector],
      ['$exempt_namespaces', $.promqlString(config.wasteExemptNamespaces, 'wasteExemptNamespaces')],
      ['$exempt_pods', $.promqlString(config.wasteExemptPods, 'wasteExemptPods')],
    ]);
    local fill(text) = if threshold == null then selectors(text) else std.strReplace(selectors(text), '$threshold', threshold);
    local say(text) = if duration == '' then fill(text) else std.strReplace(fill(text), '$for', duration);
    local query(text) = $.renameLabel($.gpuSelector(text, config.gpuEfficiencySeriesSelector), 'cluster', config.clusterLabel);
    {
      alert: rule.alert,
      expr: query(fill(rule.expr)),
      labels: { severity: settings.severity },
      annotations: {
        summary: say(rule.summary),
        description: say(rule.description),
        runbook_url: config.runbookURLBase + '#' + std.asciiLower(rule.alert),
        [if std.objectHas(rule, 'owner') then 'owner']: rule.owner,
        [if std.objectHas(rule, 'what_to_try') then 'what_to_try']: $.renameLabel(rule.what_to_try, 'cluster', config.clusterLabel),
      },
    } + (if duration == '' then {} else { 'for': duration }),

  // Each alert's settings: the source's defaults under the _config's, checked.
  alertSettings(source, config)::
    local rules = { [rule.alert]: rule for group in source.alert_groups for rule in group.rules };
    local unknown = [name for name in std.objectFields(config.alerts) if !std.objectHas(rules, name)];
    assert unknown == [] : '_config.alerts.%s: no such alert (the alerts are: %s)' % [unknown[0], std.join(', ', std.objectFields(rules))];
    {
      [name]:
        local given = if std.objectHas(config.alerts, name) then config.alerts[name] else {};
        local rule = rules[name];
        local keys = ['enabled', 'for', 'severity'] + (if std.objectHas(rule, 'threshold') then ['threshold'] else []);
        local wrong = [key for key in std.objectFields(given) if !std.member(keys, key)];
        assert wrong == [] : '_config.alerts.%s.%s: not a setting of this alert (it takes %s)' % [name, wrong[0], std.join(', ', keys)];
        assert !std.objectHas(given, 'for') || $.isDuration(given['for']) : '_config.alerts.%s.for: %s is not a duration such as 10m' % [name, std.manifestJson(given['for'])];
        assert !std.objectHas(given, 'severity') || std.isString(given.severity) : '_config.alerts.%s.severity: a string such as warning' % name;
        assert !std.objectHas(given, 'enabled') || std.isBoolean(given.enabled) : '_config.alerts.%s.enabled: true or false' % name;
        { enabled: true } + { [key]: rule[key] for key in keys if std.objectHas(rule, key) } + given
      for name in std.objectFields(rules)
    },
}
