"""The peaks table: every row is a dense data-sheet figure per pipe, named by its source, listed in
docs/peaks.md; overrides win field by field; an unknown model has none."""

from __future__ import annotations

import subprocess
import sys

import pytest
from repo import ROOT
from waiting import PATIENCE

from gpueff.peaks import (
    BUILTIN_PEAKS,
    OVERRIDE_FIELDS,
    SPECS,
    UNSOURCED,
    PeakOverride,
    device_peak,
    peak_for,
    unknown_model_note,
)
from gpueff.sample import DeviceInfo
from gpueff.settings import parse_config

DOCS = (ROOT / "docs" / "peaks.md").read_text(encoding="utf-8")
FLEET = ("V100", "T4", "A2", "A10", "A16", "A30", "A40", "A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIE-40GB", "A100 80GB PCIe", "A800-SXM4-40GB", "A800",
         "L4", "L40", "L40S", "RTX 6000 Ada", "H100 PCIe", "H100 80GB HBM3", "H100 NVL", "H800", "H20", "H200", "H200 NVL", "GH200 120GB", "GH200", "B200", "GB200")
# NVML names current datacenter drivers report that once got no estimate: each now has a row (sourced or derived) or a stated reason
REPORTED = ("NVIDIA H100", "NVIDIA GH200 120GB", "NVIDIA A10G", "NVIDIA L20", "NVIDIA L2", "NVIDIA A2", "NVIDIA A800-SXM4-40GB", "NVIDIA A100-SXM-64GB", "NVIDIA H20-3e",
            "NVIDIA H800 PCIe", "NVIDIA GH200 144G HBM3e", "NVIDIA B300 SXM6 AC")


def mig_device(sm_count: int) -> DeviceInfo:
    return DeviceInfo(index=0, uuid="MIG-x", name="", sm_count=sm_count, parent_uuid="GPU-x")


@pytest.mark.parametrize("model", FLEET)
def test_the_fleet_users_run_is_in_the_table(model):
    assert any(model in name for name in SPECS), model


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_row_is_consistent_dense_and_sourced(name):
    spec = SPECS[name]
    assert (spec.source.startswith("NVIDIA ") or spec.derivation) and spec.bf16 is not None and spec.fp32 is not None and spec.dram_tbps > 0
    if spec.fp8 is not None:  # FP8 runs at twice the BF16 rate on the same pipe, TF32 at half
        assert spec.fp8 == pytest.approx(2 * spec.bf16, rel=0.02)
    if spec.tf32 is not None:
        assert spec.tf32 == pytest.approx(spec.bf16 / 2, rel=0.03)
    if spec.int8 is not None:
        assert spec.int8 >= spec.bf16
    for pipe in (spec.fp64_tensor, spec.fp64, spec.fp32, spec.fp16):
        assert pipe is None or pipe < spec.bf16  # no non-tensor or FP64 pipe outruns the BF16 tensor pipe
    assert f"`{name}`" in DOCS and spec.source in DOCS and spec.derivation in DOCS


def test_the_h100_sxm_peaks_match_the_measured_roofs():
    peak = BUILTIN_PEAKS["NVIDIA H100 80GB HBM3"]
    assert (peak.tensor_flops, peak.tensor_fp64_flops, peak.fp32_flops, peak.tensor_int8_ops) == (989.4e12, pytest.approx(66.9e12), pytest.approx(66.9e12), 1978.9e12)
    assert peak.sm_count == 132 and peak.dram_bytes_per_second == 3.35e12


def test_names_match_as_nvml_returns_them_and_nothing_close():
    assert peak_for(" nvidia h200 ") == BUILTIN_PEAKS["NVIDIA H200"]
    assert peak_for("NVIDIA GH200 480GB") != peak_for("NVIDIA H200")  # GH200 is not an H200
    assert peak_for("NVIDIA H200 MIG 1g.18gb") is None and peak_for("NVIDIA Future GPU") is None


def test_every_override_key_reaches_its_peak_field():
    config = parse_config({"peaks": {"NVIDIA Future GPU": {key: 2.0 for key in OVERRIDE_FIELDS}}})
    peak = peak_for("NVIDIA Future GPU", config.peaks)
    for key, (field, scale) in OVERRIDE_FIELDS.items():
        assert getattr(peak, field) == 2.0 * scale, key
    h200 = peak_for("NVIDIA H200", {"NVIDIA H200": PeakOverride(fp32_tflops=50)})
    assert h200.fp32_flops == 50e12 and h200.tensor_flops == 989.4e12  # field by field


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_clock_basis_is_physical(name):
    """figure / (SMs x per-SM rate) must land near the CUDA cores' clock: a wrong rate is off by a power of two."""
    spec = SPECS[name]
    fp32 = spec.basis_mhz("fp32")
    pipes = ("bf16", "fp8", "tf32", "int8", "fp64_tensor", "fp64", "fp16")
    if fp32 is None:
        assert all(spec.basis_mhz(pipe) is None for pipe in pipes)
        return
    assert 1000 <= fp32 <= 2600
    for pipe in pipes:
        basis = spec.basis_mhz(pipe)
        assert basis is None or 0.85 <= basis / fp32 <= 1.02, (pipe, basis, fp32)
    assert BUILTIN_PEAKS[name].basis_mhz("fp32_flops") == fp32


def test_hopper_quotes_its_tensor_pipes_at_1830_and_fp32_at_1980():
    peak = BUILTIN_PEAKS["NVIDIA H100 80GB HBM3"]
    assert peak.basis_mhz("tensor_flops") == pytest.approx(1830, abs=1) and peak.basis_mhz("tensor_int8_ops") == pytest.approx(1830, abs=1)
    assert peak.basis_mhz("fp32_flops") == pytest.approx(1980, abs=1) and peak.basis_mhz("tensor_fp64_flops") == pytest.approx(1980, abs=1)


def test_a_config_figure_has_no_derived_basis():
    h200 = peak_for("NVIDIA H200", {"NVIDIA H200": PeakOverride(tensor_tflops=900)})
    assert h200.basis_mhz("tensor_flops") is None and h200.basis_mhz("fp32_flops") == pytest.approx(1980, abs=1)


def test_the_docs_table_is_generated_from_the_code():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "peaks_table.py"), "--check"], capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", REPORTED)
def test_every_reported_name_has_a_sourced_row_or_a_reason(name):
    assert (name in SPECS) != (name in UNSOURCED), name


@pytest.mark.parametrize("name", sorted(UNSOURCED))
def test_a_name_without_a_sourced_figure_gets_no_estimate_and_the_log_says_why(name):
    assert peak_for(name) is None and peak_for(f" {name.lower()} ") is None
    assert UNSOURCED[name] in unknown_model_note(f" {name.upper()}")
    assert f"`{name}`" in DOCS


@pytest.mark.parametrize("name", ["NVIDIA H100 80GB HBM3 MIG 1g.10gb", "nvidia h100 80gb hbm3 mig 1g", " NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb "])
def test_a_mig_instance_gets_its_share_of_its_gpus_compute_by_its_sms(name):
    """NVML names a MIG device '<GPU> MIG <profile>' (DCGM here: '<GPU> MIG <n>g'); its SMs run at the GPU's clocks."""
    full, mig = BUILTIN_PEAKS["NVIDIA H100 80GB HBM3"], peak_for(name, device=mig_device(16))
    assert mig.tensor_flops == pytest.approx(full.tensor_flops * 16 / 132) and mig.fp32_flops == pytest.approx(full.fp32_flops * 16 / 132)
    assert mig.tensor_int8_ops == pytest.approx(full.tensor_int8_ops * 16 / 132) and mig.sm_count == 16
    assert mig.basis_mhz("tensor_flops") == full.basis_mhz("tensor_flops")
    assert mig.dram_bytes_per_second is None and mig.pcie_bytes_per_second is None and mig.nvlink_bytes_per_second is None
    assert "MIG instance of 16 of its 132 SMs" in mig.source


def test_a_mig_instance_without_a_known_gpu_or_sm_count_gets_nothing():
    assert peak_for("NVIDIA H100 80GB HBM3 MIG 1g.10gb") is None  # no SM count
    assert peak_for("NVIDIA H100 80GB HBM3 MIG 1g.10gb", device=mig_device(133)) is None  # more SMs than the GPU has
    assert peak_for("NVIDIA Future GPU MIG 1g.10gb", device=mig_device(16)) is None
    assert peak_for("NVIDIA GB200 MIG 1g.23gb", device=mig_device(16)) is None  # its SM count is not published
    given = peak_for("NVIDIA H100 80GB HBM3 MIG 1g.10gb", {"NVIDIA H100 80GB HBM3 MIG 1g.10gb": PeakOverride(dram_tbps=0.4)}, device=mig_device(16))
    assert given.dram_bytes_per_second == 0.4e12 and given.tensor_flops is None  # a config row for the MIG name is taken as it is


def nvml_device(name: str, sms: int, sm_mhz: float, capability: tuple[int, int], bus_bits: int | None, memory_mhz: float | None) -> DeviceInfo:
    return DeviceInfo(index=0, uuid="GPU-x", name=name, sm_count=sms, max_sm_clock_mhz=sm_mhz, compute_capability=capability,
                      memory_bus_width_bits=bus_bits, max_memory_clock_mhz=memory_mhz)


# What NVML / the CUDA device query report on real cards: SMs, max SM clock, compute capability, bus width, max memory clock
REPORTED_FACTS = {
    "NVIDIA H100 80GB HBM3": (132, 1980, (9, 0), 5120, 2619),  # public CUDA device query
    "NVIDIA A100-SXM4-40GB": (108, 1410, (8, 0), 5120, 1215),  # public CUDA device query
    "NVIDIA A10": (72, 1695, (8, 6), 384, 6251),  # public CUDA device query (GDDR6 12.5 Gb/s)
    "NVIDIA H200": (132, 1980, (9, 0), 6016, 3201),  # read on the device, driver 580.159.04 (evidence/2026-11-28-h200/peaks)
}


@pytest.mark.parametrize("name", sorted(REPORTED_FACTS))
def test_the_derivation_from_the_device_reproduces_the_published_figures(name):
    """Each pipe's rate per clock equals the data sheet's (figure / its basis); a figure quoted at the
    boost clock comes out within 1 %; DRAM = bus / 8 x 2 x max memory clock within 1 %."""
    derived, published = device_peak(nvml_device(name, *REPORTED_FACTS[name])), BUILTIN_PEAKS[name]
    assert derived is not None and derived.source.startswith("derived from the device (NVML)")
    for field, _ in published.clock_basis_mhz:
        if getattr(derived, field) is None:  # a tensor pipe whose rate differs between parts of this capability
            continue
        per_clock = getattr(derived, field) / derived.basis_mhz(field) / (getattr(published, field) / published.basis_mhz(field))
        assert per_clock == pytest.approx(1, abs=0.01), field
    assert derived.fp32_flops == pytest.approx(published.fp32_flops, rel=0.01)
    assert derived.dram_bytes_per_second == pytest.approx(published.dram_bytes_per_second, rel=0.01)


def test_hopper_derived_at_the_max_clock_reads_its_tensor_figure_at_1980_not_the_data_sheets_1830():
    derived = device_peak(nvml_device("NVIDIA H100", *REPORTED_FACTS["NVIDIA H100 80GB HBM3"]))
    assert derived.tensor_flops == pytest.approx(989.4e12 * 1980 / 1830, rel=0.002) and derived.basis_mhz("tensor_flops") == 1980


@pytest.mark.parametrize("name", REPORTED)
def test_every_reported_name_resolves_to_figures(name):
    """A name with a row resolves by itself; one no row can stand for, from its device (here: an H100 SXM's facts)."""
    device = nvml_device(name, *REPORTED_FACTS["NVIDIA H100 80GB HBM3"])
    peak = peak_for(name) if name in SPECS else peak_for(name, device=device)
    assert peak is not None and peak.fp32_flops and peak.dram_bytes_per_second


def test_a_row_wins_over_the_device_and_the_config_over_both():
    device = nvml_device("NVIDIA H200", *REPORTED_FACTS["NVIDIA H200"])
    assert peak_for("NVIDIA H200", device=device) == BUILTIN_PEAKS["NVIDIA H200"]
    given = peak_for("NVIDIA H100", {"NVIDIA H100": PeakOverride(dram_tbps=3.9)}, device=device)
    assert given.dram_bytes_per_second == 3.9e12 and given.fp32_flops == pytest.approx(132 * 256 * 1980e6)


@pytest.mark.parametrize("device", [
    nvml_device("NVIDIA Future GPU", 200, 2000, (13, 0), 8192, 4000),  # an architecture whose per-SM rates are not known
    nvml_device("NVIDIA Future GPU", 200, 2000, None, 8192, 4000),  # (capability not reported)
    nvml_device("NVIDIA Future GPU", None, 2000, (9, 0), 8192, 4000),
])
def test_an_unknown_architecture_still_gets_no_estimate_and_the_log_says_why(device):
    assert peak_for(device.name, device=device) is None
    assert "not in the built-in peaks table" in unknown_model_note(device.name)


def test_a_capability_whose_parts_differ_in_tensor_rate_gets_its_cuda_core_pipes_only():
    derived = device_peak(nvml_device("NVIDIA L2", 58, 2040, (8, 9), 192, 6251))
    assert derived.tensor_flops is None and derived.tensor_int8_ops is None
    assert derived.fp32_flops == pytest.approx(58 * 256 * 2040e6) and derived.dram_bytes_per_second == pytest.approx(300e9, rel=0.001)


def test_a_derived_row_is_its_sms_times_its_rates_times_its_boost():
    a10g = SPECS["NVIDIA A10G"]
    assert a10g.bf16 == pytest.approx(80 * 512 * 1710e6 / 1e12, rel=1e-3) and a10g.basis_mhz("bf16") == pytest.approx(1710, rel=1e-3)
    assert a10g.dram_tbps == pytest.approx(0.6) and "80 SMs x" in BUILTIN_PEAKS["NVIDIA A10G"].source


def test_every_peak_says_where_its_figures_come_from():
    """gpueff_peak_info{origin}: the marker that tells a derived figure from a data sheet's."""
    device = nvml_device("NVIDIA H100", *REPORTED_FACTS["NVIDIA H100 80GB HBM3"])
    assert BUILTIN_PEAKS["NVIDIA H200"].origin == "data_sheet" and BUILTIN_PEAKS["NVIDIA A10G"].origin == "derived"
    assert peak_for("NVIDIA H100", device=device).origin == "device"
    assert peak_for("NVIDIA H200", {"NVIDIA H200": PeakOverride(fp32_tflops=50)}).origin == "config"
    assert {spec.peak().origin for spec in SPECS.values()} == {"data_sheet", "derived"}
