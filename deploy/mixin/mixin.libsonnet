// The monitoring mixin of gpu-efficiency-exporter, in the form kube-prometheus and other jsonnet
// users import (as node-mixin or kubernetes-mixin): _config, prometheusRules (recording rules),
// prometheusAlerts and grafanaDashboards. Its rules come from the same source as
// deploy/prometheus/gpu-efficiency-rules.yml and dashboards/*.json is the dashboards' one committed
// copy: with the default _config it renders exactly those (tests/deploy/test_mixin.py). Usage: README.md.
(import 'config.libsonnet') +
(import 'rules.libsonnet') +
(import 'alerts.libsonnet') +
(import 'dashboards.libsonnet')
