"""The attribution doctor's words: the paths that can name a GPU's owner and the reasons one did
not (or named it only through a fallback), each with the line ``check``, the live page and ``top``
print for it. Plain data: bounded label values of gpueff_gpu_attribution_info, each with its entry
in docs/troubleshooting.md."""

from __future__ import annotations

PATHS: dict[str, str] = {
    "kubelet": "the kubelet's pod-resources API assigned the GPU to a container (device plugin)",
    "dra": "the kubelet's pod-resources API assigned the GPU through a DRA ResourceClaim",
    "pod_cgroup": "a process's cgroup names its pod (time-slicing, MPS, a pod without a GPU request)",
    "slurm_cgroup": "a process's cgroup names its Slurm job",
    "process": "the process itself (its Unix user and name): it runs in no pod and no Slurm job",
    "demo": "declared beside the replayed traces (demo data, not a real owner)",
    "none": "no path named an owner",
}

REASONS: dict[str, str] = {
    "ok": "the owner is named on the GPU's series",
    "no_process": "no compute process holds the GPU and no pod is assigned it: it is free",
    "processes_not_listed": "this backend cannot list the GPU's processes (DCGM, a replay): only the kubelet could name an owner",
    "attribution_off": "the owner is found but no series names it: turn sharing.enabled on (or kubernetes.process_attribution for pods)",
    "socket_missing": "kubernetes.enabled, but the kubelet's pod-resources socket is not mounted at kubernetes.pod_resources_socket",
    "kubelet_unreachable": "the kubelet's pod-resources List call fails (or grpcio is missing): the log says how",
    "no_gpu_limit": "a process of a pod runs here, but the kubelet assigned the GPU to no container: the pod requests no nvidia.com/gpu (it sees the GPU through NVIDIA_VISIBLE_DEVICES or privileges)",
    "resource_not_matched": "the kubelet lists the GPU under a resource name kubernetes.resource_names does not match",
    "replica_ids": "the kubelet lists the GPU under a replica id this exporter does not read (a UUID with a suffix other than ::N)",
    "index_ids": "the kubelet lists GPU indices where UUIDs were expected (the device plugin's deviceIDStrategy: index)",
    "dra_unmapped": "a DRA claim holds a GPU device whose UUID is not known: set kubernetes.dra_drivers (and let the exporter list resourceslices)",
    "pids_not_visible": "NVML's process ids are not in proc_root: the exporter does not see the host's PIDs (hostPID off, or proc_root is not the host's /proc)",
    "outside_pods_and_jobs": "on a Kubernetes node, a process outside every pod and Slurm job holds the GPU (a host process, or one a pod left behind)",
}
