"""``selftest``: planted workloads on a real GPU, checked against the daemon's own readings.

expectations (what each workload must read as) -> checks (readings -> pass/fail) -> table;
workloads and runner drive a real GPU through PyTorch or CuPy, imported only when run.
"""
