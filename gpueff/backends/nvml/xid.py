"""Critical Xid errors from NVML's event API, counted per GPU on a thread of their own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from gpueff.backends.base import binding_text
from gpueff.logs import fields, gpu_fields
from gpueff.sample import DeviceInfo

log = logging.getLogger(__name__)

LogOnce = Callable[..., None]  # Backend.log_once(key, level, message, *args)

# How long one nvmlEventSetWait may block. With NVML open and no polls the daemon spent 0.34 ms of
# CPU a second at a 500 ms wait (H100, driver 580.159.04: evidence/2026-11-25-h100/poll-cost-driver),
# ~170 µs a return of this wait; fewer returns, less of it.
# stop() waits for the wait in flight to end (the event set must not be freed under it), so this
# also bounds how long a re-initialisation holds its poll: 2 s, under the 5 s default stale_after
# at 1 s polls.
WAIT_MS = 2000
STOP_JOIN_SECONDS = WAIT_MS / 1000 + 1.0  # the wait in flight, and a margin for a busy machine


class XidWatcher:
    """``start`` registers the GPUs and starts the thread; ``counts`` is what each GPU saw since the daemon started."""

    def __init__(self, nvml: ModuleType, log_once: LogOnce) -> None:
        self.nvml = nvml
        self.log_once = log_once
        self._counts: dict[str, dict[int, int]] = {}  # uuid -> xid -> count
        self._last: dict[str, int] = {}  # uuid -> the most recent xid
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def counts(self, uuid: str) -> dict[int, int]:
        with self._lock:
            return dict(self._counts.get(uuid, {}))

    def last(self, uuid: str) -> int | None:
        with self._lock:
            return self._last.get(uuid)

    def start(self, gpus: Iterable[tuple[DeviceInfo, Any]]) -> None:
        """Watch these (device, handle) pairs: whole GPUs only, a MIG device's Xids arrive on its GPU."""
        nvml = self.nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as error:
            self.log_once("xid-create", logging.WARNING, "cannot watch Xid errors (%s): gpueff_xid_errors_total is not exported", error)
            return
        for info, handle in gpus:
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
                with self._lock:
                    self._counts.setdefault(info.uuid, {})
            except nvml.NVMLError as error:
                self.log_once(f"xid-{info.uuid}", logging.WARNING, "GPU %d: cannot watch Xid errors (%s)", info.index, error, extra=gpu_fields(info.index, info.uuid))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(event_set, self._stop), name="xid-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_JOIN_SECONDS)
            self._thread = None

    def _watch(self, event_set: Any, stop: threading.Event) -> None:
        nvml = self.nvml
        try:
            while not stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait(event_set, WAIT_MS)
                except nvml.NVMLError as error:
                    if getattr(error, "value", None) == nvml.NVML_ERROR_TIMEOUT:
                        continue
                    log.warning("Xid event watch stopped: %s", error)
                    return
                if data.eventType != nvml.nvmlEventTypeXidCriticalError:
                    continue
                try:
                    uuid = binding_text(nvml.nvmlDeviceGetUUID, data.device)
                except nvml.NVMLError:
                    continue
                with self._lock:
                    counts = self._counts.setdefault(uuid, {})
                    counts[int(data.eventData)] = counts.get(int(data.eventData), 0) + 1
                    self._last[uuid] = int(data.eventData)
                log.warning("Xid %d on GPU %s", data.eventData, uuid, extra=fields(uuid=uuid, xid=int(data.eventData)))
        finally:
            try:
                nvml.nvmlEventSetFree(event_set)
            except nvml.NVMLError:
                pass
