"""The house's own exporter-toolkit: a generic HTTP/1.1 server for an exporter. The event loop (one
thread, one selector, bounded connections, TLS), strict request heads, ``--web.config.file`` (TLS,
basic auth, headers in the Prometheus exporter-toolkit format) and the throttled basic-auth checks.
It knows nothing of GPUs, metrics or snapshots: it imports only itself and the engine below it
(config, untrusted, logs); the product's web pages (gpueff/web/) sit on top of it."""
