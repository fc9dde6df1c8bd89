"""gpu-efficiency-exporter: a Prometheus exporter that tells how much real work each NVIDIA GPU does."""

__version__ = "0.1.0"
