"""GPUs in MIG mode through DCGM: their GPU and compute instances (dcgmGetGpuInstanceHierarchy, entities
DCGM_FE_GPU_I and DCGM_FE_GPU_CI), each GPU instance exported as a device of its own with its
profiling fields (as dcgm-exporter reads them), and the Xid watch that includes the instances, where
DCGM stores the Xids the driver attributes to one. See docs/dcgm.md, MIG.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from gpueff.backends.dcgm.decode import Decoder
from gpueff.backends.dcgm.session import DcgmSession, Entity, MigEntity, Watch
from gpueff.sample import DeviceInfo

UUID_ID = 54  # DCGM_FI_DEV_GPU_UUID (DCGM_FI_DEV_UUID before 4.6): on a GPU instance, its MIG device's UUID
NAME_ID = 50  # DCGM_FI_DEV_GPU_NAME (DCGM_FI_DEV_NAME before 4.6): on a GPU instance, its profile name ("1g.10gb", DcgmCacheManager.cpp)


class LogOnce(Protocol):
    def __call__(self, key: str, level: int, message: str, *args: Any, extra: Mapping[str, Any] | None = None) -> None: ...


def hierarchy(session: DcgmSession, log_once: LogOnce) -> list[MigEntity]:
    """Every GPU and compute instance; none where DCGM cannot list them (logged once)."""
    try:
        return session.mig_entities()
    except session.error as error:
        log_once("mig-hierarchy", logging.WARNING, "cannot list DCGM's MIG instances (%s): MIG GPUs' instances are not exported", session.error_name(error))
        return []


def instance_devices(session: DcgmSession, instances: list[MigEntity], parents: dict[int, DeviceInfo], decode: Decoder, log_once: LogOnce) -> list[tuple[MigEntity, DeviceInfo]]:
    """The GPU instances among ``instances`` as devices, under their MIG UUIDs (field 54, read once), named
    as NVML names a MIG device: "<GPU name> MIG <profile>" (field 50; dcgm-exporter's GPU_I_PROFILE)."""
    gpu_instances = sorted((each for each in instances if each.entity[0] == session.bindings.fields.DCGM_FE_GPU_I), key=lambda each: each.entity)
    uuids: dict[Entity, str] = {}
    profiles: dict[Entity, str] = {}
    if gpu_instances:
        pairs = session.pairs([each.entity for each in gpu_instances])
        try:
            uuids = session.strings(pairs, UUID_ID, decode)
        except session.error as error:
            log_once("mig-uuids", logging.WARNING, "cannot read the MIG devices' UUIDs (%s): GPU instances are named <GPU uuid>/gi<n>", session.error_name(error))
        try:
            profiles = session.strings(pairs, NAME_ID, decode)
        except session.error as error:
            log_once("mig-profiles", logging.WARNING, "cannot read the MIG profiles' names (%s): GPU instances are named by their slices", session.error_name(error))
    out = []
    for each in gpu_instances:
        parent = parents[each.gpu_id]
        info = dataclasses.replace(
            parent,
            uuid=uuids.get(each.entity) or f"{parent.uuid}/gi{each.instance_id}",
            name=f"{parent.name} MIG {profiles.get(each.entity) or f'{each.slices}g'}",
            power_limit_watts=None,  # power belongs to the whole GPU
            parent_uuid=parent.uuid,
            gpu_instance_id=each.instance_id,
        )
        out.append((each, info))
    return out


def watch_xids(session: DcgmSession, gpus_group: Any, gpus: list[Entity], instances: list[MigEntity], field_ids: list[int], interval: float, log_once: LogOnce) -> Watch:
    """Watch the Xid field on the GPUs and their instances; a refusal on the instances keeps the GPUs' watch."""
    if instances:
        try:
            group = session.group(gpus + [each.entity for each in instances], "xid")
            try:
                return session.watch(group, field_ids, interval, "xid")
            except session.error:
                session.drop_group(group)
                raise
        except session.error as error:
            log_once("xid-instances", logging.WARNING, "cannot watch Xids on the MIG instances (%s): Xids the driver attributes to an instance are not counted", session.error_name(error))
    return session.watch(gpus_group, field_ids, interval, "xid")
