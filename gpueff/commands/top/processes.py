"""``top``'s process panel, the one nvitop users open it for: each GPU's compute processes with
their PID, Unix user, device memory, share of the GPU's busy time, owner (pod, Slurm job, or on a
bare host the Unix user) and program name, the GPUs in the table's order. Every name is someone
else's bytes: shown through ``printable`` and cut by display width. Columns give way from the
right at narrow widths (the owner first, then the command is cut). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpueff.commands.top.text import fit, pad, printable
from gpueff.overview import GpuOverview
from gpueff.pipeline.processes import ProcessRow

MIB = 1024 * 1024
OWNER_FROM = 64  # from this width on the owner column shows: 22 columns wide, 40 (a whole pod UID) from 120
HEAD = f"{'GPU':>3} {'PID':>7} {'USER':<10} {'GPU-MEM':>8} {'BUSY':>4}"


def memory_text(value: float | None) -> str:
    """Device memory as nvidia-smi and nvitop show it: whole MiB."""
    return "–" if value is None else f"{value / MIB:.0f}MiB"


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f}%"


def owner_text(kind: str, holder: str, user_id: str) -> str:
    """Whose the process is: its pod (by UID: a process's cgroup names no pod name), its Slurm job,
    or on a bare host its Unix user; "–" where no owner can be read."""
    if kind == "pod":
        return printable(f"pod {holder}")
    if kind == "slurm_job":
        return printable(f"job {holder}")
    if kind in ("process", "user"):
        return printable(f"user {holder.split(':', 1)[0] or user_id}")
    return "–"


def user_text(user_id: str, users: Mapping[str, str]) -> str:
    """The user's name where top knows it (its own host's), else the uid."""
    return printable(users.get(user_id) or user_id or "–")


def _owner_width(width: int) -> int:
    return 0 if width < OWNER_FROM else 22 if width < 120 else 40


def _line(index: str, pid: str, user: str, memory: str, share: str, owner: str, command: str, width: int) -> str:
    line = f"{index:>3} {pid:>7} {pad(user, 10)} {memory:>8} {share:>4}"
    if owners := _owner_width(width):
        line += f" {pad(owner, owners)}"
    return fit(f"{line} {command}".rstrip(), width)


def header(width: int) -> str:
    owners = _owner_width(width)
    return fit(HEAD + (f" {'OWNER':<{owners}}" if owners else "") + " COMMAND", width)


def row_line(index: int, row: ProcessRow, users: Mapping[str, str], width: int) -> str:
    return _line(str(index), str(row.pid), user_text(row.user_id, users), memory_text(row.memory_bytes), _share(row.busy_share),
                 owner_text(row.holder_kind, row.holder, row.user_id), printable(row.name) or "–", width)


def process_lines(gpus: Sequence[GpuOverview], users: Mapping[str, str], width: int) -> list[str]:
    """The panel's rows (no header), the GPUs in the order given; none where no GPU lists processes."""
    lines: list[str] = []
    for gpu in gpus:
        listed = gpu.processes
        if listed is None:
            continue
        lines.extend(row_line(gpu.index, row, users, width) for row in listed.rows)
        if listed.rest:
            label = f"+{listed.others} more" if listed.others else "the rest"
            lines.append(_line(str(gpu.index), "", label, memory_text(listed.others_memory_bytes), _share(listed.others_busy_share), "", "", width))
    return lines


def listed_anywhere(gpus: Sequence[GpuOverview]) -> bool:
    """Some GPU lists its processes (a backend that lists none, or a page without the per_process collector, shows no panel)."""
    return any(gpu.processes is not None for gpu in gpus)
