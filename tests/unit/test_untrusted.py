"""Bytes someone else chose (process names, cgroup paths, driver strings) that are not UTF-8 never
fail a poll: each reader decodes them safely and bounded, and a real process that names itself
with such bytes leaves every GPU published."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
from fakes.nvml import FakeClock, FakeGpu, FakeNvml
from fakes.proc import status
from prometheus_client.parser import text_string_to_metric_families

from gpueff.attribution.cgroup import process_owner
from gpueff.attribution.holders import Holder, HolderResolver, identify
from gpueff.attribution.kubernetes.owners import ProcessOwner
from gpueff.backends.base import binding_text, text
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.backends.nvml.gpm import profiling_admin_only
from gpueff.exposition.render import render
from gpueff.poller import Poller
from gpueff.settings import parse_config
from gpueff.trace import load_trace
from gpueff.untrusted import MAX_PROC_FILE_BYTES, decode, read_text

HOSTILE = b"\xff\xfejob"
UID = "0c3e2b1a-7f64-4d2b-9a51-3c2d1e0f9a8b"
CID = "4f1a" * 16


def write_process(root: Path, pid: int, cgroup: bytes, comm: bytes) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_bytes(cgroup)
    (root / str(pid) / "comm").write_bytes(comm + b"\n")
    (root / str(pid) / "status").write_text(status("x", pid, 1, 1000))


def test_decode_keeps_bad_bytes_distinct_and_bounds_the_length() -> None:
    assert decode(HOSTILE) == "\\xff\\xfejob"
    assert decode(b"\xfe\xffjob") != decode(HOSTILE)
    assert decode("trainer ✓".encode()) == "trainer ✓"
    assert decode(b"a" * 10_000, 16) == "a" * 16
    assert decode("✓".encode()[:2]) == "\\xe2\\x9c"  # a character cut by the bound: no error


def test_read_text_reads_at_most_its_bound(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * (MAX_PROC_FILE_BYTES * 4))
    assert len(read_text(big)) == MAX_PROC_FILE_BYTES


def test_holder_of_a_process_with_a_non_utf8_name_and_cgroup(tmp_path: Path) -> None:
    write_process(tmp_path, 10, b"0::/user.slice/\xff\xfe.scope\n", HOSTILE)
    write_process(tmp_path, 11, b"0::/system.slice/slurmstepd.scope/job_77/step_0/user/\xc3task_0\n", b"x")
    write_process(tmp_path, 12, f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/\xff/cri-containerd-{CID}.scope\n".encode("latin-1"), b"x")
    assert identify(10, "", tmp_path).holder == Holder("process", "\\xff\\xfejob", "1000")
    assert identify(11, "", tmp_path).holder == Holder("slurm_job", "77")
    assert identify(12, "", tmp_path).holder == Holder("pod", UID)


def test_a_process_that_cannot_be_identified_is_unattributed_and_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def broken(pid: int, name: str, root: Path, names: bool = True) -> None:
        calls.append(pid)
        raise ValueError("unexpected")

    monkeypatch.setattr("gpueff.attribution.holders.identify", broken)
    resolver = HolderResolver(tmp_path)
    for _ in range(3):
        assert resolver.resolve([(5, "a")])[5].holder.kind == "unattributed"
    assert calls == [5]  # cached while the PID lives, not retried (and logged) every poll


def test_pod_owner_through_a_non_utf8_cgroup_file(tmp_path: Path) -> None:
    write_process(tmp_path, 42, f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n".encode() + b"1:name=\xff\xfe:/x\n", b"x")
    assert process_owner(42, tmp_path) == ProcessOwner(UID, CID)


def test_driver_strings_pynvml_cannot_decode_are_escaped_not_raised() -> None:
    strict = pynvml.convertStrBytes(lambda: HOSTILE)  # the real library's own decoding
    with pytest.raises(UnicodeDecodeError):
        strict()
    assert binding_text(strict) == "\\xff\\xfejob"
    assert text(HOSTILE) == "\\xff\\xfejob"
    assert len(text(b"a" * 100_000)) == 4096


def test_driver_params_that_are_not_utf8(tmp_path: Path) -> None:
    params = tmp_path / "params"
    params.write_bytes(b"Foo: \xff\nRmProfilingAdminOnly: 1\n")
    assert profiling_admin_only(params) is True


NAMED_CHILD = (
    "import ctypes, sys, time\n"
    "assert ctypes.CDLL(None, use_errno=True).prctl(15, sys.argv[1].encode('latin-1'), 0, 0, 0) == 0  # PR_SET_NAME\n"
    "print('named', flush=True)\n"
    "time.sleep(3600)  # until the test kills it\n"
)


def test_a_real_process_named_with_non_utf8_bytes_leaves_every_gpu_published(trace_paths) -> None:
    """Any user can do this on a shared node; before, every poll raised UnicodeDecodeError."""
    child = subprocess.Popen([sys.executable, "-c", NAMED_CHILD, HOSTILE.decode("latin-1")], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"named\n"
        assert Path(f"/proc/{child.pid}/comm").read_bytes() == HOSTILE + b"\n"
        clock = FakeClock()
        trace = load_trace(trace_paths["matmul_8192"])
        gpus = [FakeGpu(trace, processes=[(child.pid, 1 << 30, b"/opt/" + HOSTILE)], process_duty={child.pid: 0.9}), FakeGpu(load_trace(trace_paths["idle"]))]
        backend = NvmlBackend(slow_interval=5.0, nvml=FakeNvml(gpus, clock=clock), clock=clock)
        backend.start()
        poller = Poller(backend, parse_config({"sharing": {"enabled": True}, "proc_root": "/proc"}), clock=clock)
        for _ in range(3):
            poller.poll_once()
            clock.advance(1.0)
        snapshot = poller.poll_once()
    finally:
        child.kill()
        child.wait(10)
    families = {family.name: family for family in text_string_to_metric_families(render(snapshot).decode())}
    assert [s.value for s in families["gpueff_gpu_up"].samples] == [1.0, 1.0]
    assert poller.is_ready()
    holders = {(s.labels["holder_kind"], s.labels["holder"]) for s in families["gpueff_holder_busy_seconds"].samples}
    assert ("process", f"{os.getuid()}:\\xff\\xfejob") in holders
