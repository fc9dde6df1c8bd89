"""gpu-efficiency-exporter report: the command (command.py), its queries (queries.py) through a
bounded Prometheus client (prometheus.py), the accounting (ledger.py) and the outputs (formats.py)."""
