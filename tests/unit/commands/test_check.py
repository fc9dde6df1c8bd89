"""``gpu-efficiency-exporter check`` against the fake DCGM bindings and the fake pynvml."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from fakes.nvml import FakeGpu, FakeNvml
from waiting import PATIENCE

from gpueff.backends.dcgm.backend import DcgmBackend
from gpueff.backends.dcgm.bindings import load_bindings
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.commands import check
from gpueff.settings import parse_config
from gpueff.trace import load_trace

FAKE = str(ROOT / "tests" / "support" / "fakes" / "dcgm")


def run_check(*args: str, **env: str) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-m", "gpueff", "check", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE,
        env={**os.environ, **env},
    )
    return result.returncode, result.stdout + result.stderr


def nvml_usable() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


def test_check_lists_backends_and_fields_and_exits_0_with_dcgm_profiling(trace_paths):
    code, output = run_check("--dcgm.bindings-path", FAKE, FAKE_DCGM_TRACES=str(trace_paths["matmul_8192"]))
    assert code == 0, output
    assert "dcgm  works: embedded host engine, bindings from" in output and "profiling fields answer" in output
    assert "auto  would use: dcgm" in output
    assert "GPU 0  NVIDIA H200  GPU-fakedcgm-0-matmul_8192" in output
    # Only the fake DCGM GPU's block: on a machine with a GPU, NVML lists that GPU too, with rows of the same names.
    block = next(each for each in output.split("\nGPU ") if each.startswith("0  NVIDIA H200  GPU-fakedcgm-0-matmul_8192"))
    lines = {line.split()[0]: line for line in block.splitlines() if line.startswith("  ") and len(line.split()) > 1}
    assert lines["sm_active"].rstrip().endswith("DCGM_FI_PROF_SM_UTIL_RATIO (1002)")
    assert "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS (140): blank" in lines["memory_temperature_celsius"]
    assert "(no DCGM field)" in lines["process_count"]
    assert "dcgm profiling fields: supported 1001,1002,1003,1004,1005,1006,1007,1008,1009,1010,1011,1012,1013,1014,1015,1016; watched 1001," in output


def test_check_reports_per_gpu_which_profiling_fields_dcgm_supports_and_watches(trace_paths):
    traces = os.pathsep.join(str(trace_paths[name]) for name in ("matmul_8192", "idle", "idle"))
    code, output = run_check("--dcgm.bindings-path", FAKE, FAKE_DCGM_TRACES=traces, FAKE_DCGM_GPUS="ampere,l4,pascal")
    gpus = output.split("\nGPU ")[1:]
    assert "dcgm profiling fields: supported 1001,1002,1003,1004,1005,1006,1007,1008,1009,1010,1011,1012,1013,1014,1015,1016; watched 1001,1002,1003,1004,1005,1007,1009,1010,1011,1012; not watched 1006,1008,1013,1014,1015,1016" in gpus[0]
    assert "DCGM_FI_PROF_FP64_UTIL_RATIO (1006): not watched: not in the single pass (--dcgm.multi-pass watches it)" in gpus[0]
    assert "dcgm profiling fields: supported 1001,1002,1003,1004,1005,1006,1007,1008,1009,1010; watched 1001,1002,1003,1004,1005,1007,1009,1010; not watched 1006,1008" in gpus[1]
    assert "DCGM_FI_PROF_NVLINK_TX_BYTES (1011): not supported on this GPU" in gpus[1]
    assert "dcgm profiling fields: none (DCGM_ST_NOT_SUPPORTED: this GPU does not support profiling metrics" in gpus[2]
    code, output = run_check("--dcgm.bindings-path", FAKE, "--dcgm.multi-pass", FAKE_DCGM_TRACES=traces, FAKE_DCGM_GPUS="ampere,l4,pascal")
    assert "watched 1001,1002,1003,1004,1005,1006,1007,1008,1009,1010,1011,1012,1013,1014,1015,1016\n" in output.split("\nGPU ")[1]


def test_check_exits_1_when_profiling_is_refused(trace_paths):
    code, output = run_check("--dcgm.bindings-path", FAKE, FAKE_DCGM_TRACES=str(trace_paths["idle"]), FAKE_DCGM_PROFILING="DCGM_ST_IN_USE")
    if not nvml_usable():  # with a GPU here, NVML decides the status
        assert code == 1, output
    assert "profiling fields refused: DCGM_ST_IN_USE" in output
    assert "DCGM_FI_PROF_SM_UTIL_RATIO (1002): not watched, refused (DCGM_ST_IN_USE: another profiler" in output


def test_check_exits_2_when_no_live_backend_works(tmp_path):
    if nvml_usable():
        pytest.skip("this machine has a GPU: NVML works, so 'nothing works' cannot be shown here")
    code, output = run_check("--dcgm.bindings-path", str(tmp_path))
    assert code == 2, output
    assert f"dcgm  not usable: DCGM Python bindings not found: looked in {tmp_path}" in output
    assert "nvml  not usable:" in output and "auto  would use: nothing" in output


def test_check_puts_both_backends_side_by_side_per_gpu(trace_paths):
    load_bindings(FAKE)
    import fake_hostengine

    fake_hostengine.reset()
    fake_hostengine.CONTROL.traces = [str(trace_paths["matmul_8192"])]
    nvml = FakeNvml([FakeGpu(load_trace(trace_paths["matmul_8192"]), uuid="GPU-fakedcgm-0-matmul_8192")])
    out = io.StringIO()
    try:
        code = check.run(lambda: DcgmBackend(FAKE, collect_interval=0.1, slow_interval=1.0), lambda: NvmlBackend(slow_interval=1.0, nvml=nvml), out)
    finally:
        fake_hostengine.reset()
    text = out.getvalue()
    assert code == 0, text
    assert "nvml  works: 1 GPU(s); GPM on every GPU" in text and text.count("\nGPU ") == 1
    sm_row = next(line for line in text.splitlines() if line.strip().startswith("sm_active"))
    nvml_value, dcgm_value = sm_row.split()[1:3]
    assert nvml_value != "-" and dcgm_value != "-"


def test_check_says_nvml_without_gpm_gives_no_profiling(trace_paths, tmp_path):
    nvml = FakeNvml([FakeGpu(load_trace(trace_paths["idle"]), gpm=False)])
    out = io.StringIO()
    code = check.run(lambda: DcgmBackend(str(tmp_path)), lambda: NvmlBackend(slow_interval=1.0, nvml=nvml), out)
    assert code == 1, out.getvalue()
    assert "nvml  works: 1 GPU(s); no GPM on any GPU" in out.getvalue()
    assert "auto  would use: nvml" in out.getvalue() and "not SM activity on every one" in out.getvalue()


def test_a_usage_error_is_one_line_like_the_other_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        check.main(["--no-such-flag"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "--no-such-flag" in err and "(see --help)" in err


def test_the_subcommands_do_not_import_the_command_line_back():
    code = "import sys, gpueff.commands.check, gpueff.commands.selftest.command, gpueff.commands.record; assert 'gpueff.commands.cli' not in sys.modules, 'import cycle'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=PATIENCE)


def test_check_says_whose_each_gpu_is_and_why_not(trace_paths, tmp_path):
    proc = tmp_path / "proc"
    (proc / "41").mkdir(parents=True)
    (proc / "41" / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n")
    (proc / "41" / "comm").write_text("train\n")
    idle = load_trace(trace_paths["idle"])
    nvml = FakeNvml([FakeGpu(idle, processes=[(41, 1 << 30, "train")]), FakeGpu(idle)])
    out = io.StringIO()
    config = parse_config({"proc_root": str(proc), "kubernetes": {"enabled": True, "pod_resources_socket": str(tmp_path / "none.sock")}})
    check.run(lambda: DcgmBackend(str(tmp_path)), lambda: NvmlBackend(slow_interval=1.0, nvml=nvml), out, config=config)
    text = out.getvalue()
    section = text.split("Whose GPU (gpueff_gpu_attribution_info; each reason in docs/troubleshooting.md#whose-gpu-gpueff_gpu_attribution_info):\n", 1)[1]
    lines = section.splitlines()
    assert lines[0] == "  GPU 0  path=slurm_cgroup  reason=attribution_off" and "turn sharing.enabled on" in lines[1]
    assert lines[2] == "  GPU 1  path=none  reason=socket_missing" and "pod-resources socket is not mounted" in lines[3]


def test_check_refuses_a_config_file_that_is_not_valid(tmp_path, capsys, restore_logging):
    bad = tmp_path / "config.yml"
    bad.write_text("sharing: {enabled: maybe}\n")
    assert check.main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "sharing.enabled" in err
