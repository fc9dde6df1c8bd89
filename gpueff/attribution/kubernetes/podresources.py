"""Client of the kubelet pod-resources API (v1 ``PodResourcesLister/List``) on its unix socket.

Needs the optional ``kubernetes`` extra (grpcio, protobuf). The channel is kept open between
calls; every call has a deadline and the received message size is bounded. The answer is hostile
until checked (a compromised kubelet): a container whose names break Kubernetes' own rules, a
device id longer than any UUID, or a container past a GPU's MAX_OWNERS_PER_GPU is left out and
counted, so what the answer adds to every GPU series is bounded whatever the kubelet sends.
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import grpc

from gpueff.attribution.kubernetes import podresources_pb2 as pb
from gpueff.attribution.kubernetes.dra import DeviceKey
from gpueff.attribution.kubernetes.owners import PodOwner
from gpueff.attribution.kubernetes.settings import DNS_LABEL, DNS_SUBDOMAIN
from gpueff.config.values import shown

LIST_METHOD = "/v1.PodResourcesLister/List"
MAX_OWNERS_PER_GPU = 64  # containers one GPU is kept assigned to (time-slicing replicas, MPS clients)
MAX_DEVICE_ID_CHARS = 256  # a GPU or MIG UUID is 40-44 characters, a time-slicing replica's id a few more


class PodResourcesError(Exception):
    """The List call failed; the message says how, ``code`` is the gRPC status name."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def device_uuid(device_id: str) -> str:
    """The GPU or MIG UUID in a device id. The NVIDIA device plugin's time-slicing and MPS
    replicas are ``<uuid>::<replica>``."""
    return device_id.split("::", 1)[0]


@dataclass
class Refusals:
    """What a List answer had that was left out: a count per kind, and the first of each described."""

    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)

    def add(self, kind: str, why: str, count: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + count
        self.first.setdefault(kind, why)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def name_refusal(namespace: str, pod: str, container: str) -> str | None:
    """Why a container's names cannot be Kubernetes' (a namespace and a container name are DNS-1123
    labels of at most 63 characters, a pod name a DNS-1123 subdomain of at most 253); None if they can."""
    for what, name, pattern, limit in (("namespace", namespace, DNS_LABEL, 63), ("pod name", pod, DNS_SUBDOMAIN, 253), ("container name", container, DNS_LABEL, 63)):
        if len(name) > limit or not pattern.fullmatch(name):
            return f"{what} {shown(name)} ({len(name)} characters) is not a DNS-1123 {'label' if limit == 63 else 'subdomain'} of at most {limit} characters"
    return None


def gpu_owners(response: pb.ListPodResourcesResponse, resource_patterns: Iterable[str], dra_devices: Mapping[DeviceKey, str] | None = None) -> tuple[dict[str, tuple[PodOwner, ...]], Refusals]:
    """GPU (or MIG) UUID -> the containers it is assigned to, sorted, from a List response: devices
    of the extended resources matching ``resource_patterns`` (device plugins), and DRA devices whose
    (driver, pool, device) ``dra_devices`` maps to a UUID; and what was left out (see the module)."""
    patterns = tuple(resource_patterns)
    owners: dict[str, set[PodOwner]] = defaultdict(set)
    refused = Refusals()
    for pod in response.pod_resources:
        for container in pod.containers:
            uuids = [device_uuid(device_id) for devices in container.devices if any(fnmatch.fnmatchcase(devices.resource_name, pattern) for pattern in patterns) for device_id in devices.device_ids]
            for claim in container.dynamic_resources if dra_devices else ():
                for device in claim.claim_resources:
                    uuid = dra_devices.get((device.driver_name, device.pool_name, device.device_name)) if dra_devices else None
                    if uuid is not None:
                        uuids.append(uuid)
            if not uuids:
                continue
            why = name_refusal(pod.namespace, pod.name, container.name)
            if why is not None:
                refused.add("name", why)
                continue
            owner = PodOwner(pod.namespace, pod.name, container.name)
            for uuid in uuids:
                if len(uuid) > MAX_DEVICE_ID_CHARS:
                    refused.add("device id", f"a device id of {len(uuid)} characters (at most {MAX_DEVICE_ID_CHARS})")
                else:
                    owners[uuid].add(owner)
    kept: dict[str, tuple[PodOwner, ...]] = {}
    for uuid, found in owners.items():
        kept[uuid] = tuple(sorted(found)[:MAX_OWNERS_PER_GPU])
        if len(found) > MAX_OWNERS_PER_GPU:
            refused.add("owners", f"{len(found)} containers on one GPU (at most {MAX_OWNERS_PER_GPU})", len(found) - MAX_OWNERS_PER_GPU)
    return kept, refused


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
