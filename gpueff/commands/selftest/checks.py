"""The selftest's verdicts: per-workload readings (the daemon's samples + the workload's own figures)
in, check results out. No GPU here: the same logic judges a live run and a recorded trace.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpueff.commands.selftest.expectations import (
    CLASS_STABILITY,
    EXPECTATIONS,
    HOLD_SETTLE,
    ONE_SM_TOLERANCE,
    THROUGHPUT_BANDS,
    Expectation,
)
from gpueff.pipeline.derive import MISMATCH_RULES, Derived, DeriveSettings, step
from gpueff.pipeline.smoothing import Smoothing
from gpueff.sample import GpuSample

UNITS = {"tflops": ("TFLOP/s", "busy_flops", 1e12, "busy"), "tbps": ("TB/s", "dram_bytes_per_second", 1e12, "estimated")}


@dataclass(frozen=True)
class Reading:
    """What the daemon read while one workload ran, and what the workload measured itself."""

    workload: str
    samples: list[GpuSample]
    truth: dict[str, float] = field(default_factory=dict)  # "tflops" and/or "tbps"
    error: str | None = None  # why the workload could not run


@dataclass(frozen=True)
class CheckResult:
    workload: str
    check: str
    expected: str
    measured: str
    passed: bool


def check_readings(readings: Iterable[Reading], settings: DeriveSettings) -> list[CheckResult]:
    results: list[CheckResult] = []
    for reading in readings:
        results.extend(check_reading(reading, settings))
    return results


def exit_code(results: list[CheckResult]) -> int:
    """0 when every check passed, 1 when one failed (or nothing was checked)."""
    return 0 if results and all(result.passed for result in results) else 1


def check_reading(reading: Reading, settings: DeriveSettings) -> list[CheckResult]:
    name = reading.workload
    expectation = EXPECTATIONS.get(name)
    if expectation is None:
        return [CheckResult(name, "workload", f"one of {', '.join(EXPECTATIONS)}", name, False)]
    if reading.error is not None:
        return [CheckResult(name, "run", "the workload runs", reading.error, False)]
    samples = [sample for sample in reading.samples if sample.up]
    if not samples:
        return [CheckResult(name, "readings", "at least one sample while it ran", "none", False)]
    derived = smoothed_readings(samples, settings)
    results = [_check_class(expectation, derived), _check_stability(expectation, derived), _check_mismatch(expectation, derived)]
    if expectation.one_sm:
        results.append(_check_one_sm(expectation, samples))
    if expectation.throughput:
        results.append(_check_throughput(expectation, samples, derived, reading.truth))
    return results



def smoothed_readings(samples: list[GpuSample], settings: DeriveSettings) -> list[Derived]:
    """What the daemon derives from consecutive up samples: window-mean clock, smoothed class with hysteresis."""
    state: Smoothing | None = Smoothing()
    derived = []
    for sample in samples:
        readings, state = step(sample, settings, state)
        derived.append(readings)
    return derived

def _majority(values: list[str]) -> tuple[str, int]:
    return Counter(values).most_common(1)[0]


def _check_class(expectation: Expectation, derived: list[Derived]) -> CheckResult:
    value, count = _majority([each.bottleneck for each in derived])
    measured = f"{value} ({count}/{len(derived)} samples)"
    return CheckResult(expectation.workload, "bottleneck class", expectation.bottleneck, measured, value == expectation.bottleneck)


def _check_stability(expectation: Expectation, derived: list[Derived]) -> CheckResult:
    """The class holds: the expected one on CLASS_STABILITY of the samples once the hysteresis settled."""
    settled = [each.bottleneck for each in derived[HOLD_SETTLE:]] or [each.bottleneck for each in derived[-1:]]
    share = settled.count(expectation.bottleneck) / len(settled)
    changes = sum(a != b for a, b in zip(settled, settled[1:]))
    measured = f"{share:.0%} of {len(settled)} samples, {changes} change{'s' * (changes != 1)}"
    return CheckResult(expectation.workload, "class stability", f"{expectation.bottleneck} on >= {CLASS_STABILITY:.0%}", measured, share >= CLASS_STABILITY)


def _rules_text(rules: tuple[str, ...]) -> str:
    return ", ".join(rules) if rules else "none"


def _check_mismatch(expectation: Expectation, derived: list[Derived]) -> CheckResult:
    """The rules that fire on more than half of the samples must be exactly the expected ones."""
    expected = _rules_text(expectation.mismatch)
    judged = [each.mismatch for each in derived if each.mismatch]
    if len(judged) * 2 <= len(derived):
        return CheckResult(expectation.workload, "mismatch", expected, "not available (no SM activity reading)", False)
    firing = tuple(rule for rule in MISMATCH_RULES if sum(rules.get(rule, False) for rules in judged) * 2 > len(judged))
    return CheckResult(expectation.workload, "mismatch", expected, _rules_text(firing), set(firing) == set(expectation.mismatch))


def _check_one_sm(expectation: Expectation, samples: list[GpuSample]) -> CheckResult:
    sm_count = samples[0].device.sm_count
    if not sm_count:
        return CheckResult(expectation.workload, "SM activity", "1/SM-count", "SM count unknown", False)
    target = 1 / sm_count
    expected = f"{target:.2%} (1/{sm_count}) ±{ONE_SM_TOLERANCE:.0%}"
    values = [sample.profiling.sm_active for sample in samples if sample.profiling.sm_active is not None]
    if not values:
        return CheckResult(expectation.workload, "SM activity", expected, "not available", False)
    median = statistics.median(values)
    passed = abs(median / target - 1) <= ONE_SM_TOLERANCE
    return CheckResult(expectation.workload, "SM activity", expected, f"{median:.2%} (= {median * sm_count:.2f} SMs)", passed)


def window_mean(values: list[tuple[float, float | None]]) -> float | None:
    """Mean of (window seconds, value) pairs weighted by window; None when any value is missing."""
    present = [(window, value) for window, value in values if value is not None]
    if not values or len(present) < len(values):
        return None
    total = sum(window for window, _ in present)
    if total <= 0:
        return statistics.fmean(value for _, value in present)
    return sum(window * value for window, value in present) / total


def _check_throughput(expectation: Expectation, samples: list[GpuSample], derived: list[Derived], truth: dict[str, float]) -> CheckResult:
    key = expectation.throughput
    assert key is not None
    unit, attribute, scale, kind = UNITS[key]
    low, high = THROUGHPUT_BANDS[key]
    check = f"{kind} {unit}"
    true_value = truth.get(key)
    if not true_value:
        return CheckResult(expectation.workload, check, f"the workload's own {unit}", "the workload measured none", False)
    expected = f"{low:g}-{high:g}x the workload's {true_value:.3g} {unit}"
    estimate = window_mean([(sample.window_seconds or 0.0, getattr(each, attribute)) for sample, each in zip(samples, derived)])
    if estimate is None:
        reason = "no estimate (no peak figures for this GPU model: add it under peaks: in the config)"
        if any(each.peak is not None for each in derived):
            reason = "no estimate (a profiling or clock reading is missing)"
        return CheckResult(expectation.workload, check, expected, reason, False)
    estimate /= scale
    error = estimate / true_value - 1
    return CheckResult(expectation.workload, check, expected, f"{estimate:.3g} {unit} ({error:+.1%})", low <= estimate / true_value <= high)
