"""Pod attribution: which containers hold which GPUs and, with ``process_attribution``, which
container each GPU process runs in.

The kubelet's pod-resources List call runs on its own thread every ``refresh_interval``
(``PodRefresher``); the poller only reads the latest answer, so a slow or hung kubelet never delays
a GPU reading, and a scrape never triggers a call. One failed call does not empty the pod map: the
last good assignment is kept for KEEP_INTERVALS x ``refresh_interval`` (30 s by default), so a
kubelet restart does not strip the pod labels off every GPU series (changing their identity and
breaking rate()); after that the GPUs carry no pod labels until the kubelet answers again. The first
call after start or a reload is waited for, at most FIRST_CALL_WAIT seconds, so the first poll is
already labelled. Process attribution reads /proc on the poll thread at the same cadence (local and
cheap). Problems are logged once per kind; nothing raises.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from gpueff.attribution.cgroup import process_owner
from gpueff.attribution.kubernetes.apiserver import ApiError, ApiServer
from gpueff.attribution.kubernetes.deviceids import KubeletView, findings
from gpueff.attribution.kubernetes.dra import DeviceKey, ResourceSlices
from gpueff.attribution.kubernetes.owners import AttributionHealth, GpuOwners, PodOwner, ProcessOwner
from gpueff.attribution.kubernetes.podlabels import PODS_PATH, LabelPairs, pod_labels
from gpueff.attribution.kubernetes.settings import KubernetesConfig
from gpueff.logs import one_line
from gpueff.sample import GpuSample

log = logging.getLogger(__name__)

_T = TypeVar("_T")
KEEP_INTERVALS = 3  # refresh intervals the last good pod assignment outlives failed calls
FIRST_CALL_WAIT = 1.0  # seconds a (re)configured attribution waits for its first List answer


class PodRefresher:
    """Asks the kubelet every ``refresh_interval`` on its own thread and keeps the last good answer."""

    def __init__(self, settings: KubernetesConfig, clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.wall_clock = wall_clock
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[PodOwner, ...]] = {}
        self._success: float | None = None  # ``clock`` time of the last answer
        self._last_success_wall: float | None = None
        self._up = False
        self._errors = 0
        self._refused = 0  # containers and device ids left out of List answers (podresources.py)
        self._refusals_logged: set[str] = set()  # kinds of refusal logged (each once)
        self._expired_logged = False
        self._problem: str | None = None  # the kind of the last logged problem; None while it works
        self._view = KubeletView("kubelet_unreachable")  # for the attribution doctor; no call made yet
        self._client: Any = None  # a PodResourcesClient once the socket exists
        self._api: ApiServer | None = None  # for kubernetes.dra_drivers and pod_label_keys
        self._slices: ResourceSlices | None = None
        self._api_problems: dict[str, str] = {}  # what cannot be read -> why, as last logged
        self._dra: dict[DeviceKey, str] = {}
        self._labels: dict[tuple[str, str], LabelPairs] = {}
        self._stop = threading.Event()
        self._answered = threading.Event()  # the first call has finished, well or not
        self._thread = threading.Thread(target=self._run, name="kubelet-pod-resources", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._answered.wait(min(FIRST_CALL_WAIT, self.settings.timeout + 0.1))

    def stop(self) -> None:
        """The thread ends after its current call (which has its own deadline) and closes the
        channel itself: a reload never waits on the kubelet."""
        self._stop.set()

    def pods(self, now: float) -> dict[str, tuple[PodOwner, ...]]:
        """GPU UUID -> containers: the last good answer while it is at most KEEP_INTERVALS old."""
        with self._lock:
            success, pods = self._success, self._pods
        if success is not None and now - success <= KEEP_INTERVALS * self.settings.refresh_interval:
            return pods
        if success is not None and not self._expired_logged:
            self._expired_logged = True
            log.warning("kubernetes: no List answer for %d refresh intervals: GPU series carry no pod labels until the kubelet answers", KEEP_INTERVALS)
        return {}

    def health(self) -> AttributionHealth:
        with self._lock:
            return AttributionHealth(self._up, self._errors, self._last_success_wall, self._refused)

    def view(self) -> KubeletView:
        with self._lock:
            return self._view

    def refresh(self) -> None:
        """One List call; on failure the last good answer stays (see ``pods``)."""
        settings = self.settings
        socket_path = settings.pod_resources_socket
        if not os.path.exists(socket_path):
            self._failed("missing", "kubernetes: the kubelet pod-resources socket %s does not exist (mount /var/lib/kubelet/pod-resources into the pod)", socket_path)
            return
        try:
            from gpueff.attribution.kubernetes.podresources import PodResourcesClient, PodResourcesError, gpu_owners
        except ImportError as error:
            self._failed("import", "kubernetes: pod attribution needs grpcio and protobuf (pip install 'gpu-efficiency-exporter[kubernetes]'): %s", error)
            return
        if self._client is None:
            self._client = PodResourcesClient(socket_path, settings.timeout, settings.max_message_bytes)
        try:
            response = self._client.list()
        except PodResourcesError as error:
            self._failed(f"call:{error.code}", "kubernetes: %s", error)
            return
        dra = self._dra_devices()
        pods, refused = gpu_owners(response, settings.resource_names, dra)
        found = findings(response, settings.resource_names, dra, settings.dra_drivers)
        for kind, why in refused.first.items():
            if kind not in self._refusals_logged:
                self._refusals_logged.add(kind)
                log.warning("kubernetes: left out of the kubelet's List answer: %s (%d such in this answer; counted in gpueff_kubernetes_attribution_refused_total, logged once)", why, refused.counts[kind])
        if settings.pod_label_keys:
            labels = self._pod_labels()
            pods = {uuid: tuple(dataclasses.replace(owner, labels=labels.get((owner.namespace, owner.pod), ())) for owner in owners) for uuid, owners in pods.items()}
        with self._lock:
            self._pods, self._success, self._last_success_wall, self._up = pods, self.clock(), self.wall_clock(), True
            self._refused += refused.total
            self._view = KubeletView(None, found)
        self._expired_logged = False
        if self._problem is not None:
            log.info("kubernetes: pod attribution works again (%d GPU(s) assigned to pods)", len(pods))
            self._problem = None

    def _dra_devices(self) -> dict[DeviceKey, str]:
        """This node's DRA GPUs from its ResourceSlices; the last good answer when a read fails."""
        if not self.settings.dra_drivers:
            return {}
        def read(api: ApiServer, node: str) -> dict[DeviceKey, str]:
            if self._slices is None:  # kept: it remembers which resource.k8s.io version answers
                self._slices = ResourceSlices(api, node, self.settings.dra_drivers)
            return self._slices.read()

        self._dra = self._from_api("DRA GPUs cannot be attributed", read, self._dra)
        return self._dra

    def _pod_labels(self) -> dict[tuple[str, str], LabelPairs]:
        """The allow-listed labels of this node's pods; the last good answer when a read fails."""
        self._labels = self._from_api("pod labels cannot be read", lambda api, node: pod_labels(api.get(PODS_PATH, fieldSelector=f"spec.nodeName={node}"), self.settings.pod_label_keys), self._labels)
        return self._labels

    def _from_api(self, what: str, read: Callable[[ApiServer, str], _T], last: _T) -> _T:
        """``read`` against the API server for this node, or ``last`` (warned about once per cause)."""
        settings = self.settings
        try:
            node = settings.effective_node_name
            if not node:
                raise ApiError("no node name: set kubernetes.node_name or the NODE_NAME environment variable (the chart sets it)")
            if self._api is None:
                self._api = ApiServer.in_cluster(Path(settings.service_account_dir), settings.timeout, settings.max_message_bytes)
            found = read(self._api, node)
        except ApiError as error:
            if self._api_problems.get(what) != str(error):
                log.warning("kubernetes: %s (%s); the last answer is used", what, error)
                self._api_problems[what] = str(error)
            return last
        if self._api_problems.pop(what, None) is not None:
            log.info("kubernetes: the API server answers again (%s)", what)
        return found

    def _failed(self, kind: str, message: str, *args: Any) -> None:
        with self._lock:
            self._up = False
            self._errors += 1
            kept = self._success is not None
            self._view = dataclasses.replace(self._view, problem="socket_missing" if kind == "missing" else "kubelet_unreachable")
        if kind != self._problem:  # once per kind of problem, not per call
            keeping = f"; the last good assignment is kept for {KEEP_INTERVALS} refresh intervals" if kept else "; GPU series carry no pod labels until it works"
            log.warning(message + keeping, *args)
            self._problem = kind

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception as error:  # a bug must not end attribution
                self._failed("bug", "kubernetes: a pod-resources refresh failed: %s", one_line(error))
            self._answered.set()
            self._stop.wait(self.settings.refresh_interval)
        if self._client is not None:
            self._client.close()
            self._client = None


class Attributor:
    """The poller's side: the pod map read from a PodRefresher, and GPU processes' containers."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.wall_clock = wall_clock
        self._settings: KubernetesConfig | None = None
        self._refresher: PodRefresher | None = None
        self._next_process_refresh = float("-inf")
        self._processes: dict[str, tuple[tuple[ProcessOwner, int], ...]] = {}

    def owners(self, settings: KubernetesConfig, samples: Iterable[GpuSample], now: float, proc_root: Path = Path("/proc")) -> dict[str, GpuOwners]:
        """GPU UUID -> attribution. Empty when attribution is disabled. Never calls the kubelet.
        ``proc_root``: the host's /proc, for process attribution (the config's top-level proc_root)."""
        if settings != self._settings:
            self._reconfigure(settings)
        if self._refresher is None:
            return {}
        samples = list(samples)
        pods = self._refresher.pods(now)
        if settings.process_attribution and now >= self._next_process_refresh:
            self._next_process_refresh = now + settings.refresh_interval
            self._refresh_processes(proc_root, samples)
        return {
            sample.device.uuid: GpuOwners(pods.get(sample.device.uuid, ()), self._processes.get(sample.device.uuid, ()))
            for sample in samples
            if sample.device.uuid in pods or sample.device.uuid in self._processes
        }

    def health(self) -> AttributionHealth | None:
        """None while attribution is disabled."""
        return None if self._refresher is None else self._refresher.health()

    def kubelet(self) -> KubeletView | None:
        """What the attribution doctor reads of the kubelet calls; None while attribution is disabled."""
        return None if self._refresher is None else self._refresher.view()

    def close(self) -> None:
        if self._refresher is not None:
            self._refresher.stop()
            self._refresher = None

    def _reconfigure(self, settings: KubernetesConfig) -> None:
        self.close()
        self._settings = settings
        self._next_process_refresh = float("-inf")
        self._processes = {}
        if settings.enabled:
            self._refresher = PodRefresher(settings, self.clock, self.wall_clock)
            self._refresher.start()

    def _refresh_processes(self, proc_root: Path, samples: list[GpuSample]) -> None:
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
