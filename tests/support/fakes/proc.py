"""A /proc tree laid out as the kernel lays it out, for the processes NVML lists: each one's
``stat`` (name, parent, session), ``cgroup``, ``comm`` and ``status`` (its real and effective uids),
the files attribution/ reads to find a process's owner, job and holder."""

from __future__ import annotations

from pathlib import Path

USER_SESSION = "0::/user.slice/user-{uid}.slice/session-3.scope"


def status(name: str, pid: int, parent: int, uid: int) -> str:
    """``/proc/<pid>/status`` (the lines around Uid, trimmed); the kernel escapes a newline in Name."""
    return (f"Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{parent}\nTracerPid:\t0\n"
            f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nFDSize:\t64\n")


def process(root: Path, pid: int, name: str, parent: int = 1, session: int | None = None, cgroup: str | None = None, uid: int = 1000) -> Path:
    """One process's folder; ``session`` defaults to the process's own (a session leader), the
    cgroup to its user's login session."""
    folder = root / str(pid)
    folder.mkdir(parents=True)
    session = pid if session is None else session
    (folder / "stat").write_bytes(f"{pid} ({name}) S {parent} {pid} {session} 34816 {pid} 4194560 0 0 0 0 5 3 0 0 20 0 1 0\n".encode())
    (folder / "cgroup").write_text((USER_SESSION.format(uid=uid) if cgroup is None else cgroup) + "\n")
    (folder / "comm").write_text(name + "\n")
    (folder / "status").write_text(status(name, pid, parent, uid))
    return folder
