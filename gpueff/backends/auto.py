"""``--backend auto``: DCGM where it answers with profiling fields, else NVML (with GPM where the GPU has it).

The choice is made once, in ``start``, and logged with the reason; every later call goes to the chosen
backend.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpueff.backends.base import Backend, BackendUnavailable, CollectSettings
from gpueff.backends.dcgm.bindings import bindings_folder
from gpueff.backends.dcgm.settings import DcgmConfig
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.sample import DeviceInfo, GpuSample

if TYPE_CHECKING:
    from gpueff.backends.dcgm.backend import DcgmBackend

log = logging.getLogger(__name__)


def profiling_probe_timeout(collect_interval: float) -> float:
    """How long auto waits for DCGM's first SM activity: it needs two updates of the watch."""
    return min(max(3 * collect_interval, 3.0), 15.0)


class AutoBackend(Backend):
    def __init__(self, make_dcgm: Callable[[], DcgmBackend], make_nvml: Callable[[], NvmlBackend], probe_timeout: float) -> None:
        self._chosen: Backend | None = None
        super().__init__()
        self.make_dcgm = make_dcgm
        self.make_nvml = make_nvml
        self.probe_timeout = probe_timeout
        self._devices: list[DeviceInfo] = []
        self._settings: CollectSettings | None = None  # handed to the chosen backend

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._chosen.name if self._chosen is not None else "auto"

    @property
    def errors_total(self) -> int:
        return self._own_errors + (self._chosen.errors_total if self._chosen is not None else 0)

    @errors_total.setter
    def errors_total(self, value: int) -> None:
        self._own_errors = value

    def start(self) -> list[DeviceInfo]:
        dcgm, dcgm_reason = self._try_dcgm()
        if self._chosen is not None:
            return self._devices
        nvml = self.make_nvml()
        try:
            devices = nvml.start()
        except BackendUnavailable as error:
            if dcgm is None:
                raise BackendUnavailable(f"no live backend works here. DCGM: {dcgm_reason}. NVML: {error}") from None
            log.warning("backend auto: using DCGM WITHOUT profiling metrics: NVML is not usable (%s) and %s", error, dcgm_reason)
            self._choose(dcgm)
            return self._devices
        if dcgm is not None:
            dcgm.close()
        self._choose(nvml)
        gpm = nvml.gpm_gpus
        if len(gpm) == len(devices):
            log.info("backend auto: using NVML with GPM profiling metrics on all %d GPU(s); not using DCGM for profiling: %s", len(devices), dcgm_reason)
        elif gpm:
            log.warning("backend auto: using NVML; GPM profiling metrics on GPU(s) %s only: the others are older than Hopper and need DCGM for SM activity (%s)", gpm, dcgm_reason)
        else:
            log.warning("backend auto: using NVML WITHOUT profiling metrics: no GPU here has GPM (older than Hopper, or the driver is too old) and %s. SM activity, occupancy, tensor and DRAM activity are not exported", dcgm_reason)
        return devices

    def _try_dcgm(self) -> tuple[DcgmBackend | None, str]:
        """Start DCGM and choose it if SM activity answers. Otherwise say why not, and hand back a
        DCGM that runs without profiling (the last resort where NVML fails too)."""
        try:
            dcgm = self.make_dcgm()
            devices = dcgm.start()
        except BackendUnavailable as error:
            return None, f"DCGM is not usable ({error})"
        self._devices = devices
        if dcgm.profiling_answers(self.probe_timeout):
            self._choose(dcgm)
            log.info("backend auto: using DCGM (%s, bindings from %s): profiling fields answer", dcgm.mode, dcgm.bindings.path)
            return dcgm, ""
        return dcgm, f"DCGM runs but gives no profiling fields ({dcgm.profiling_refused or f'no GPU gave SM activity within {self.probe_timeout:.0f}s'})"

    def collect(self) -> list[GpuSample]:
        if self._chosen is None:
            raise RuntimeError("AutoBackend.collect called before start")
        return self._chosen.collect()

    def configure(self, settings: CollectSettings) -> None:
        super().configure(settings)
        self._settings = settings
        if self._chosen is not None:
            self._chosen.configure(settings)

    def _choose(self, backend: Backend) -> None:
        self._chosen = backend
        if self._settings is not None:
            backend.configure(self._settings)

    def close(self) -> None:
        if self._chosen is not None:
            self._chosen.close()


def live_backend(kind: str, dcgm: DcgmConfig, collect_interval: float, slow_interval: float) -> Backend:
    """The backend for ``--backend dcgm`` or ``--backend auto``, from the ``dcgm:`` section and the
    intervals it starts with (flags applied)."""

    def make_dcgm() -> DcgmBackend:
        from gpueff.backends.dcgm.backend import DcgmBackend  # its modules cost 1 MB of RSS: only where DCGM is tried

        return DcgmBackend(dcgm.bindings_path, dcgm.host, collect_interval, slow_interval, multi_pass=dcgm.multi_pass, pause_file=dcgm.pause_file, discover=dcgm.discover)

    def probe_dcgm() -> DcgmBackend:
        if not (dcgm.pause_file and dcgm.host):  # start() refuses that pair before it looks for bindings
            bindings_folder(dcgm.bindings_path)  # no bindings: the same refusal start() gives, without importing DCGM's backend
        return make_dcgm()

    if kind == "dcgm":
        return make_dcgm()
    return AutoBackend(probe_dcgm, lambda: NvmlBackend(slow_interval=slow_interval), profiling_probe_timeout(collect_interval))
