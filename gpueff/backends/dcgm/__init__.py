"""Live GPUs through DCGM: the backend and its parts (bindings, session, field table, resolve, decode,
freshness, profiling watches, Xid events). See docs/dcgm.md."""
