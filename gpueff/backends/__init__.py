"""Interchangeable sources of GpuSamples: NVML/GPM (live GPUs) and replay (recorded traces)."""
