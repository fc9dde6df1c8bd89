"""Owners declared for replayed GPUs (gpueff/trace_owners.py) as attribution finds real ones: a
pod as the kubelet would assign the GPU and its process's cgroup would name it, a Slurm job as its
cgroup names it, a bare host's user by uid (and process name, as ``process_names`` has it). The
declared processes' identities come from the declaration only, never from /proc."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpueff.attribution.holders import Holder, ProcessIdentity
from gpueff.attribution.kubernetes.owners import GpuOwners, PodOwner
from gpueff.attribution.slurm import SlurmJob
from gpueff.sample import GpuSample
from gpueff.trace_owners import DeclaredOwner


def identity(owner: DeclaredOwner, names: bool = True) -> ProcessIdentity:
    name = owner.process if names else ""
    if owner.kind == "pod":
        return ProcessIdentity(Holder("pod", owner.pod_uid), name=name)
    if owner.kind == "slurm_job":
        return ProcessIdentity(Holder("slurm_job", owner.job_id), SlurmJob(owner.job_id, user_id=owner.user_id), owner.user_id, name)
    return ProcessIdentity(Holder("process", owner.process, owner.user_id) if names else Holder("user", "", owner.user_id), user_id=owner.user_id, name=name)


def declared_identities(samples: Iterable[GpuSample], declared: Mapping[str, DeclaredOwner], names: bool = True) -> dict[int, ProcessIdentity]:
    """PID -> identity for the processes of the GPUs whose owner is declared."""
    found: dict[int, ProcessIdentity] = {}
    for sample in samples:
        owner = declared.get(sample.device.uuid)
        if owner is not None:
            for process in sample.processes or ():
                found[process.pid] = identity(owner, names)
    return found


def declared_pods(declared: Mapping[str, DeclaredOwner]) -> dict[str, GpuOwners]:
    """GPU UUID -> the container a declared pod holds it with, as the kubelet would assign it."""
    return {uuid: GpuOwners(pods=(PodOwner(owner.namespace, owner.pod, owner.container),)) for uuid, owner in declared.items() if owner.kind == "pod"}
