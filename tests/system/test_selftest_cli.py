"""`gpu-efficiency-exporter selftest` as a user runs it (real subprocesses), and the runner's
orchestration with a CPU stand-in for the GPU engine and the replay backend as the sampler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from repo import ROOT
from waiting import PATIENCE

from gpueff.backends.replay import ReplayBackend
from gpueff.commands.selftest.runner import Sampler, run_workloads
from gpueff.commands.selftest.workloads import MATMUL_N, SelftestUnavailable
from gpueff.trace import load_trace


def selftest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    return subprocess.run([sys.executable, "-m", "gpueff", "selftest", *args], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE, env={**environment, **(env or {})})


def test_replayed_traces_pass_and_print_the_table(trace_paths):
    run = selftest("--replay", *map(str, trace_paths.values()))
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("GPU: NVIDIA H200 (132 SMs), driver 580.159.04\nSource: recorded traces copy_2GB.json")
    assert "spin_1sm            SM activity       0.76% (1/132) ±50%" in run.stdout
    assert run.stdout.rstrip().endswith("all 22 checks passed")


def test_tampered_trace_fails_with_exit_code_1(trace_paths, tmp_path):
    data = json.loads(trace_paths["copy_2GB"].read_text())
    data["truth"]["tbps"] = 3.0  # the copy claims less than the daemon read
    tampered = tmp_path / "copy.json"
    tampered.write_text(json.dumps(data))
    run = selftest("--replay", str(tampered), str(trace_paths["idle"]), "--markdown")
    assert run.returncode == 1
    assert "| copy_2GB | estimated TB/s | 0.9-1.1x the workload's 3 TB/s | 4.25 TB/s (+41.7%) | FAIL |" in run.stdout
    assert "| idle | bottleneck class | idle | idle (24/24 samples) | PASS |" in run.stdout
    assert run.stdout.rstrip().endswith("1 of 7 checks FAILED")


def test_wrong_peak_in_the_config_fails(trace_paths, tmp_path):
    config = tmp_path / "config.yml"
    config.write_text('peaks:\n  "NVIDIA H200": {tensor_tflops: 700}\n')
    run = selftest("--replay", str(trace_paths["matmul_8192"]), "--config", str(config))
    assert run.returncode == 1
    assert "FAIL" in next(line for line in run.stdout.splitlines() if "busy TFLOP/s" in line)


def test_workload_filter_applies_to_traces(trace_paths):
    run = selftest("--replay", *map(str, trace_paths.values()), "--workload", "idle")
    assert run.returncode == 0 and run.stdout.rstrip().endswith("all 3 checks passed")


def test_bad_trace_or_config_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope.json"
    run = selftest("--replay", str(missing))
    assert run.returncode == 2 and f"trace {missing}: cannot read it" in run.stderr
    config = tmp_path / "config.yml"
    config.write_text("peaks: 3\n")
    run = selftest("--config", str(config))
    assert run.returncode == 2 and "'peaks'" in run.stderr


def fake_modules(tmp_path: Path, **sources: str) -> dict[str, str]:
    for name, source in sources.items():
        (tmp_path / f"{name}.py").write_text(source)
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}


def test_without_pytorch_or_cupy_it_says_what_to_install(tmp_path):
    missing = "raise ImportError('not installed')\n"
    run = selftest(env=fake_modules(tmp_path, torch=missing, cupy=missing))
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1
    assert "selftest cannot run: the selftest needs PyTorch or CuPy with CUDA" in run.stderr
    assert "pip install 'gpu-efficiency-exporter[selftest]'" in run.stderr


def test_pytorch_without_a_gpu_is_a_clear_error(tmp_path):
    no_gpu = "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
    run = selftest(env=fake_modules(tmp_path, torch=no_gpu, cupy="raise ImportError('not installed')\n"))
    assert run.returncode == 2
    assert "PyTorch is installed but sees no CUDA GPU" in run.stderr


def test_cuda_visible_devices_is_refused():
    run = selftest(env={"CUDA_VISIBLE_DEVICES": "1"})
    assert run.returncode == 2 and "unset it and choose the GPU with --gpu" in run.stderr


class CpuEngine:
    """Stands in for the GPU: each operation takes a little host time; spin kernels of many blocks are unavailable."""

    name = "cpu stand-in"
    tensor_dtype = "none"

    def __init__(self) -> None:
        self.matmuls = 0
        self.releases = 0

    def synchronize(self) -> None:
        pass

    def matmul_operands(self, n):
        return n, n

    def matmul(self, a, b):
        self.matmuls += 1
        time.sleep(0.002)

    def copy_buffers(self, nbytes):
        return bytearray(16), bytearray(16)

    def copy(self, source, target):
        raise RuntimeError("CUDA out of memory")

    def tiny_buffer(self, elements):
        return [0] * elements

    def tiny_kernel(self, buffer):
        buffer[0] += 1

    def spin(self, blocks, threads, cycles):
        if blocks > 1:
            raise SelftestUnavailable("needs CuPy for its raw CUDA kernel")
        time.sleep(0.01)

    def release(self) -> None:
        self.releases += 1


def test_runner_keeps_only_samples_inside_each_measured_run(trace_paths):
    backend = ReplayBackend([load_trace(trace_paths["matmul_8192"])])
    device = backend.start()[0]
    sampler = Sampler(backend, 0, 0.1)
    engine = CpuEngine()
    sampler.start()
    started = time.monotonic()
    try:
        readings = run_workloads(engine, sampler, device, ["idle", "matmul_8192", "warp_every_sm", "copy_2GB"], seconds=0.9, warmup=0.1)
    finally:
        sampler.stop()
    elapsed = time.monotonic() - started
    assert [reading.workload for reading in readings] == ["idle", "matmul_8192", "warp_every_sm", "copy_2GB"]
    idle, matmul, warp, copy = readings
    assert idle.truth == {} and warp.samples == [] and warp.error == "skipped: needs CuPy for its raw CUDA kernel"
    assert copy.error == "failed: RuntimeError: CUDA out of memory"
    assert engine.releases == 4
    for reading in (idle, matmul):
        # A replayed window runs from the previous collect: the kept ones follow each other inside
        # the run (however late a busy machine makes the sampler), and fill at most its length.
        assert reading.samples
        for earlier, later in zip(reading.samples, reading.samples[1:]):
            assert later.timestamp - later.window_seconds >= earlier.timestamp - 1e-9
        assert sum(sample.window_seconds for sample in reading.samples) <= elapsed
    assert matmul.samples[0].timestamp - matmul.samples[0].window_seconds >= idle.samples[-1].timestamp
    flops = 2 * MATMUL_N**3 * engine.matmuls
    assert flops / elapsed / 1e12 < matmul.truth["tflops"] <= flops / 0.9 / 1e12 * 1.01


@pytest.mark.slow
def test_scaling_benchmark_prints_its_tables():
    run = subprocess.run([sys.executable, "bench/poll/scaling.py", "--gpus", "1,2", "--scrapes", "3", "--polls", "5"], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(rows) == 3  # 1 and 2 GPUs in the figures, 2 GPUs in the growth table


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA driver")
def test_overhead_benchmark_needs_a_gpu():
    run = subprocess.run([sys.executable, "bench/gpu/compare_nvitop.py", "--parts", "floor"], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert run.returncode == 2
    assert run.stderr.startswith("compare_nvitop: this benchmark needs an NVIDIA GPU: NVML cannot start")


def test_every_workload_reports_the_figure_its_expectation_checks():
    """Each planted workload, run briefly on the CPU stand-in, returns exactly the truth its checks need."""
    from gpueff.commands.selftest.expectations import EXPECTATIONS
    from gpueff.commands.selftest.workloads import WORKLOADS

    class Engine(CpuEngine):
        def copy(self, source, target):
            time.sleep(0.002)

        def spin(self, blocks, threads, cycles):
            time.sleep(0.01)

    assert list(WORKLOADS) == list(EXPECTATIONS)
    device = load_trace(ROOT / "gpueff/traces/h200/idle.json").device(0)
    from gpueff.commands.selftest.workloads import SelftestUnavailable

    with pytest.raises(SelftestUnavailable, match="needs PyTorch"):
        WORKLOADS["train_step"](Engine(), 0.12, device)  # the stand-in is no PyTorch
    for name, workload in WORKLOADS.items():
        if name == "train_step":
            continue
        truth = workload(Engine(), 0.12, device)
        expected = EXPECTATIONS[name].throughput
        assert set(truth) == ({expected} if expected else set()), name
        assert all(value > 0 for value in truth.values()), name


def test_live_path_with_the_nvml_backend_on_a_fake_driver(trace_paths, monkeypatch):
    """The live selftest end to end in-process: the daemon's NvmlBackend reads a fake pynvml that plays
    the spin_1sm recording, while the CPU stand-in runs the workloads (no GPU can exist here)."""
    from fakes.nvml import FakeNvml

    from gpueff.commands.selftest import workloads
    from gpueff.commands.selftest.checks import check_readings, exit_code
    from gpueff.commands.selftest.command import from_gpu, selftest_parser
    from gpueff.pipeline.derive import DeriveSettings

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([load_trace(trace_paths["spin_1sm"])]))
    monkeypatch.setattr(workloads, "load_engine", lambda gpu, prefer: CpuEngine())
    args = selftest_parser().parse_args(["--workload", "spin_1sm", "--workload", "warp_every_sm", "--duration", "2s", "--warmup", "0s", "--interval", "200ms"])
    header, readings = from_gpu(args, args.workload)
    assert header[0] == "GPU: NVIDIA H200 (132 SMs), driver 580.159.04"
    assert header[1].startswith("Source: live run, workloads on cpu stand-in")
    results = check_readings(readings, DeriveSettings())
    assert [(r.workload, r.check, r.passed) for r in results] == [
        ("spin_1sm", "bottleneck class", True),
        ("spin_1sm", "class stability", True),
        ("spin_1sm", "mismatch", True),
        ("spin_1sm", "SM activity", True),
        ("warp_every_sm", "run", False),
    ]
    assert 5 <= len(readings[0].samples) <= 10  # 200 ms windows wholly inside the 2 s run
    assert exit_code(results) == 1
