"""GPUs allocated through Kubernetes Dynamic Resource Allocation (DRA).

The kubelet's pod-resources List names a DRA device by its driver, pool and device name (as its
ResourceSlice does), not by GPU UUID. The DRA driver publishes each GPU in a ResourceSlice with a
``uuid`` attribute (NVIDIA's gpu.nvidia.com driver: the GPU's UUID for a GPU, the MIG device's UUID
for a MIG device), so this node's ResourceSlices, read from the API server, map (driver, pool,
device) to the UUID this exporter exports the device under.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpueff.attribution.kubernetes.apiserver import ApiError, ApiServer

# resource.k8s.io is GA (v1) from Kubernetes 1.34; v1beta2 and v1beta1 serve 1.32 and 1.33. In v1
# and v1beta2 a device's attributes are on the device; in v1beta1 under ``basic``.
RESOURCE_SLICE_PATHS = tuple(f"/apis/resource.k8s.io/{version}/resourceslices" for version in ("v1", "v1beta2", "v1beta1"))

DeviceKey = tuple[str, str, str]  # (driver, pool, device)


def device_uuids(answer: dict[str, Any], drivers: Iterable[str]) -> dict[DeviceKey, str]:
    """(driver, pool, device) -> UUID for every device of ``drivers`` in a ResourceSliceList that has
    a string ``uuid`` attribute; anything malformed is skipped."""
    wanted = set(drivers)
    found: dict[DeviceKey, str] = {}
    items = answer.get("items")
    for item in items if isinstance(items, list) else ():
        spec = item.get("spec") if isinstance(item, dict) else None
        if not isinstance(spec, dict) or spec.get("driver") not in wanted:
            continue
        pool = spec.get("pool")
        pool_name = pool.get("name") if isinstance(pool, dict) else None
        devices = spec.get("devices")
        if not isinstance(pool_name, str) or not isinstance(devices, list):
            continue
        for device in devices:
            if not isinstance(device, dict) or not isinstance(device.get("name"), str):
                continue
            attributes = device.get("attributes")
            if attributes is None and isinstance(device.get("basic"), dict):
                attributes = device["basic"].get("attributes")
            uuid = attributes.get("uuid") if isinstance(attributes, dict) else None
            value = uuid.get("string") if isinstance(uuid, dict) else None
            if isinstance(value, str) and value:
                found[str(spec["driver"]), pool_name, device["name"]] = value
    return found


class ResourceSlices:
    """This node's DRA GPUs, read from the API server: the first resource.k8s.io version that answers
    is kept."""

    def __init__(self, api: ApiServer, node_name: str, drivers: tuple[str, ...]) -> None:
        self.api = api
        self.node_name = node_name
        self.drivers = drivers
        self._paths = list(RESOURCE_SLICE_PATHS)

    def read(self) -> dict[DeviceKey, str]:
        errors = []
        for path in list(self._paths):
            try:
                answer = self.api.get(path, fieldSelector=f"spec.nodeName={self.node_name}")
            except ApiError as error:
                errors.append(str(error))
                if "HTTP 404" in str(error) and len(self._paths) > 1:
                    self._paths.remove(path)  # this API server does not serve that version
                    continue
                break
            return device_uuids(answer, self.drivers)
        raise ApiError("; ".join(errors))
