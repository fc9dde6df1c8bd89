"""A real gRPC server on a unix socket serving the kubelet pod-resources v1 ``List`` call, for tests.

Only the kubelet cannot exist here; the gRPC stack, the socket and the wire format are real.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from gpueff.attribution.kubernetes import podresources_pb2 as pb


def pod(namespace: str, name: str, containers: dict[str, dict[str, list[str]]]) -> pb.PodResources:
    """A PodResources message: container name -> resource name -> device ids."""
    return pb.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            pb.ContainerResources(name=container, devices=[pb.ContainerDevices(resource_name=resource, device_ids=ids) for resource, ids in devices.items()])
            for container, devices in containers.items()
        ],
    )


def dra_pod(namespace: str, name: str, containers: dict[str, list[tuple[str, str, str]]]) -> pb.PodResources:
    """A PodResources message whose containers hold DRA devices: container name -> (driver, pool, device)."""
    return pb.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            pb.ContainerResources(name=container, dynamic_resources=[pb.DynamicResource(claim_name=f"{name}-gpu", claim_namespace=namespace, claim_resources=[
                pb.ClaimResource(driver_name=driver, pool_name=pool, device_name=device) for driver, pool, device in devices])])
            for container, devices in containers.items()
        ],
    )


class FakeKubelet:
    """Serves ``pods`` (replaceable while running) and counts the List calls it answers. With
    ``held``, each answer waits until ``release`` is set (at the latest when the fake stops)."""

    def __init__(self, socket_path: Path, pods: list[pb.PodResources], held: bool = False) -> None:
        self.socket_path = socket_path
        self.pods = pods
        self.held = held
        self.release = threading.Event()
        self.failing = False  # answer UNAVAILABLE, as a restarting kubelet does
        self.calls = 0
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {"List": grpc.unary_unary_rpc_method_handler(self._list, request_deserializer=pb.ListPodResourcesRequest.FromString, response_serializer=pb.ListPodResourcesResponse.SerializeToString)},
        )
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(f"unix://{socket_path}")

    def _list(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext) -> pb.ListPodResourcesResponse:
        with self._lock:
            self.calls += 1
        if self.held:
            self.release.wait()
        if self.failing:
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet restarting")
        return pb.ListPodResourcesResponse(pod_resources=self.pods)

    def __enter__(self) -> FakeKubelet:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.stop(grace=None)


def first_owners(attributor: Any, settings: Any, samples: Any, now: float | None = None) -> Any:
    """``attributor.owners`` once its first List (and the API server's calls) have come back, well or
    not, however long a busy machine makes them: the daemon's first poll waits only FIRST_CALL_WAIT
    (1 s) for them, and a test that took the first poll's answer guessed they came that fast."""
    from waiting import PATIENCE

    now = time.monotonic() if now is None else now
    attributor.owners(settings, samples, now)  # (re)configures the attribution and starts its refresher
    assert attributor._refresher._answered.wait(PATIENCE), f"no first List answer within {PATIENCE:g} s"
    return attributor.owners(settings, samples, now)
