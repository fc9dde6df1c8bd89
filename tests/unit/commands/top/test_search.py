"""What top's / finds (gpueff/commands/top/search.py): every word in some field, a field named
with its prefix, letter case aside; an unknown prefix is a plain word."""

from __future__ import annotations

from gpueff.attribution.kubernetes.owners import PodOwner
from gpueff.attribution.slurm import SlurmJob
from gpueff.commands.top.search import matches, words
from gpueff.overview import GpuOverview, JobOverview
from gpueff.pipeline.processes import GpuProcesses, ProcessRow

NONE = dict.fromkeys(("utilization", "sm_active", "efficiency", "tensor_flops", "peak_tensor_flops", "dram_bytes_per_second", "peak_dram_bytes_per_second", "power_watts",
                      "busy_flop_per_joule", "estimated_flops", "memory_used_bytes", "memory_total_bytes", "temperature_celsius", "busy_idle_sm_seconds"))


def gpu(index: int, **fields: object) -> GpuOverview:
    base = {"index": index, "uuid": f"GPU-{index}", "model": "NVIDIA H200", "source": "", "up": True, "bottleneck": "host", "mismatch": (), "implausible": (), "profiling": True, **NONE}
    return GpuOverview(**{**base, **fields})  # type: ignore[arg-type]


def test_words_name_their_field_or_look_everywhere() -> None:
    assert words("NS:ML  pod:llama user:  class: x:y") == [("namespace", "ml"), ("pod", "llama"), ("", "user:"), ("", "class:"), ("", "x:y")]


def test_every_word_must_be_found_and_a_field_narrows_where() -> None:
    processes = GpuProcesses((ProcessRow(7, "1001", "训练-job", 1e9, None, "process", "1001:训练-job"), ProcessRow(8, "0", "python3", 1e9, None, "pod", "1f2e3d4c-0000")))
    shared = gpu(3, pods=(PodOwner("ml", "llama-train-0", "pytorch"),), slurm_jobs=(SlurmJob("48213", user_id="2001"),), processes=processes)
    jobs = [JobOverview("trace", "2gpu_straggler", (3, 4), None, {}, None, None, None, (), None)]
    users = {"1001": "alice"}
    found = lambda query: matches(shared, query, users, jobs)  # noqa: E731
    assert all(found(query) for query in ("ml/llama", "ns:ML", "pod:pytorch", "pod:1f2e3d4c", "job:48213", "job:straggler", "user:alice", "user:2001", "user:1001",
                                          "class:host", "name:h200", "name:训练", "3", "host ml", ""))
    assert not any(found(query) for query in ("ns:llama", "class:ml", "user:bob", "host serving", "job:ml", "pod:48213"))
    assert matches(gpu(5, up=False), "class:down", {}) and not matches(gpu(5, up=False), "class:host", {})
