"""What a kubelet List answer says about GPUs it names in a way pod attribution cannot use: device
ids that are GPU indices, or UUIDs with a suffix other than a time-slicing replica's ``::N``, under
a GPU resource; GPU UUIDs under a resource name ``kubernetes.resource_names`` does not match; DRA
claims of a GPU driver whose devices have no known UUID. The attribution doctor turns these into a
GPU's reason (gpueff/attribution/doctor.py). Reads the answer's fields only (no grpc), and keeps
at most MAX_FINDINGS of each kind, whatever the answer holds."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpueff.attribution.kubernetes.dra import DeviceKey

MAX_FINDINGS = 256
_UUID = re.compile(r"(?:GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
GPU_DRIVER_HINT = "gpu"  # a DRA driver with this in its name (gpu.nvidia.com) allocates GPUs


@dataclass(frozen=True)
class DeviceIdFindings:
    by_uuid: Mapping[str, str] = field(default_factory=dict)  # GPU UUID -> reason (replica_ids, resource_not_matched)
    by_index: Mapping[int, str] = field(default_factory=dict)  # GPU index -> index_ids
    dra_uuids: frozenset[str] = frozenset()  # GPUs the answer assigns through DRA
    dra_unmapped: bool = False  # a GPU driver's DRA claim names a device of no known UUID


def findings(response: Any, resource_patterns: Iterable[str], dra_devices: Mapping[DeviceKey, str], dra_drivers: Iterable[str]) -> DeviceIdFindings:
    patterns, drivers = tuple(resource_patterns), frozenset(dra_drivers)
    by_uuid: dict[str, str] = {}
    by_index: dict[int, str] = {}
    dra_uuids: set[str] = set()
    unmapped = False
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                matched = any(fnmatch.fnmatchcase(devices.resource_name, pattern) for pattern in patterns)
                for device_id in devices.device_ids:
                    _note(device_id.split("::", 1)[0], matched, by_uuid, by_index)
            for claim in container.dynamic_resources:
                for device in claim.claim_resources:
                    uuid = dra_devices.get((device.driver_name, device.pool_name, device.device_name))
                    if uuid is not None:
                        if len(dra_uuids) < MAX_FINDINGS:
                            dra_uuids.add(uuid)
                    elif device.driver_name in drivers or GPU_DRIVER_HINT in device.driver_name:
                        unmapped = True
    return DeviceIdFindings(by_uuid, by_index, frozenset(dra_uuids), unmapped)


def _note(device_id: str, matched: bool, by_uuid: dict[str, str], by_index: dict[int, str]) -> None:
    """One device id (its ``::N`` replica suffix cut): a finding where attribution cannot read it."""
    uuid = _UUID.match(device_id)
    if uuid is not None:
        reason = "resource_not_matched" if not matched else ("replica_ids" if uuid.end() != len(device_id) else None)
        if reason is not None and len(by_uuid) < MAX_FINDINGS:
            by_uuid.setdefault(uuid.group(0), reason)
    elif matched and device_id.isascii() and device_id.isdigit() and len(device_id) <= 4 and len(by_index) < MAX_FINDINGS:
        by_index[int(device_id)] = "index_ids"


@dataclass(frozen=True)
class KubeletView:
    """What the attribution doctor reads of the kubelet calls."""

    problem: str | None = None  # while calls fail: socket_missing or kubelet_unreachable; None once one answers
    findings: DeviceIdFindings = field(default_factory=DeviceIdFindings)  # of the last good answer
