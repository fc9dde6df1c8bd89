"""Stand-ins for what cannot run here, each driven by recorded real data and documented behaviour:
``nvml`` (pynvml over gpu-trace/1 recordings), ``dcgm/`` (DCGM's Python bindings, loaded by path),
``kubelet`` (the pod-resources gRPC API), ``proc`` (a /proc tree of GPU processes), ``apps`` and ``app_servers/`` (inference servers' metrics
pages, recorded from each server's source)."""
