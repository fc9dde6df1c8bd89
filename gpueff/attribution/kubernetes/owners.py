"""What attribution finds for one GPU; plain data, importable without grpc."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class PodOwner:
    """A container the kubelet assigned the GPU (or MIG instance) to."""

    namespace: str
    pod: str
    container: str
    labels: tuple[tuple[str, str], ...] = ()  # the pod's allow-listed labels (kubernetes.pod_label_keys): (label name, value)


@dataclass(frozen=True, slots=True, order=True)
class ProcessOwner:
    """The pod and container a GPU process runs in, read from its cgroup path."""

    pod_uid: str
    container_id: str


@dataclass(frozen=True, slots=True)
class GpuOwners:
    """Attribution of one GPU: the containers it is assigned to, and its processes per container."""

    pods: tuple[PodOwner, ...] = ()
    processes: tuple[tuple[ProcessOwner, int], ...] = ()  # (owner, number of compute processes)

    @property
    def single_pod(self) -> PodOwner | None:
        """The one container holding the GPU; None when unassigned or shared (time-slicing)."""
        return self.pods[0] if len(self.pods) == 1 else None


@dataclass(frozen=True, slots=True)
class AttributionHealth:
    """How the kubelet pod-resources calls fare, for gpueff_kubernetes_attribution_*."""

    up: bool  # the last List call answered
    errors_total: int  # List calls that failed (or could not be made: no socket, no grpcio)
    last_success_wall: float | None  # Unix time of the last answer; None before the first
    refused_total: int = 0  # containers and device ids left out of answers (names over Kubernetes' limits, ...)
