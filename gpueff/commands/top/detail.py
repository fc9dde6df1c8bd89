"""One GPU's detail, what Enter on a selected row opens: every figure the table shortens, whose
the GPU is and why, its apps and job, what to try, and all of its processes. Pure."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

from gpueff.commands.top.figures import (
    BOLD,
    CLASS_COLOURS,
    DIM,
    RED,
    Painter,
    class_name,
    flag_name,
    memory,
    percent,
    ratio,
    si,
    temperature,
    waste_text,
    watts,
    whose,
)
from gpueff.commands.top.processes import header, process_lines
from gpueff.commands.top.text import fit, joined, printable
from gpueff.overview import GpuOverview, JobOverview
from gpueff.taxonomy import WHAT_TO_TRY


def _owners(gpu: GpuOverview, users: Mapping[str, str]) -> list[str]:
    parts = [printable(f"pod {pod.namespace}/{pod.pod}" + (f" ({pod.container})" if pod.container else "")) for pod in gpu.pods]
    parts += [printable(f"Slurm job {job.job_id}" + (f" (uid {job.user_id})" if job.user_id else "")) for job in gpu.slurm_jobs]
    if not parts and (owner := whose(gpu, users)):
        parts.append(owner)
    if gpu.attribution is not None:
        path, reason = gpu.attribution
        parts.append(f"found by {path.replace('_', ' ')}" + ("" if reason == "ok" else f": {reason.replace('_', ' ')}"))
    return parts


def detail_lines(gpu: GpuOverview, jobs: Sequence[JobOverview], waste: Mapping[str, float], users: Mapping[str, str], width: int, paint: Painter) -> list[str]:
    name = class_name(gpu)
    title = " · ".join(part for part in (f"GPU {gpu.index}", printable(gpu.model), printable(gpu.source), printable(gpu.uuid)) if part)
    lines = [paint(fit(title, width), BOLD), paint(fit(f"class {name}", width), CLASS_COLOURS.get(name, DIM))]
    owners = _owners(gpu, users)
    if owners:
        lines += joined(["owner: " + owners[0], *owners[1:]], width)
    lines += joined([f"utilization {percent(gpu.utilization)}", f"SM activity {percent(gpu.sm_active)}", f"efficiency {ratio(gpu.efficiency)}",
                      f"busy while SMs idle {waste_text(waste.get(gpu.uuid))} in top's window, {waste_text(gpu.busy_idle_sm_seconds)} since the exporter started"], width)
    used = f" ({percent(gpu.memory_used_bytes / gpu.memory_total_bytes)})" if gpu.memory_used_bytes is not None and gpu.memory_total_bytes else ""
    lines += joined([f"memory {memory(gpu.memory_used_bytes, gpu.memory_total_bytes)}{used}", f"temperature {temperature(gpu.temperature_celsius)}", f"power {watts(gpu.power_watts)}"], width)
    lines += joined([f"tensor-busy {si(gpu.tensor_flops, 'FLOP/s')} of {si(gpu.peak_tensor_flops, 'FLOP/s')}", f"DRAM {si(gpu.dram_bytes_per_second, 'B/s')} of {si(gpu.peak_dram_bytes_per_second, 'B/s')}",
                      f"work est. {si(gpu.estimated_flops, 'FLOP/s')}", f"busy {si(gpu.busy_flop_per_joule, 'FLOP/J')}"], width)
    if gpu.flags:
        lines.append(paint(fit("flags: " + " ".join(flag_name(flag) for flag in gpu.flags), width), RED))
    for app in gpu.apps:
        figures = f"{si(app.throughput, app.unit + '/s')} · {si(app.units_per_joule, app.unit + '/J')}" if app.up else "not answering"
        lines.append(fit(printable(f"app {app.name}: {figures}"), width))
    for job in jobs:
        if gpu.index in job.gpus:
            lines.append(fit(printable(f"job {job.kind} {job.name}: GPUs {','.join(map(str, job.gpus))}"), width))
    if gpu.up and gpu.bottleneck in WHAT_TO_TRY:
        lines += [fit(line, width) for line in textwrap.wrap(f"what to try: {WHAT_TO_TRY[gpu.bottleneck]}", width, subsequent_indent="  ")]
    if gpu.processes is None:
        lines.append(paint(fit("processes: not listed (this backend, or a page without the per_process collector)", width), DIM))
    elif not gpu.processes.rows and not gpu.processes.rest:
        lines.append(fit("processes: none (no compute process holds the GPU)", width))
    else:
        lines += [paint(header(width), BOLD), *process_lines([gpu], users, width)]
    return lines
