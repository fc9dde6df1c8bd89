"""The configuration file: its top-level keys, each feature's section (defined beside the feature),
loading with errors that name the file and the key, the reference of every key, and what each
feature is handed of it. It sits above the features it lists (config/ is the engine they all use);
only the poller and the commands import it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpueff.apps.settings import AppConfig, AppsSettings
from gpueff.attribution.doctor import Switches
from gpueff.attribution.kubernetes.settings import KubernetesConfig
from gpueff.backends.base import SLOW_INTERVAL
from gpueff.backends.dcgm.settings import DcgmConfig
from gpueff.collectors import CollectorsConfig
from gpueff.config.engine import ConfigError, load_section, reference, section, section_list, setting
from gpueff.config.values import (
    MIN_COLLECT_INTERVAL,
    absolute_path,
    boolean,
    label_value,
    min_duration,
    non_negative,
    optional,
)
from gpueff.config.yaml_safe import read_yaml
from gpueff.peaks import PeakOverride, peak_overrides
from gpueff.pipeline.derive import DeriveSettings
from gpueff.pipeline.settings import SharingConfig
from gpueff.pipeline.tracker import TrackerSettings
from gpueff.taxonomy import BottleneckThresholds, MismatchThresholds

# The DCGM backend watches its fields at the intervals it started with (a watch cannot change
# frequency in place); NVML and replay take a new interval at the next poll.
DCGM_WATCHES = "applied; the DCGM backend keeps the interval it started with until a restart (it logs so)"
# Each app is a scraper thread, started before the port opens: 1,000 of them at 100 ms kept a daemon
# from serving for minutes. A node runs a few apps per GPU; 64 leaves room for 8 per GPU of 8.
MAX_APPS = 64
MAX_STALE_AFTER = 4 * 3600.0  # room for the default 3 x collect_interval + 2s at the longest interval


@dataclass(frozen=True)
class Config:
    collect_interval: float = setting(1.0, min_duration(MIN_COLLECT_INTERVAL), "how often GPUs are sampled (100ms to 1h)", DCGM_WATCHES)
    slow_collect_interval: float = setting(SLOW_INTERVAL, min_duration(1.0), "how often slow NVML calls (energy, ECC, remapped rows, memory temperature, the costlier health readings) are made (1s to 1h)", DCGM_WATCHES)
    stale_after: float | None = setting(None, optional(min_duration(MIN_COLLECT_INTERVAL, MAX_STALE_AFTER)), "a snapshot older than this is served as down (default: 3 x collect_interval + 2s; at most 4h)")
    price_per_gpu_hour: float | None = setting(None, optional(non_negative), "what one GPU-hour costs, for gpueff_busy_idle_sm_cost_total")
    currency: str = setting("USD", label_value, "the currency label of the cost metrics")
    mismatch: MismatchThresholds = section(MismatchThresholds, "thresholds of gpueff_mismatch")
    bottleneck: BottleneckThresholds = section(BottleneckThresholds, "thresholds of gpueff_bottleneck")
    peaks: dict[str, PeakOverride] = setting({}, peak_overrides, "peak figures per GPU model name, over the built-in table")
    apps: tuple[AppConfig, ...] = section_list(AppConfig, f"applications whose throughput is joined with their GPUs (docs/apps.md); at most {MAX_APPS}", unique="name", most=MAX_APPS)
    kubernetes: KubernetesConfig = section(KubernetesConfig, "pod attribution on Kubernetes (docs/kubernetes.md)")
    proc_root: str = setting("/proc", absolute_path, "where the host's /proc is, to read GPU processes' cgroups, names and parents for the fair split (sharing), Kubernetes process attribution and multi-GPU jobs (needs the host's PIDs: hostPID)")
    process_names: bool = setting(True, boolean, "name users' programs in the fair split's holder labels and the process groups' job labels (<uid>:<name>, <uid>:<launcher>:<GPUs>); false: the uid alone (<uid>, <uid>:<GPUs>), so no reader of /metrics learns which programs the node's users run (docs/security.md)")
    sharing: SharingConfig = section(SharingConfig, "per-holder fair split of shared GPUs, Slurm jobs (docs/sharing.md)")
    dcgm: DcgmConfig = section(DcgmConfig, "how the DCGM backend reaches DCGM (docs/dcgm.md)")
    collectors: CollectorsConfig = section(CollectorsConfig, "which per-GPU metric families are exported (docs/collectors.md)")

    @property
    def effective_stale_after(self) -> float:
        return self.stale_after if self.stale_after is not None else 3 * self.collect_interval + 2.0

    @property
    def derive_settings(self) -> DeriveSettings:
        """What the derivation of one sample takes: the peaks, the mismatch and bottleneck thresholds."""
        return DeriveSettings(self.peaks, self.mismatch, self.bottleneck)

    @property
    def tracker_settings(self) -> TrackerSettings:
        """What a GPU's tracker takes: the derivation's settings, the staleness and the price."""
        return TrackerSettings(self.effective_stale_after, self.price_per_gpu_hour, self.derive_settings)

    @property
    def attribution_switches(self) -> Switches:
        """What the attribution doctor takes: the switches that put owners on series."""
        return Switches(self.sharing.enabled, self.kubernetes.enabled and self.kubernetes.process_attribution)

    @property
    def apps_settings(self) -> AppsSettings:
        """What the apps' join takes: the apps, the peaks and the default price of a GPU-hour."""
        return AppsSettings(self.apps, self.peaks, self.price_per_gpu_hour)


def parse_config(data: Any) -> Config:
    return load_section(Config, data, "")


def load_config(path: str | Path | None) -> Config:
    """Read and validate a config file; ``None`` gives the defaults. Errors name the file."""
    if path is None:
        return Config()
    data = read_yaml(path, "config file", ConfigError)
    try:
        return parse_config(data)
    except ConfigError as error:
        raise ConfigError(f"config file {path}: {error}", [f"config file {path}: {problem}" for problem in error.problems]) from None


def config_reference() -> list[tuple[str, str, str, str]]:
    """(key, default, doc, on reload) for every key of the config file."""
    return reference(Config)
