"""What reading other users' processes needs (gpueff/attribution/jobs.py and the cgroup and owner
readers under it), on this machine's real /proc: process attribution reads /proc/<pid>/cgroup,
status and stat, which every user may read, so it needs no root; and what uid 0 without
capabilities can still do to other uid-0 processes it sees, which is why docs/security.md says
what hostPID with uid 0 costs. Runs where the tests run as root (setpriv drops to the others)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from repo import ROOT
from waiting import PATIENCE, wait_until

SETPRIV = shutil.which("setpriv")
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or SETPRIV is None, reason="needs root and setpriv (util-linux) to run as other users")
CAPLESS = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
NON_ROOT = ["--reuid=65532", "--regid=65532", "--clear-groups", *CAPLESS]


def as_user(options: list[str], script: str) -> subprocess.CompletedProcess[str]:
    assert SETPRIV is not None
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([SETPRIV, *options, "--", sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE, env=environment)


def runs_as(options: list[str]) -> bool:
    """Whether this Python starts under ``options``: a pyenv build keeps its libpython under /root,
    which uid 65532 may not open (the suite's other Pythons run these tests then)."""
    return as_user(options, "pass").returncode == 0


def need_to_run_as(options: list[str]) -> None:
    if not runs_as(options):
        pytest.skip(f"{sys.executable} cannot be started as {' '.join(options[:1])} here (its shared library is in a folder that user may not read)")


@pytest.fixture()
def root_job() -> Iterator[tuple[int, int]]:
    """A process of root's (with root's capabilities) under a launcher that is no session leader: (launcher, process)."""
    launcher = subprocess.Popen([sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '600'])"], preexec_fn=os.setpgrp)  # a group of its own, no session (process_group= is 3.11+)
    try:
        yield launcher.pid, wait_until(lambda: next((int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _parent(int(pid)) == launcher.pid), None), "the launcher's child")
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)  # the launcher and its child: the group this fixture made
        launcher.wait()


def _environment(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as file:
        return file.read()


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def test_process_attribution_reads_roots_processes_as_a_user_without_privilege(root_job: tuple[int, int]) -> None:
    need_to_run_as(NON_ROOT)
    launcher, child = root_job
    script = f"""
import json
from pathlib import Path
from gpueff.attribution.jobs import JobResolver
resolver = JobResolver(Path("/proc"))
found = resolver.resolve([{child}])
print(json.dumps({{"job": [found[{child}].kind, found[{child}].id], "owner": [resolver.owners[{child}].kind, resolver.owners[{child}].id]}}))
"""
    unprivileged, as_root = as_user(NON_ROOT, script), as_user([], script)
    assert unprivileged.returncode == 0, unprivileged.stderr
    assert json.loads(unprivileged.stdout) == json.loads(as_root.stdout) == {"job": ["process_group", f"0:{launcher}"], "owner": ["user", "0"]}


def test_uid_0_without_capabilities_still_signals_uid_0_processes_and_reads_capless_ones() -> None:
    need_to_run_as(NON_ROOT)
    # What docs/security.md says uid 0 in the node's PID namespace (the chart's hostPID with pod
    # labels) can do: signal any uid-0 process, and read the environment of one holding no
    # capability; not read one holding capabilities. uid 65532 can do neither to root's processes.
    privileged = subprocess.Popen(["sleep", "600"], env={"SECRET": "kept"})
    assert SETPRIV is not None
    capless = subprocess.Popen([SETPRIV, *CAPLESS, "--", "sleep", "600"], env={"SECRET": "read"})
    try:
        script = f"""
import json, os, signal
def attempt(action):
    try:
        return action() or "done"
    except PermissionError:
        return "refused"
def environment(pid):
    with open(f"/proc/{{pid}}/environ", "rb") as file:
        return file.read().decode()
print(json.dumps({{
    "stop": attempt(lambda: os.kill({privileged.pid}, signal.SIGSTOP)),
    "resume": attempt(lambda: os.kill({privileged.pid}, signal.SIGCONT)),
    "environment of a process with capabilities": attempt(lambda: environment({privileged.pid})),
    "environment of a capless one": attempt(lambda: environment({capless.pid})),
}}))
"""
        # The capless sleep must have exec'd (its environ is SECRET=read) before it is read.
        wait_until(lambda: _environment(capless.pid) == b"SECRET=read\0", "the capless process to start")
        root = as_user(CAPLESS, script)
        assert root.returncode == 0, root.stderr
        assert json.loads(root.stdout) == {"stop": "done", "resume": "done", "environment of a process with capabilities": "refused", "environment of a capless one": "SECRET=read\0"}
        user = json.loads(as_user(NON_ROOT, script).stdout)
        user.pop("resume")  # SIGCONT is let through within one session, whoever sends it
        assert user == {"stop": "refused", "environment of a process with capabilities": "refused", "environment of a capless one": "refused"}
    finally:
        for process in (privileged, capless):
            process.kill()
            process.wait()
