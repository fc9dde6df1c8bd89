"""The small interface every backend implements."""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpueff.sample import DeviceInfo, GpuSample
from gpueff.trace_owners import DeclaredOwner
from gpueff.untrusted import MAX_STRING_BYTES, decode


def text(value: Any) -> str:
    """A string the bindings may hand back as bytes, which need not be UTF-8 (a process names
    itself): decoded without raising and bounded, as ``untrusted.decode`` does."""
    if isinstance(value, (bytes, bytearray)):
        return decode(value)
    return str(value)[:MAX_STRING_BYTES]


def binding_text(function: Callable[..., Any], *args: Any) -> str:
    """``text`` of what a binding returns. pynvml decodes its strings as strict UTF-8 itself and
    raises UnicodeDecodeError on a process name that is not: the raw bytes ride on that error."""
    try:
        return text(function(*args))
    except UnicodeDecodeError as error:
        return text(error.object)


# Every slow reading is a cumulative counter the driver keeps (energy, ECC, violation time, PCIe and
# NVLink replays, remapped rows: exact whenever read, a later read loses nothing) or a state that
# changes rarely (memory temperature, power limit, link width and generation, link states). The
# slow round costs ~11.5 ms of driver CPU per H100 under load (docs/health.md); 30 s is also
# dcgm-exporter's default collection interval (docs/health.md has the sources).
SLOW_INTERVAL = 30.0


class BackendUnavailable(Exception):
    """The backend cannot run on this machine; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class CollectSettings:
    """What the poller tells a backend when it starts and on every reload."""

    collect_interval: float = 1.0
    slow_interval: float = SLOW_INTERVAL  # energy, ECC, remapped rows, memory temperature, costly health readings
    process_utilization: bool = False  # read per-process utilization samples where the backend can (NVML; docs/sharing.md)
    disabled_collectors: tuple[str, ...] = ()  # readings of these collectors need not be read (gpueff/collectors.py)


class Backend(abc.ABC):
    name: str = ""
    replayed: bool = False  # True where samples are recorded data, not live readings
    waiting: bool = False  # True while no GPU source has started yet (--wait-for-driver): not ready
    process_utilization: bool = False  # read per-process utilization samples where the backend can (NVML; docs/sharing.md)

    def __init__(self) -> None:
        self.errors_total = 0  # unexpected read failures, for gpueff_collect_errors_total
        self._logged: set[str] = set()

    def log_once(self, key: str, level: int, message: str, *args: Any, extra: Mapping[str, Any] | None = None) -> None:
        """Log a condition once per ``key`` (a GPU that has no GPM, a field DCGM refuses), not every poll;
        ``extra``: the line's structured keys (``gpueff.logs.gpu_fields``)."""
        if key not in self._logged:
            self._logged.add(key)
            logging.getLogger(type(self).__module__).log(level, message, *args, extra=extra)

    @abc.abstractmethod
    def start(self) -> list[DeviceInfo]:
        """Open the source and return its GPUs; raise BackendUnavailable with a clear reason."""

    @abc.abstractmethod
    def collect(self) -> list[GpuSample]:
        """One sample per GPU. A GPU that cannot be read is returned with ``up=False``."""

    def declared_owners(self) -> Mapping[str, DeclaredOwner]:
        """GPU UUID -> the owner declared for it (a replay's demo owners); real backends declare none."""
        return {}

    def configure(self, settings: CollectSettings) -> None:
        """Take the settings of a start or a reload; the next ``collect`` follows them."""
        self.process_utilization = settings.process_utilization

    def close(self) -> None:  # noqa: B027 (optional: a backend that holds nothing keeps it empty)
        """Release what ``start`` opened."""
