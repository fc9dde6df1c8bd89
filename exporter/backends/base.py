"""The small interface every backend implements."""

from __future__ import annotations

import abc

from exporter.sample import DeviceInfo, GpuSample


class BackendUnavailable(Exception):
    """The backend cannot run on this machine; the message says why and what to do."""


class Backend(abc.ABC):
    name: str = ""
    replayed: bool = False  # True where samples are recorded data, not live readings
    process_utilization: bool = False  # read per-process utilization samples where the backend can (NVML; docs/sharing.md)

    def __init__(self) -> None:
        self.errors_total = 0  # unexpected read failures, for gpueff_collect_errors_total

    @abc.abstractmethod
    def start(self) -> list[DeviceInfo]:
        """Open the source and return its GPUs; raise BackendUnavailable with a clear reason."""

    @abc.abstractmethod
    def collect(self) -> list[GpuSample]:
        """One sample per GPU. A GPU that cannot be read is returned with ``up=False``."""

    def close(self) -> None:  # noqa: B027 (optional: a backend that holds nothing keeps it empty)
        """Release what ``start`` opened."""
