"""Pod attribution run by the poller on its own cadence (``kubernetes.refresh_interval``).

Each refresh asks the kubelet which containers hold which GPUs and, with
``process_attribution``, reads the cgroup of every GPU compute process. Between refreshes the last
answer is reused; a scrape never triggers a refresh. Problems (no socket, no grpcio, a failing
call) are logged once per kind and leave the GPUs without pod labels; nothing raises.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from exporter.config import KubernetesConfig
from exporter.kubernetes.cgroup import process_owner
from exporter.kubernetes.owners import GpuOwners, PodOwner, ProcessOwner
from exporter.sample import GpuSample

log = logging.getLogger(__name__)


class Attributor:
    def __init__(self) -> None:
        self._settings: KubernetesConfig | None = None
        self._client: Any = None  # a PodResourcesClient while enabled
        self._next_refresh = float("-inf")
        self._pods: dict[str, tuple[PodOwner, ...]] = {}
        self._processes: dict[str, tuple[tuple[ProcessOwner, int], ...]] = {}
        self._problem: str | None = None  # the kind of the last logged problem; None while it works

    def owners(self, settings: KubernetesConfig, samples: Iterable[GpuSample], now: float) -> dict[str, GpuOwners]:
        """GPU UUID -> attribution, refreshed when due. Empty when attribution is disabled."""
        if settings != self._settings:
            self._reconfigure(settings)
        if not settings.enabled:
            return {}
        samples = list(samples)
        if now >= self._next_refresh:
            self._next_refresh = now + settings.refresh_interval
            self._refresh_pods(settings)
            if settings.process_attribution:
                self._refresh_processes(settings, samples)
        return {
            sample.device.uuid: GpuOwners(self._pods.get(sample.device.uuid, ()), self._processes.get(sample.device.uuid, ()))
            for sample in samples
            if sample.device.uuid in self._pods or sample.device.uuid in self._processes
        }

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _reconfigure(self, settings: KubernetesConfig) -> None:
        self.close()
        self._settings = settings
        self._next_refresh = float("-inf")
        self._pods, self._processes = {}, {}
        self._problem = None

    def _report(self, kind: str, message: str, *args: Any) -> None:
        """Log a problem once until attribution works again or the problem changes."""
        if kind != self._problem:
            log.warning(message, *args)
            self._problem = kind

    def _refresh_pods(self, settings: KubernetesConfig) -> None:
        socket_path = settings.pod_resources_socket
        if not os.path.exists(socket_path):
            self._pods = {}
            self._report("missing", "kubernetes: the kubelet pod-resources socket %s does not exist (mount /var/lib/kubelet/pod-resources into the pod): GPU series carry no pod labels until it appears", socket_path)
            return
        try:
            from exporter.kubernetes.podresources import PodResourcesClient, PodResourcesError, gpu_owners
        except ImportError as error:
            self._pods = {}
            self._report("import", "kubernetes: pod attribution needs grpcio and protobuf (pip install 'gpu-efficiency-exporter[kubernetes]'): %s; GPU series carry no pod labels", error)
            return
        if self._client is None:
            self._client = PodResourcesClient(socket_path, settings.timeout, settings.max_message_bytes)
        try:
            response = self._client.list()
        except PodResourcesError as error:
            self._pods = {}
            self._report(f"call:{error.code}", "kubernetes: %s; GPU series carry no pod labels until it works", error)
            return
        self._pods = gpu_owners(response, settings.resource_names)
        if self._problem is not None:
            log.info("kubernetes: pod attribution works again (%d GPU(s) assigned to pods)", len(self._pods))
            self._problem = None

    def _refresh_processes(self, settings: KubernetesConfig, samples: list[GpuSample]) -> None:
        proc_root = Path(settings.proc_root)
        found: dict[str, tuple[tuple[ProcessOwner, int], ...]] = {}
        for sample in samples:
            counts: dict[ProcessOwner, int] = {}
            for process in sample.processes or ():
                owner = process_owner(process.pid, proc_root)
                if owner is not None:
                    counts[owner] = counts.get(owner, 0) + 1
            if counts:
                found[sample.device.uuid] = tuple(sorted(counts.items()))
        self._processes = found
