"""The attribution doctor: for every GPU, which path found its owner, and whether a series names it
or, where none does (or only a fallback found it), the exact reason (gpueff/attribution/reasons.py).

Paths, tried in order: the kubelet's assignment of the GPU to a container (``kubelet``, ``dra``);
the replay's declared owners (``demo``); a GPU process's cgroup naming its pod (``pod_cgroup``) or
Slurm job (``slurm_cgroup``); the process itself, its Unix user and name (``process``); else ``none``. The reason says what
kept the expected path from naming it: the kubelet's socket or call, device ids it cannot read, a
pod without a GPU request, PIDs not the host's, or the switch (sharing, process attribution) that
is off. Each GPU is judged from its own processes and the kubelet's answer only: nothing another
tenant does on another GPU changes it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpueff.attribution.holders import HolderResolver, ProcessIdentity
from gpueff.attribution.kubernetes.deviceids import KubeletView
from gpueff.attribution.kubernetes.owners import GpuOwners
from gpueff.sample import GpuSample

VISIBILITY_PROBES = 4  # processes of a GPU looked up in proc_root before its PIDs are called not the host's
BARE_HOST = frozenset({"process", "user"})  # holders of a process in no pod and no Slurm job: its Unix user (and name)


@dataclass(frozen=True, slots=True)
class Attribution:
    path: str  # one of reasons.PATHS
    reason: str  # one of reasons.REASONS


@dataclass(frozen=True, slots=True)
class Switches:
    """What the config turns on that names owners on series."""

    sharing: bool = False  # sharing.enabled: pods, Slurm jobs and processes as holders
    process_attribution: bool = False  # kubernetes.process_attribution: gpueff_pod_compute_processes


class Doctor:
    """Diagnoses every GPU once per poll. Where the fair split is off it identifies the GPUs'
    processes itself (their cgroups and names, read once per PID, like the split's)."""

    def __init__(self, proc_root: Path) -> None:
        self.proc_root = proc_root
        self._resolver = HolderResolver(proc_root)

    def identities(self, samples: Iterable[GpuSample]) -> dict[int, ProcessIdentity]:
        """PID -> identity for the processes the samples list (read once per PID, as the split's)."""
        return self._resolver.resolve((process.pid, process.name) for sample in samples for process in sample.processes or ())

    def diagnose(
        self,
        samples: Iterable[GpuSample],
        owners: Mapping[str, GpuOwners],
        kubelet: KubeletView | None,
        switches: Switches,
        identities: Mapping[int, ProcessIdentity] | None = None,
        declared: Collection[str] = (),
    ) -> dict[str, Attribution]:
        """GPU UUID -> its attribution. ``kubelet``: None while Kubernetes attribution is off;
        ``identities``: the fair split's, where it runs; ``declared``: the GPUs a replay names the owner of."""
        samples = list(samples)
        if identities is None:
            identities = self.identities(samples)
        return {sample.device.uuid: self._one(sample, owners.get(sample.device.uuid), kubelet, switches, identities, declared) for sample in samples}

    def _one(self, sample: GpuSample, owners: GpuOwners | None, kubelet: KubeletView | None, switches: Switches, identities: Mapping[int, ProcessIdentity], declared: Collection[str]) -> Attribution:
        device = sample.device
        if owners is not None and owners.pods and kubelet is not None:
            return Attribution("dra" if device.uuid in kubelet.findings.dra_uuids else "kubelet", "ok")
        if device.uuid in declared:
            return Attribution("demo", "ok")
        kube = None
        if kubelet is not None:
            kube = kubelet.problem or kubelet.findings.by_uuid.get(device.uuid) or (kubelet.findings.by_index.get(device.index) if not device.parent_uuid else None)
        processes = sample.processes
        if processes is None:
            return Attribution("none", kube or "processes_not_listed")
        if not processes:
            return Attribution("none", kube or "no_process")
        kinds = {identities[process.pid].holder.kind for process in processes if process.pid in identities}
        if "pod" in kinds or (owners is not None and owners.processes):
            if kubelet is not None:
                return Attribution("pod_cgroup", kube or ("dra_unmapped" if kubelet.findings.dra_unmapped else "no_gpu_limit"))
            return Attribution("pod_cgroup", "ok" if switches.sharing or switches.process_attribution else "attribution_off")
        if "slurm_job" in kinds:
            return Attribution("slurm_cgroup", "ok" if switches.sharing else "attribution_off")
        bare = bool(kinds & BARE_HOST)
        if not any((self.proc_root / str(process.pid)).exists() for process in processes[:VISIBILITY_PROBES]):
            return Attribution("process" if bare else "none", "pids_not_visible")
        if bare:
            if kubelet is not None:
                return Attribution("process", kube or "outside_pods_and_jobs")
            return Attribution("process", "ok" if switches.sharing else "attribution_off")
        return Attribution("none", kube or "pids_not_visible")
