"""Peak figures per GPU model, per pipe: the denominators of the achieved FLOP/s and bandwidth
estimates.

Every figure is dense (no 2:4 sparsity), from NVIDIA's data sheets (or, where a data sheet leaves a
pipe out, the architecture whitepaper's per-SM rate); the source of each row is named in ``source``
and docs/peaks.md lists the table. A data sheet quotes each pipe at its own clock: Hopper's tensor
figures at ~1830 MHz on an H100 SXM, its FP32/FP64 figures at the 1980 MHz boost. Each figure's
clock basis is derived, not assumed: figure / (SMs x the architecture's dense operations per clock
per SM, ``Rates``); an estimate scales the figure by the SM clock over that basis. A pipe a model does not have (Volta
has no BF16, TF32, FP8 or INT8 tensor cores; only GA100/GH100/GB100 have FP64 tensor cores) or that
no NVIDIA document gives a figure for is None: that pipe gets no estimate rather than a wrong one.

A part NVIDIA publishes no data sheet for is derived from physics, and its row says how
(``derivation``): its SMs x its architecture's per-SM rates x its boost clock, DRAM = bus width / 8 x
data rate per pin. A model in no row (and not in the config's ``peaks:``) is derived the same way from
what NVML reports on the device itself (``device_peak``: SM count, max SM clock, compute capability,
memory bus width, max memory clock), where its compute capability names an architecture whose
per-SM rates are known; otherwise it gets no estimate at all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any

from gpueff.config.engine import load_section, setting
from gpueff.config.values import cut, optional, positive, shown
from gpueff.sample import DeviceInfo

TERA = 1e12


@dataclass(frozen=True)
class PeakOverride:
    tensor_tflops: float | None = setting(None, optional(positive), "dense BF16/FP16 tensor TFLOP/s (the HMMA pipe)")
    fp8_tflops: float | None = setting(None, optional(positive), "dense FP8 tensor TFLOP/s")
    tf32_tflops: float | None = setting(None, optional(positive), "dense TF32 tensor TFLOP/s")
    int8_tops: float | None = setting(None, optional(positive), "dense INT8 tensor TOP/s (the IMMA pipe)")
    fp64_tensor_tflops: float | None = setting(None, optional(positive), "FP64 tensor TFLOP/s (the DMMA pipe)")
    fp64_tflops: float | None = setting(None, optional(positive), "non-tensor FP64 TFLOP/s")
    fp32_tflops: float | None = setting(None, optional(positive), "non-tensor FP32 TFLOP/s")
    fp16_tflops: float | None = setting(None, optional(positive), "non-tensor FP16 TFLOP/s")
    dram_tbps: float | None = setting(None, optional(positive), "DRAM bandwidth in TB/s")
    pcie_gbps: float | None = setting(None, optional(positive), "PCIe bandwidth per direction in GB/s")
    nvlink_gbps: float | None = setting(None, optional(positive), "NVLink bandwidth per direction in GB/s")


def peak_overrides(value: Any) -> dict[str, PeakOverride]:
    """The ``peaks:`` config key: GPU model name -> the figures that replace the built-in ones."""
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of GPU model name to peak figures, got {shown(value)}")
    return {str(name): load_section(PeakOverride, spec, f"peaks.{cut(str(name))}") for name, spec in value.items()}


@dataclass(frozen=True, slots=True)
class Peak:
    tensor_flops: float | None  # HMMA tensor pipe, dense BF16/FP16 with FP32 accumulate, FLOP/s (Volta: FP16)
    dram_bytes_per_second: float | None
    pcie_bytes_per_second: float | None  # per direction
    nvlink_bytes_per_second: float | None  # per direction, all links
    tensor_fp8_flops: float | None = None  # the same HMMA pipe at FP8 (Ada, Hopper, Blackwell)
    tensor_tf32_flops: float | None = None  # the same HMMA pipe at TF32
    tensor_int8_ops: float | None = None  # IMMA tensor pipe, INT8 operations per second
    tensor_fp64_flops: float | None = None  # DMMA (FP64 tensor) pipe
    fp64_flops: float | None = None  # non-tensor FP64 (FMA = 2 FLOP)
    fp32_flops: float | None = None  # non-tensor FP32
    fp16_flops: float | None = None  # non-tensor FP16 (packed half2)
    sm_count: int | None = None
    source: str = field(default="", compare=False)
    clock_basis_mhz: tuple[tuple[str, float], ...] = ()  # (Peak field, the SM clock its figure is quoted at)
    sync_mma_share: float | None = None  # Rates.sync_mma_share of the model's architecture; None where unknown
    # where the figures come from (gpueff_peak_info{origin}): data_sheet, derived (a row derived from
    # physics), device (the GPU's own NVML facts) or config (the config's peaks: set at least one)
    origin: str = field(default="data_sheet", compare=False)

    def basis_mhz(self, peak_field: str) -> float | None:
        """The SM clock the figure in ``peak_field`` is quoted at; None where it could not be derived."""
        return next((mhz for name, mhz in self.clock_basis_mhz if name == peak_field), None)


@dataclass(frozen=True, slots=True)
class Rates:
    """Dense operations per clock per SM of each pipe (an FMA counts 2), from NVIDIA's architecture
    whitepapers: what turns a data-sheet figure into the SM clock it is quoted at."""

    name: str
    bf16: int | None
    fp8: int | None
    tf32: int | None
    int8: int | None
    fp64_tensor: int | None
    fp64: int | None
    fp32: int
    fp16: int | None
    source: str
    # The work a busy tensor-pipe cycle does on the warp-synchronous mma.sync path, as a share of the
    # data sheet's rate: 1 where the data sheet quotes mma.sync (Volta to Ada); Hopper quotes the
    # asynchronous wgmma, and mma.sync kernels (torch._int_mm's cuBLASLt INT8 GEMM) yield 2/3 of it per
    # busy cycle, measured on the H100 and H200 (docs/peaks.md); None where not measured (Blackwell).
    sync_mma_share: float | None = 1.0


VOLTA = Rates("Volta", 1024, None, None, None, None, 64, 128, 256, "Volta whitepaper: 8 tensor cores x 64 FP16 FMA per SM, 64 FP32 and 32 FP64 lanes")
TURING = Rates("Turing", 1024, None, None, 2048, None, 4, 128, 256, "Turing whitepaper: 8 tensor cores x 64 FP16 FMA per SM, INT8 twice that; FP64 1/32 of FP32")
AMPERE_GA100 = Rates("Ampere GA100", 2048, None, 1024, 4096, 128, 64, 128, 512, "A100 whitepaper: 4 tensor cores x 256 FP16 FMA per SM, 64 FP32 and 32 FP64 lanes")
AMPERE_GA10X = Rates("Ampere GA10x", 1024, None, 512, 2048, None, None, 256, 256, "GA102 whitepaper: 4 tensor cores x 128 FP16 FMA per SM (full rate with FP32 accumulate on data-centre parts), 128 FP32 lanes")
ADA = Rates("Ada", 1024, 2048, 512, 2048, None, None, 256, 256, "Ada whitepaper: 4 tensor cores x 128 FP16 FMA per SM with FP32 accumulate, FP8 and INT8 twice that, 128 FP32 lanes")
ADA_HALF = Rates("Ada, half-rate accumulate", 512, 1024, 256, 1024, None, None, 256, 256, "Ada at half-rate FP32 accumulate: the L40 data sheet's every tensor figure is half the L40S's at the same clock")
AMPERE_GA10X_HALF = Rates("Ampere GA10x, half-rate accumulate", 512, None, 256, 2048, None, None, 256, 256, "GA102 whitepaper, GeForce rates: FP16/BF16 with FP32 accumulate and TF32 at half the data-centre rate, INT8 at the full rate")
HOPPER = Rates("Hopper GH100", 4096, 8192, 2048, 8192, 256, 128, 256, 512, "H100 whitepaper: 4 tensor cores x 512 FP16 FMA per SM (wgmma), FP8 and INT8 twice that, 128 FP32 and 64 FP64 lanes",
                2 / 3)
BLACKWELL = Rates("Blackwell B200", 8192, 16384, 4096, 16384, 128, 128, 256, None, "twice Hopper's dense tensor rate per SM: the only power of two that puts each basis under the B200's boost clock (NVIDIA publishes no per-SM rate)",
                      None)
BLACKWELL_ULTRA = Rates("Blackwell Ultra B300", 8192, 16384, 4096, None, None, None, 256, None, "B200's per-SM rates: the HGX B300 data sheet's BF16, FP8, TF32 and FP32 figures equal the HGX B200's on the same 148 SMs; FP64 and INT8 are cut on this silicon (1.25 TFLOP/s FP64): no per-SM rate",
                        None)
ARCHITECTURES = (VOLTA, TURING, AMPERE_GA100, AMPERE_GA10X, AMPERE_GA10X_HALF, ADA, ADA_HALF, HOPPER, BLACKWELL, BLACKWELL_ULTRA)


@dataclass(frozen=True, slots=True)
class Spec:
    """One data-sheet row, TFLOP/s (TOP/s for INT8), TB/s and GB/s as NVIDIA prints them (dense)."""

    bf16: float | None
    fp8: float | None
    tf32: float | None
    int8: float | None
    fp64_tensor: float | None
    fp64: float | None
    fp32: float | None
    fp16: float | None
    dram_tbps: float
    pcie_gbps: float | None
    nvlink_gbps: float | None
    sms: int | None
    source: str
    rates: Rates | None = None  # None: the per-SM rates are not the architecture's (export-limited parts), so no basis
    derivation: str = ""  # how the figures no NVIDIA document gives were derived; "" for a data-sheet row

    def basis_mhz(self, pipe: str) -> float | None:
        """The SM clock the data sheet's ``pipe`` figure is quoted at: figure / (SMs x per-SM rate)."""
        figure: float | None = getattr(self, pipe)
        rate: int | None = getattr(self.rates, pipe) if self.rates is not None else None
        if figure is None or rate is None or not self.sms:
            return None
        return figure * TERA / (self.sms * rate) / 1e6

    def peak(self) -> Peak:
        def tera(value: float | None) -> float | None:
            return None if value is None else value * TERA

        return Peak(
            tensor_flops=tera(self.bf16),
            dram_bytes_per_second=self.dram_tbps * TERA,
            pcie_bytes_per_second=None if self.pcie_gbps is None else self.pcie_gbps * 1e9,
            nvlink_bytes_per_second=None if self.nvlink_gbps is None else self.nvlink_gbps * 1e9,
            tensor_fp8_flops=tera(self.fp8),
            tensor_tf32_flops=tera(self.tf32),
            tensor_int8_ops=tera(self.int8),
            tensor_fp64_flops=tera(self.fp64_tensor),
            fp64_flops=tera(self.fp64),
            fp32_flops=tera(self.fp32),
            fp16_flops=tera(self.fp16),
            sm_count=self.sms,
            source=f"{self.source}; derived: {self.derivation}" if self.derivation else self.source,
            clock_basis_mhz=tuple((field, mhz) for pipe, field in SPEC_PIPES if (mhz := self.basis_mhz(pipe)) is not None),
            sync_mma_share=self.rates.sync_mma_share if self.rates is not None else None,
            origin="derived" if self.derivation else "data_sheet",
        )


# Spec column -> the Peak field its figure fills (the compute pipes: the ones a clock basis applies to)
SPEC_PIPES = (("bf16", "tensor_flops"), ("fp8", "tensor_fp8_flops"), ("tf32", "tensor_tf32_flops"), ("int8", "tensor_int8_ops"),
              ("fp64_tensor", "tensor_fp64_flops"), ("fp64", "fp64_flops"), ("fp32", "fp32_flops"), ("fp16", "fp16_flops"))


def dram_tbps(bus_bits: int, gbps_per_pin: float) -> float:
    """DRAM bandwidth from the interface, TB/s: bus width / 8 x the data rate per pin."""
    return bus_bits / 8 * gbps_per_pin / 1000


def derived(rates: Rates, sms: int, boost_mhz: float, bus_bits: int, gbps_per_pin: float, pcie_gbps: float | None, nvlink_gbps: float | None, source: str) -> Spec:
    """A part no NVIDIA data sheet gives figures for: each pipe = SMs x the architecture's per-SM
    rate x the boost clock (so every basis is the boost clock), DRAM from its interface."""

    def pipe(rate: int | None) -> float | None:
        return None if rate is None else round(sms * rate * boost_mhz * 1e6 / TERA, 2)

    dram = dram_tbps(bus_bits, gbps_per_pin)
    how = f"{sms} SMs x {rates.name} per-SM rates x {boost_mhz:g} MHz boost; DRAM {bus_bits} bit / 8 x {gbps_per_pin:g} Gb/s = {dram:.3g} TB/s"
    return Spec(pipe(rates.bf16), pipe(rates.fp8), pipe(rates.tf32), pipe(rates.int8), pipe(rates.fp64_tensor), pipe(rates.fp64), pipe(rates.fp32), pipe(rates.fp16),
                round(dram, 3), pcie_gbps, nvlink_gbps, sms, source, rates=rates, derivation=how)


# PCIe per direction: Gen3 x16 16 GB/s, Gen4 x16 32 GB/s, Gen5 x16 64 GB/s. NVLink per direction:
# half the data sheet's bidirectional total.
_V100_SXM2 = Spec(125, None, None, None, None, 7.8, 15.7, 31.4, 0.9, 16, 150, 80, "NVIDIA V100 data sheet (SXM2); FP16 non-tensor: Volta whitepaper (2x FP32)", rates=VOLTA)
_V100_PCIE = Spec(112, None, None, None, None, 7.0, 14.0, 28.0, 0.9, 16, None, 80, "NVIDIA V100 data sheet (PCIe); FP16 non-tensor: Volta whitepaper (2x FP32)", rates=VOLTA)
_V100S_PCIE = Spec(130, None, None, None, None, 8.2, 16.4, 32.8, 1.134, 16, None, 80, "NVIDIA V100S data sheet; FP16 non-tensor: Volta whitepaper (2x FP32)", rates=VOLTA)
_T4 = Spec(65, None, None, 130, None, 0.25, 8.1, 16.2, 0.32, 16, None, 40, "NVIDIA T4 data sheet; FP64 and FP16 non-tensor: Turing whitepaper (1/32 and 2x FP32)", rates=TURING)
_A100_SXM_40 = Spec(312, None, 156, 624, 19.5, 9.7, 19.5, 78, 1.555, 32, 300, 108, "NVIDIA A100 data sheet (SXM4 40GB); FP16 non-tensor: A100 whitepaper", rates=AMPERE_GA100)
_A100_SXM_80 = replace(_A100_SXM_40, dram_tbps=2.039, source="NVIDIA A100 data sheet (SXM4 80GB); FP16 non-tensor: A100 whitepaper")
_A100_PCIE_40 = replace(_A100_SXM_40, source="NVIDIA A100 data sheet (PCIe 40GB, NVLink bridge 600 GB/s); FP16 non-tensor: A100 whitepaper")
_A100_PCIE_80 = replace(_A100_SXM_40, dram_tbps=1.935, source="NVIDIA A100 data sheet (PCIe 80GB, NVLink bridge 600 GB/s); FP16 non-tensor: A100 whitepaper")
_A800_SXM_40 = replace(_A100_SXM_40, nvlink_gbps=200, source="NVIDIA A800 data sheet (A100 compute, NVLink 400 GB/s) with the A100 SXM4 40GB data sheet's memory (1.555 TB/s)")
_A800_SXM_80 = replace(_A100_SXM_80, nvlink_gbps=200, source="NVIDIA A800 data sheet (SXM4 80GB: A100 compute, NVLink 400 GB/s)")
_A800_PCIE_80 = replace(_A100_PCIE_80, nvlink_gbps=200, source="NVIDIA A800 data sheet (PCIe 80GB: A100 compute, NVLink bridge 400 GB/s)")
_A30 = Spec(165, None, 82, 330, 10.3, 5.2, 10.3, None, 0.933, 32, 100, 56, "NVIDIA A30 data sheet", rates=AMPERE_GA100)
_A10 = Spec(125, None, 62.5, 250, None, None, 31.2, 31.2, 0.6, 32, None, 72, "NVIDIA A10 data sheet; FP16 non-tensor: Ampere GA102 whitepaper (1x FP32)", rates=AMPERE_GA10X)
_A2 = Spec(18, None, 9, 36, None, None, 4.5, 4.5, 0.2, 16, None, 10, "NVIDIA A2 data sheet (PCIe Gen4 x8); FP16 non-tensor: GA107 1x FP32", rates=AMPERE_GA10X)
_A16 = Spec(17.9, None, 9.0, 35.9, None, None, 4.5, 4.5, 0.2, 32, None, 10, "NVIDIA A16 data sheet, one of the board's four GPUs (board figures / 4); FP16 non-tensor: GA107 1x FP32", rates=AMPERE_GA10X)
_A40 = Spec(149.7, None, 74.8, 299.3, None, None, 37.4, 37.4, 0.696, 32, 56.25, 84, "NVIDIA A40 data sheet; FP16 non-tensor: Ampere GA102 whitepaper (1x FP32)", rates=AMPERE_GA10X)
_L4 = Spec(121, 242.5, 60, 242.5, None, None, 30.3, 30.3, 0.3, 32, None, 58, "NVIDIA L4 data sheet; FP16 non-tensor: Ada whitepaper (1x FP32)", rates=ADA)
_L40 = Spec(181.05, 362.1, 90.5, 362.1, None, None, 90.5, 90.5, 0.864, 32, None, 142, "NVIDIA L40 data sheet; FP16 non-tensor: Ada whitepaper (1x FP32)", rates=ADA_HALF)
_L40S = Spec(362.05, 733, 183, 733, None, None, 91.6, 91.6, 0.864, 32, None, 142, "NVIDIA L40S data sheet; FP16 non-tensor: Ada whitepaper (1x FP32)", rates=ADA)
_RTX6000_ADA = Spec(364.25, 728.5, 182.1, 728.5, None, None, 91.1, 91.1, 0.96, 32, None, 142, "NVIDIA RTX 6000 Ada Generation data sheet (1457 TFLOPS FP8 sparse); FP16 non-tensor: Ada whitepaper (1x FP32)", rates=ADA)
_H100_SXM = Spec(989.4, 1978.9, 494.7, 1978.9, 66.9, 33.5, 66.9, 133.8, 3.35, 64, 450, 132, "NVIDIA H100 data sheet (SXM5); FP16 non-tensor: H100 whitepaper", rates=HOPPER)
_H100_PCIE = Spec(756.5, 1513, 378, 1513, 51.2, 25.6, 51.2, 102.4, 2.0, 64, 300, 114, "NVIDIA H100 data sheet (PCIe, NVLink bridge 600 GB/s); FP16 non-tensor: H100 whitepaper", rates=HOPPER)
_H100_NVL = Spec(835.5, 1670.5, 417.5, 1670.5, 60, 30, 60, None, 3.9, 64, 300, 132, "NVIDIA H100 NVL data sheet (94 GB, NVLink bridge 600 GB/s)", rates=HOPPER)
_H800_SXM = replace(_H100_SXM, fp64_tensor=1, fp64=1, nvlink_gbps=200, rates=replace(HOPPER, fp64_tensor=None, fp64=None), source="NVIDIA H800 data sheet (SXM5: H100 tensor rates, FP64 and FP64 tensor 1 TFLOP/s, NVLink 400 GB/s)")
_H20 = Spec(148, 296, 74, 296, None, 1, 44, None, 4.0, 64, 450, 78, "NVIDIA HGX H20 data sheet (96 GB HBM3, NVLink 900 GB/s)")
_H200_SXM = replace(_H100_SXM, dram_tbps=4.8, source="NVIDIA H200 data sheet (SXM: H100 SXM compute, 4.8 TB/s); FP16 non-tensor: H100 whitepaper")
_H200_NVL = Spec(835.5, 1670.5, 417.5, 1670.5, 60, 30, 60, None, 4.8, 64, 450, 132, "NVIDIA H200 data sheet (NVL, NVLink bridge 900 GB/s)", rates=HOPPER)
_GH200_96 = replace(_H100_SXM, dram_tbps=4.0, pcie_gbps=None, fp16=None, source="NVIDIA GH200 data sheet (96 GB HBM3; the host link is NVLink-C2C, not PCIe)")
_GH200_144 = replace(_GH200_96, dram_tbps=4.9, source="NVIDIA GH200 data sheet (144 GB HBM3e; the host link is NVLink-C2C, not PCIe)")
_B300 = Spec(2250, 4500, 1125, None, 1.25, 1.25, 75, None, 8.0, 128, 900, 148, "NVIDIA HGX B300 data sheet (per GPU; PCIe Gen6 x16); 148 SMs: its CUDA device query (sm_103)", rates=BLACKWELL_ULTRA)
_B200 = Spec(2250, 4500, 1100, 4500, 37, 37, 75, None, 7.7, 64, 900, 148, "NVIDIA HGX B200 data sheet (per GPU, 1000 W)", rates=BLACKWELL)
_GB200 = Spec(2500, 5000, 1250, 5000, 40, 40, 80, None, 8.0, None, 900, None, "NVIDIA GB200 NVL72 data sheet (per GPU; the host link is NVLink-C2C)", rates=BLACKWELL)

# Parts with no NVIDIA data sheet (or none that gives these figures): derived, each row saying how.
_A10G = derived(AMPERE_GA10X_HALF, 80, 1710, 384, 12.5, 32, None,
                "AWS A10G (G5 instances; NVIDIA publishes no data sheet): GA102 with 80 SMs, 1710 MHz boost, 24 GB GDDR6 at 12.5 Gb/s (public spec listings), tensor at GeForce rates")
_L20 = derived(ADA_HALF, 92, 2520, 384, 18, 32, None,
               "NVIDIA L20 (AD102, China market; no data sheet found): 92 SMs, 2520 MHz boost, 48 GB GDDR6 at 18 Gb/s (public spec listings), tensor at the L40's rates")
_H20_3E = replace(_H20, dram_tbps=round(dram_tbps(6016, 6.402), 3),
                  derivation="H20 compute; DRAM: the H200's 141 GB HBM3e interface as NVML reports it on an H200, 6016 bit / 8 x 6.402 Gb/s (2 x 3201 MHz) = 4.81 TB/s")
_A100_SXM_64 = replace(_A100_SXM_40, dram_tbps=round(dram_tbps(4096, 3.186), 3),
                       derivation="A100 SXM4 compute (108 SMs, 1410 MHz); DRAM: four of the 80 GB part's five 16 GB HBM2e stacks, 4096 bit / 8 x 3.186 Gb/s (2.039 TB/s / 5120 bit) = 1.63 TB/s")
_H800_PCIE = replace(_H100_PCIE, fp64_tensor=None, fp64=None, nvlink_gbps=200, rates=replace(HOPPER, fp64_tensor=None, fp64=None),
                     derivation="the H100 PCIe's tensor, FP32 and FP16 figures (the same 114 SMs and HBM2e); FP64 export-limited by an amount no NVIDIA document gives, so none; NVLink bridge 400 GB/s as the other H800s")

# NVML device names (nvmlDeviceGetName) -> data-sheet row. docs/peaks.md says where each name was seen.
SPECS: dict[str, Spec] = {
    "Tesla V100-SXM2-16GB": _V100_SXM2,
    "Tesla V100-SXM2-32GB": _V100_SXM2,
    "Tesla V100-PCIE-16GB": _V100_PCIE,
    "Tesla V100-PCIE-32GB": _V100_PCIE,
    "Tesla V100S-PCIE-32GB": _V100S_PCIE,
    "Tesla T4": _T4,
    "NVIDIA A2": _A2,
    "NVIDIA A10": _A10,
    "NVIDIA A10G": _A10G,
    "NVIDIA A16": _A16,
    "NVIDIA A30": _A30,
    "NVIDIA A40": _A40,
    "NVIDIA A100-SXM4-40GB": _A100_SXM_40,
    "NVIDIA A100-SXM4-80GB": _A100_SXM_80,
    "NVIDIA A100-PCIE-40GB": _A100_PCIE_40,
    "NVIDIA A100 80GB PCIe": _A100_PCIE_80,
    "NVIDIA A100-SXM-64GB": _A100_SXM_64,
    "NVIDIA A800-SXM4-40GB": _A800_SXM_40,
    "NVIDIA A800-SXM4-80GB": _A800_SXM_80,
    "NVIDIA A800 80GB PCIe": _A800_PCIE_80,
    "NVIDIA L4": _L4,
    "NVIDIA L40": _L40,
    "NVIDIA L40S": _L40S,
    "NVIDIA L20": _L20,
    "NVIDIA RTX 6000 Ada Generation": _RTX6000_ADA,
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    "NVIDIA H100 PCIe": _H100_PCIE,
    "NVIDIA H100 NVL": _H100_NVL,
    "NVIDIA H800": _H800_SXM,
    "NVIDIA H800 PCIe": _H800_PCIE,
    "NVIDIA H20": _H20,
    "NVIDIA H20-3e": _H20_3E,
    "NVIDIA H200": _H200_SXM,
    "NVIDIA H200 NVL": _H200_NVL,
    "NVIDIA GH200 480GB": _GH200_96,
    "NVIDIA GH200 120GB": _GH200_96,  # the same 96 GB HBM3 part (its CUDA device query: 96 GB, 132 SMs, 1980 MHz); 120 GB counts LPDDR5X
    "NVIDIA GH200 144G HBM3e": _GH200_144,
    "NVIDIA B200": _B200,
    "NVIDIA GB200": _GB200,
    "NVIDIA B300 SXM6 AC": _B300,
}
# NVML names seen in the field that no row can stand for: the NVML backend derives them from the
# device (device_peak); elsewhere (DCGM, replay) no estimate, and the log says why.
UNSOURCED: dict[str, str] = {
    "NVIDIA L2": "a China-market Ada part: neither a data sheet nor a reliable SM count and clock was found",
    "NVIDIA H100": "not one product: the name alone does not say which H100 (PCIe 2339 and others) it is, and their SM counts, clocks and memory differ",
}
BUILTIN_PEAKS: dict[str, Peak] = {name: spec.peak() for name, spec in SPECS.items()}
_BY_FOLDED_NAME = {name.casefold(): peak for name, peak in BUILTIN_PEAKS.items()}

# config key (peaks.<model>.<key>) -> (Peak field, scale from the config's unit)
OVERRIDE_FIELDS: dict[str, tuple[str, float]] = {
    "tensor_tflops": ("tensor_flops", TERA),
    "fp8_tflops": ("tensor_fp8_flops", TERA),
    "tf32_tflops": ("tensor_tf32_flops", TERA),
    "int8_tops": ("tensor_int8_ops", TERA),
    "fp64_tensor_tflops": ("tensor_fp64_flops", TERA),
    "fp64_tflops": ("fp64_flops", TERA),
    "fp32_tflops": ("fp32_flops", TERA),
    "fp16_tflops": ("fp16_flops", TERA),
    "dram_tbps": ("dram_bytes_per_second", TERA),
    "pcie_gbps": ("pcie_bytes_per_second", 1e9),
    "nvlink_gbps": ("nvlink_bytes_per_second", 1e9),
}


# An app's math precision -> the Peak fields whose first known one is the roof of that math (FP64
# work reaches the FP64 tensor pipe where the model has one, the FP64 pipe where not).
PRECISION_PEAKS: dict[str, tuple[str, ...]] = {
    "bf16": ("tensor_flops",),
    "fp16": ("tensor_flops",),
    "fp8": ("tensor_fp8_flops",),
    "tf32": ("tensor_tf32_flops",),
    "int8": ("tensor_int8_ops",),
    "fp64": ("tensor_fp64_flops", "fp64_flops"),
    "fp32": ("fp32_flops",),
}


def precision_peak(peak: Peak, precision: str) -> float | None:
    """The dense peak of ``peak``'s model for math at ``precision`` (a PRECISION_PEAKS key); None where unknown."""
    return next((value for name in PRECISION_PEAKS[precision] if (value := getattr(peak, name)) is not None), None)


# The compute figures of a Peak: a MIG instance has its share of them (its SMs at the same clock).
COMPUTE_FIELDS = tuple(field for _, field in SPEC_PIPES)


def mig_share(parent: Peak, sm_count: int) -> Peak | None:
    """A MIG instance of ``parent`` with ``sm_count`` of its SMs: each compute figure in proportion
    (the same SMs at the same clocks, so the same clock bases). Its DRAM, PCIe and NVLink shares are
    set by its memory slices and the link's sharing, which the name does not give reliably: None."""
    if not parent.sm_count or not 0 < sm_count <= parent.sm_count:
        return None
    share = sm_count / parent.sm_count
    scaled = {field: value * share for field in COMPUTE_FIELDS if (value := getattr(parent, field)) is not None}
    return replace(parent, **scaled, dram_bytes_per_second=None, pcie_bytes_per_second=None, nvlink_bytes_per_second=None,
                   sm_count=sm_count, source=f"{parent.source}; a MIG instance of {sm_count} of its {parent.sm_count} SMs")


# CUDA compute capability -> the per-SM rates every part of that capability has. Where parts of one
# capability run their tensor pipes at different rates (GeForce and AWS's A10G at half the FP32-
# accumulate rate of the data-centre parts, on Turing, GA10x, Ada and RTX Blackwell alike), only the
# CUDA-core pipes are derived: a tensor figure could be off by 2x either way.
def _cores_only(rates: Rates) -> Rates:
    return replace(rates, name=f"{rates.name}, CUDA cores only", bf16=None, fp8=None, tf32=None, int8=None, fp64_tensor=None,
                   source=f"{rates.source}; tensor rates differ between parts of this compute capability: none")


BLACKWELL_RTX = Rates("Blackwell GB20x", None, None, None, None, None, None, 256, 256, "RTX Blackwell (compute capability 12.0): 128 FP32 lanes per SM, FP16 at the FP32 rate; tensor rates differ between GeForce and RTX PRO parts: none", None)
RATES_BY_CAPABILITY: dict[tuple[int, int], Rates] = {
    (7, 0): VOLTA,
    (7, 5): _cores_only(TURING),
    (8, 0): AMPERE_GA100,
    (8, 6): _cores_only(AMPERE_GA10X),
    (8, 9): _cores_only(ADA),
    (9, 0): HOPPER,
    (10, 0): BLACKWELL,
    (10, 3): BLACKWELL_ULTRA,
    (12, 0): BLACKWELL_RTX,
}


DERIVED_FROM_DEVICE = "derived from the device (NVML)"  # how a device-derived Peak's source begins


def device_peak(device: DeviceInfo) -> Peak | None:
    """A GPU's peaks derived from what NVML reports on it: each pipe = SMs x its compute capability's
    per-SM rate x the max SM clock (the clock basis of every figure), DRAM = bus width / 8 x 2 x the
    max memory clock (NVML reports half the data rate per pin: HBM and GDDR are double-data-rate, and
    GDDR6X/GDDR7 count their symbols so that 2 x clock is the data rate too). None where a fact is
    missing, the capability's rates are unknown, or the device is a MIG instance (its memory share
    is not its GPU's bus)."""
    if device.parent_uuid or not device.sm_count or not device.max_sm_clock_mhz or device.compute_capability is None:
        return None
    return _derived_peak(device.sm_count, device.max_sm_clock_mhz, device.compute_capability, device.memory_bus_width_bits, device.max_memory_clock_mhz)


@lru_cache(maxsize=64)
def _derived_peak(sms: int, sm_mhz: float, capability: tuple[int, int], bus_bits: int | None, memory_mhz: float | None) -> Peak | None:
    rates = RATES_BY_CAPABILITY.get(capability)
    if rates is None:
        return None
    figures = {peak_field: sms * rate * sm_mhz * 1e6 for pipe, peak_field in SPEC_PIPES if (rate := getattr(rates, pipe)) is not None}
    dram = bus_bits / 8 * 2 * memory_mhz * 1e6 if bus_bits and memory_mhz else None
    how = f"{DERIVED_FROM_DEVICE}: {sms} SMs x {rates.name} per-SM rates x {sm_mhz:g} MHz max SM clock"
    how += f"; DRAM {bus_bits} bit / 8 x 2 x {memory_mhz:g} MHz max memory clock = {dram / TERA:.3g} TB/s" if dram else "; DRAM: not reported"
    return Peak(tensor_flops=figures.get("tensor_flops"), dram_bytes_per_second=dram, pcie_bytes_per_second=None, nvlink_bytes_per_second=None,
                **{name: value for name, value in figures.items() if name != "tensor_flops"}, sm_count=sms, source=how,
                clock_basis_mhz=tuple((name, sm_mhz) for name in figures), sync_mma_share=rates.sync_mma_share, origin="device")


def peak_for(model: str, overrides: dict[str, PeakOverride] | None = None, device: DeviceInfo | None = None) -> Peak | None:
    """The peaks of a model by its NVML name; config overrides win field by field. A MIG device
    (``<GPU name> MIG <profile>``) not named in the config gets its share of its GPU's compute
    figures by its SM count. A model in no row is derived from ``device`` where it can be
    (``device_peak``)."""
    folded = model.strip().casefold()
    peak = _BY_FOLDED_NAME.get(folded)
    override = next((given for name, given in (overrides or {}).items() if name.strip().casefold() == folded), None)
    parent_name, mig, _ = folded.partition(" mig ")
    if override is None:
        if peak is None and mig:
            parent = peak_for(parent_name, overrides)
            sm_count = device.sm_count if device is not None else None
            return None if parent is None or not sm_count else mig_share(parent, sm_count)
        if peak is None and device is not None:
            return device_peak(device)
        return peak
    given = {OVERRIDE_FIELDS[key][0]: value * OVERRIDE_FIELDS[key][1] for key, value in asdict(override).items() if value is not None}
    if peak is None and device is not None and not mig:
        peak = device_peak(device)
    if peak is None:
        return replace(Peak(None, None, None, None, source="config", origin="config"), **given)
    # a figure from the config has no derived clock basis: it is taken at the max SM clock
    kept = tuple((name, mhz) for name, mhz in peak.clock_basis_mhz if name not in given)
    return replace(peak, **given, clock_basis_mhz=kept, origin="config")


def unknown_model_note(model: str) -> str:
    """What the log says once for a model with no peaks: what is missing and the config key that adds it."""
    why = next((reason for name, reason in UNSOURCED.items() if name.casefold() == model.strip().casefold()), None)
    return (
        f"GPU model {model!r} is not in the built-in peaks table{f' ({why})' if why else ''}: no FLOP/s or bandwidth estimate for it. "
        f"Add its data sheet's dense figures in the config under peaks: {{{model!r}: {{tensor_tflops: ..., dram_tbps: ...}}}} "
        f"(keys: {', '.join(OVERRIDE_FIELDS)}; docs/peaks.md)"
    )
