"""Live GPUs through NVML: the backend, GPM (its metric table and the sample pairs), Xid events."""
