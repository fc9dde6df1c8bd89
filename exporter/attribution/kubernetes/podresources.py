"""Client of the kubelet pod-resources API (v1 ``PodResourcesLister/List``) on its unix socket.

Needs the optional ``kubernetes`` extra (grpcio, protobuf). The channel is kept open between
calls; every call has a deadline and the received message size is bounded.
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Iterable, Mapping

import grpc

from exporter.attribution.kubernetes import podresources_pb2 as pb
from exporter.attribution.kubernetes.dra import DeviceKey
from exporter.attribution.kubernetes.owners import PodOwner

LIST_METHOD = "/v1.PodResourcesLister/List"


class PodResourcesError(Exception):
    """The List call failed; the message says how, ``code`` is the gRPC status name."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def device_uuid(device_id: str) -> str:
    """The GPU or MIG UUID in a device id. The NVIDIA device plugin's time-slicing and MPS
    replicas are ``<uuid>::<replica>``."""
    return device_id.split("::", 1)[0]


def gpu_owners(response: pb.ListPodResourcesResponse, resource_patterns: Iterable[str], dra_devices: Mapping[DeviceKey, str] | None = None) -> dict[str, tuple[PodOwner, ...]]:
    """GPU (or MIG) UUID -> the containers it is assigned to, sorted, from a List response: devices
    of the extended resources matching ``resource_patterns`` (device plugins), and DRA devices whose
    (driver, pool, device) ``dra_devices`` maps to a UUID."""
    patterns = tuple(resource_patterns)
    owners: dict[str, set[PodOwner]] = defaultdict(set)
    for pod in response.pod_resources:
        for container in pod.containers:
            owner = PodOwner(pod.namespace, pod.name, container.name)
            for devices in container.devices:
                if not any(fnmatch.fnmatchcase(devices.resource_name, pattern) for pattern in patterns):
                    continue
                for device_id in devices.device_ids:
                    owners[device_uuid(device_id)].add(owner)
            for claim in container.dynamic_resources if dra_devices else ():
                for device in claim.claim_resources:
                    uuid = dra_devices.get((device.driver_name, device.pool_name, device.device_name)) if dra_devices else None
                    if uuid is not None:
                        owners[uuid].add(owner)
    return {uuid: tuple(sorted(found)) for uuid, found in owners.items()}


class PodResourcesClient:
    def __init__(self, socket_path: str, timeout: float, max_message_bytes: int) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel(
            f"unix://{socket_path}",
            options=[("grpc.max_receive_message_length", max_message_bytes), ("grpc.enable_http_proxy", 0)],
        )
        self._list = self._channel.unary_unary(
            LIST_METHOD,
            request_serializer=pb.ListPodResourcesRequest.SerializeToString,
            response_deserializer=pb.ListPodResourcesResponse.FromString,
        )

    def list(self) -> pb.ListPodResourcesResponse:
        try:
            return self._list(pb.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as error:
            code = error.code() if hasattr(error, "code") else None
            name = code.name if code is not None else "UNKNOWN"
            details = error.details() if hasattr(error, "details") else str(error)
            raise PodResourcesError(f"List on {self.socket_path} failed: {name}: {details}", name) from None

    def close(self) -> None:
        self._channel.close()
