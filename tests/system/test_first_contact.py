"""What a new user sees first: without a driver, without CUDA, with a plain password in the web
config. Each message names a next step that works, once."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import bcrypt
import pytest
from conftest import ROOT, free_port, http_get
from waiting import PATIENCE, wait_until

FAULTS = ROOT / "tests" / "system" / "test_faults.py"  # run as a script: the daemon over a fake NVML whose driver is not loaded
DCGM_PARAGRAPH = "DCGM Python bindings not found"


def without_driver(tmp_path: Path, trace_paths, *args: str, wait: float = PATIENCE) -> subprocess.CompletedProcess:
    script = {"traces": [str(trace_paths["idle"])], "driver_when": str(tmp_path / "never")}
    env = {**os.environ, "FAULT_SCRIPT": json.dumps(script)}
    return subprocess.run([sys.executable, str(FAULTS), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=wait)


def test_the_daemon_without_a_driver_says_why_once_and_points_to_the_demo(tmp_path, trace_paths):
    run = without_driver(tmp_path, trace_paths, "--dcgm.bindings-path", str(tmp_path), "--web.listen-address", f"127.0.0.1:{free_port()}")
    assert run.returncode == 2
    assert run.stderr.count(DCGM_PARAGRAPH) == 1, run.stderr
    assert "cannot initialise NVML" in run.stderr and "run with --demo" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.slow
def test_waiting_for_the_driver_says_why_once_not_at_every_retry(tmp_path, trace_paths):
    calls = tmp_path / "calls.json"
    script = {"traces": [str(trace_paths["idle"])], "driver_when": str(tmp_path / "never"), "report": str(calls)}
    port = free_port()
    command = [sys.executable, str(FAULTS), "--dcgm.bindings-path", str(tmp_path), "--wait-for-driver", "--web.listen-address", f"127.0.0.1:{port}"]
    process = subprocess.Popen(command, cwd=tmp_path, env={**os.environ, "FAULT_SCRIPT": json.dumps(script)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def healthy() -> bool:
            assert process.poll() is None
            with contextlib.suppress(OSError):
                return http_get(f"http://127.0.0.1:{port}/-/healthy")[0] == 200
            return False

        def initialisations() -> int:
            with contextlib.suppress(OSError, ValueError):
                return json.loads(calls.read_text()).get("nvmlInit", 0)
            return 0

        wait_until(healthy, "the daemon to answer")
        wait_until(lambda: initialisations() >= 3, "the first try and two retries")
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=PATIENCE)[0]
    assert "waiting for the NVIDIA driver (--wait-for-driver)" in output
    assert output.count(DCGM_PARAGRAPH) == 1, output


def test_record_without_a_driver_does_not_suggest_demo(tmp_path, trace_paths):
    run = without_driver(tmp_path, trace_paths, "record", "--output", str(tmp_path / "trace.json"), "--duration", "1s")
    assert run.returncode == 2 and not (tmp_path / "trace.json").exists()
    assert "cannot initialise NVML" in run.stderr
    assert "--demo" not in run.stderr  # record has no --demo
    assert run.stderr.count("\n") == 1


def test_selftest_without_cuda_points_to_selftest_replay(tmp_path):
    missing = "raise ImportError('not installed')\n"
    for name in ("torch", "cupy"):
        (tmp_path / f"{name}.py").write_text(missing)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    run = subprocess.run([sys.executable, "-m", "gpueff", "selftest"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=PATIENCE)
    assert run.returncode == 2
    assert "selftest --replay" in run.stderr
    hint = re.search(r"`(selftest --replay [^`]+)`", run.stderr)
    assert hint is not None, run.stderr
    assert run.stderr.count("\n") == 1


def test_the_bcrypt_hint_in_the_web_config_error_is_a_command_that_pastes_and_works(tmp_path):
    """The error goes through the logfmt log line, which escapes backslashes and double quotes:
    the hint must come out as the very command to paste, and that command must make a hash."""
    web_config = tmp_path / "web.yml"
    web_config.write_text("basic_auth_users:\n  prometheus: secret\n")
    run = subprocess.run([sys.executable, "-m", "gpueff", "--demo", "--web.config.file", str(web_config), "--web.listen-address", f"127.0.0.1:{free_port()}"], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert run.returncode == 2
    found = re.search(r"\((htpasswd [^)]*) makes one\)", run.stderr)
    assert found is not None, run.stderr
    command = found.group(1)
    # A stand-in htpasswd that answers like Apache's for `-nBC 10 <user>` (user:hash and a newline).
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
    fake = tmp_path / "bin" / "htpasswd"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = -nBC ] && [ \"$2\" = 10 ] || exit 9\nprintf '%s:%s\\n' \"$3\" '{hashed}'\n")
    fake.chmod(0o755)
    pasted = subprocess.run(["bash", "-c", command], env={**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}, capture_output=True, text=True, timeout=PATIENCE)
    assert pasted.returncode == 0, (command, pasted.stderr)
    assert pasted.stdout.strip() == hashed, (shlex.split(command), pasted.stdout)
