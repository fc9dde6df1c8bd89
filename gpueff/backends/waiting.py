"""``--wait-for-driver``: start serving before the NVIDIA driver is there, and pick the GPUs up when it is.

On a Kubernetes GPU node the exporter can start before the driver (the GPU operator installs it in
a container of its own). Without this flag a missing driver stops the daemon with a clear error;
with it, the daemon serves its own metrics and no GPU, and tries to start the real backend again
on the poller's thread, backing off from 1 s to 30 s, until it works.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gpueff.backends.backoff import Backoff
from gpueff.backends.base import Backend, BackendUnavailable, CollectSettings
from gpueff.logs import fields
from gpueff.sample import DeviceInfo, GpuSample

log = logging.getLogger(__name__)

RETRY_BACKOFF = (1.0, 30.0)  # first and largest wait between tries


class WaitingBackend(Backend):
    def __init__(self, make: Callable[[], Backend], clock: Callable[[], float] = time.monotonic) -> None:
        self._inner: Backend | None = None
        super().__init__()
        self.make = make
        self.clock = clock
        self._backoff = Backoff(*RETRY_BACKOFF)
        self._next_try = 0.0
        self._last_reason = ""
        self._settings: CollectSettings | None = None  # handed to the backend once it starts

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._inner.name if self._inner is not None else "waiting"

    @property
    def replayed(self) -> bool:  # type: ignore[override]
        return self._inner is not None and self._inner.replayed

    @property
    def errors_total(self) -> int:
        return self._own_errors + (self._inner.errors_total if self._inner is not None else 0)

    @errors_total.setter
    def errors_total(self, value: int) -> None:
        self._own_errors = value

    @property
    def waiting(self) -> bool:  # type: ignore[override]
        return self._inner is None

    def start(self) -> list[DeviceInfo]:
        return self._try()

    def _try(self) -> list[DeviceInfo]:
        backend = self.make()
        try:
            devices = backend.start()
        except BackendUnavailable as error:
            reason = str(error)
            if reason != self._last_reason:
                log.warning("no GPU backend can start yet, waiting for the NVIDIA driver (--wait-for-driver): %s", reason)
                self._last_reason = reason
            self._next_try = self.clock() + self._backoff.wait
            self._backoff.grow()
            return []
        self._inner = backend
        if self._settings is not None:
            backend.configure(self._settings)
        if self._last_reason:
            log.info("the %s backend started: reading %d GPU(s)", backend.name, len(devices), extra=fields(backend=backend.name, gpus=len(devices)))
        return devices

    def collect(self) -> list[GpuSample]:
        if self._inner is None and (self.clock() < self._next_try or not self._try()):
            return []
        if self._inner is None:
            return []
        return self._inner.collect()

    def configure(self, settings: CollectSettings) -> None:
        super().configure(settings)
        self._settings = settings
        if self._inner is not None:
            self._inner.configure(settings)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
