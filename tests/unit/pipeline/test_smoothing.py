"""Noise of a few points never flips a verdict (issue 34): the hysteresis band (``bottleneck.margin``)
covers every threshold the rules test, and every recorded job, its readings perturbed on every
poll, reads the class it reads unperturbed, but for a poll at a transition and the provisional
verdicts while the first window fills (gpueff/pipeline/smoothing.py)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from repo import ROOT

from gpueff.backends.replay import ReplayBackend
from gpueff.pipeline.derive import DeriveSettings, step
from gpueff.pipeline.smoothing import Smoothing
from gpueff.sample import GpuSample
from gpueff.taxonomy import Activity, BottleneckThresholds, classes_within_margin, classify
from gpueff.trace import load_trace

RECORDED = sorted((ROOT / "gpueff" / "traces").glob("*/*.json")) + sorted((ROOT / "evidence" / "2026-11-28-h100" / "verdicts").glob("*.json"))
LIMITS = BottleneckThresholds()
UTILIZATION_NOISE = 0.03  # the driver's whole-percent samples of a stepwise job swing this much from window to window
ACTIVITY_NOISE = 0.02  # GPM's SM, engine and DRAM means over a window: a few points

BUSY = dict(busy=0.99, engine=0.99, sm_active=0.9, sm_occupancy=0.3)
# (readings, the reading moved, a value on one side of a threshold, one on the other): every
# comparison of the rules in gpueff/taxonomy.py classify, the host rule's Amdahl balance along
# each reading it weighs included.
EDGES = {
    "communication_link": (Activity(busy=0.99, engine=0.99, sm_active=0.3, pipes=0.35, link=0.3), "link", 0.299, 0.3),
    "transfer_link": (Activity(busy=0.99, engine=0.99, sm_active=0.2, pipes=0.05, dram=0.05, link=0.1), "link", 0.099, 0.1),
    "transfer_link_above_every_unit": (Activity(busy=0.99, engine=0.99, sm_active=0.2, pipes=0.05, dram=0.15, link=0.15), "dram", 0.149, 0.15),
    "communication_roof_link": (Activity(busy=0.99, engine=0.99, sm_active=0.99, sm_occupancy=0.85, pipes=0.5, dram=0.01, link=0.72), "link", 0.719, 0.721),
    "communication_roof_pipes": (Activity(busy=0.99, engine=0.99, sm_active=0.99, sm_occupancy=0.85, pipes=0.72, dram=0.01, link=0.9), "pipes", 0.719, 0.721),
    "communication_roof_dram": (Activity(busy=0.99, engine=0.99, sm_active=0.99, sm_occupancy=0.85, pipes=0.03, dram=0.65, link=0.9), "dram", 0.649, 0.65),
    "communication_sm": (Activity(busy=0.99, engine=0.99, sm_active=0.5, pipes=0.55, link=0.5), "sm_active", 0.499, 0.5),
    "communication_only_link_working": (Activity(**BUSY, pipes=0.05, dram=0.05, link=0.1), "link", 0.099, 0.1),
    "communication_only_link_pipes": (Activity(**BUSY, pipes=0.1, dram=0.01, link=0.5), "pipes", 0.099, 0.1),
    "communication_only_link_dram": (Activity(**BUSY, pipes=0.01, dram=0.1, link=0.5), "dram", 0.099, 0.1),
    "host_amdahl_busy": (Activity(busy=0.6875, engine=0.6875, sm_active=0.6, sm_occupancy=0.3, pipes=0.05, dram=0.3), "busy", 0.6875, 0.69),
    "host_amdahl_dram": (Activity(busy=0.6875, engine=0.6875, sm_active=0.6, sm_occupancy=0.3, pipes=0.05, dram=0.3), "dram", 0.299, 0.3),
    "host_amdahl_engine": (Activity(busy=0.6875, engine=0.6875, sm_active=0.6, sm_occupancy=0.3, pipes=0.05, dram=0.3), "engine", 0.6875, 0.69),
    "host_utilization": (Activity(busy=0.8, engine=0.8, sm_active=0.78, sm_occupancy=0.3, pipes=0.85), "busy", 0.799, 0.8),
    "host_copy_engines": (Activity(busy=0.99, engine=0.05, sm_active=0.0, link=0.1), "engine", 0.049, 0.05),
    "memory_dram": (Activity(**BUSY, pipes=0.1, dram=0.65), "dram", 0.649, 0.65),
    "memory_side": (Activity(**BUSY, pipes=0.787, dram=0.7), "pipes", 0.787, 0.788),
    "compute_pipe": (Activity(**BUSY, pipes=0.2, dram=0.05), "pipes", 0.199, 0.2),
    "compute_sm": (Activity(**{**BUSY, "sm_active": 0.5}, pipes=0.48, dram=0.12), "sm_active", 0.499, 0.5),
    "underfilled_sm": (Activity(**{**BUSY, "sm_active": 0.5}, pipes=0.05, dram=0.15), "sm_active", 0.499, 0.5),
    "latency_occupancy": (Activity(**{**BUSY, "sm_occupancy": 0.1}, pipes=0.05, dram=0.05), "sm_occupancy", 0.099, 0.1),
    "latency_work": (Activity(**{**BUSY, "sm_occupancy": 0.05}, pipes=0.05, dram=0.2), "dram", 0.199, 0.2),
    "memory_latency_dram": (Activity(**BUSY, pipes=0.05, dram=0.1), "dram", 0.099, 0.1),
}


@pytest.mark.parametrize("edge", sorted(EDGES))
def test_the_band_covers_every_threshold(edge):
    """A window a hair on either side of a threshold has the other side's class within the band:
    the class in place stands, whichever side the noise puts the next window on."""
    readings, name, below, above = EDGES[edge]
    sides = [dataclasses.replace(readings, **{name: value}) for value in (below, above)]
    classes = {classify(side, LIMITS) for side in sides}
    assert len(classes) == 2, (edge, classes)
    for side in sides:
        assert classes <= classes_within_margin(side, LIMITS, LIMITS.margin), (edge, side)


def test_the_band_never_reaches_idle_from_a_gpu_that_ran_kernels():
    starved = Activity(busy=0.01, engine=0.01, sm_active=0.0001, sm_occupancy=0.0001, pipes=0.0, dram=0.0001)
    assert "idle" not in classes_within_margin(starved, LIMITS, LIMITS.margin)


Noise = Callable[[int], tuple[float, float]]  # poll number -> (utilization's move, SM/engine/DRAM's move)


def moved(value: float | None, by: float) -> float | None:
    """A reading moved by noise: 0 stays 0 (nothing ran), a positive one stays positive (halved where it is smaller than the move)."""
    if not value:
        return value
    return min(1.0, value + by) if by >= 0 or value > -by else value / 2


def noisy(sample: GpuSample, utilization: float, activity: float) -> GpuSample:
    profiling = sample.profiling
    return dataclasses.replace(
        sample,
        gpu_utilization=moved(sample.gpu_utilization, utilization),
        gpu_utilization_window=moved(sample.gpu_utilization_window, utilization),
        profiling=dataclasses.replace(profiling, sm_active=moved(profiling.sm_active, activity), graphics_active=moved(profiling.graphics_active, activity), dram_active=moved(profiling.dram_active, activity)),
    )


@cache
def recorded_samples(path: Path) -> tuple[GpuSample, ...]:
    """The samples the poller gets from two loops of the trace replayed at a 1 s poll, as tests/unit/pipeline/test_derive_corpus.py replays it."""
    trace, now = load_trace(path), [1000.0]
    backend = ReplayBackend([trace], clock=lambda: now[0])
    backend.start()
    samples = []
    for _ in range(round(2 * trace.loop_seconds)):
        now[0] += 1.0
        samples.append(backend.collect()[0])
    return tuple(samples)


@dataclasses.dataclass(frozen=True)
class Verdict:
    reported: str
    settled: bool  # the verdict in place before this poll was judged over a whole window (not provisional)
    near: frozenset[str]  # the classes the smoothed readings reach with the noise applied to each: more than one near a threshold


def within_noise(mean: Activity) -> frozenset[str]:
    """The classes ``mean`` gets with one perturbed reading moved by its noise, up or down."""
    found = {classify(mean, LIMITS)}
    for name, noise in (("busy", UTILIZATION_NOISE), ("engine", ACTIVITY_NOISE), ("sm_active", ACTIVITY_NOISE), ("dram", ACTIVITY_NOISE)):
        value = getattr(mean, name)
        for by in (noise, -noise):
            found.add(classify(dataclasses.replace(mean, **{name: moved(value, by)}), LIMITS))
    return frozenset(found)


def verdicts(samples: tuple[GpuSample, ...], noise: Noise | None = None) -> list[Verdict]:
    state, out = Smoothing(), []
    for number, sample in enumerate(samples):
        settled = state.settled
        derived, following = step(noisy(sample, *noise(number)) if noise else sample, DeriveSettings(), state)
        state = following or Smoothing()
        out.append(Verdict(derived.bottleneck, settled, within_noise(state.mean() or Activity())))
    return out


def signs(seed: int) -> Noise:
    draw = random.Random(seed)
    moves = [(draw.choice((-1, 1)) * UTILIZATION_NOISE, draw.choice((-1, 1)) * ACTIVITY_NOISE) for _ in range(1000)]
    return moves.__getitem__


# Alternating noise cancels in the window's mean to within a fifth of its size at a 1 s poll: no
# recorded job sits that near a threshold, so every job must read its unperturbed class under it.
ALTERNATING: dict[str, Noise] = {
    f"alternating {sign_u:+d} {sign_a:+d}": lambda n, sign_u=sign_u, sign_a=sign_a: ((-1) ** n * sign_u * UTILIZATION_NOISE, (-1) ** n * sign_a * ACTIVITY_NOISE)
    for sign_u in (-1, 1) for sign_a in (-1, 1)
}
RANDOM: dict[str, Noise] = {f"random {seed}": signs(seed) for seed in range(4)}
BIASES = ((UTILIZATION_NOISE, ACTIVITY_NOISE), (-UTILIZATION_NOISE, -ACTIVITY_NOISE), (UTILIZATION_NOISE, -ACTIVITY_NOISE), (-UTILIZATION_NOISE, ACTIVITY_NOISE))


def changes(classes: list[str]) -> int:
    return sum(1 for before, after in zip(classes, classes[1:], strict=False) if before != after)


@pytest.mark.parametrize("path", RECORDED, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_noise_of_a_few_points_never_flips_a_recorded_jobs_verdict(path):
    """Utilization moved by ±0.03 and SM activity, engine activity and DRAM by ±0.02 on every poll,
    alternating, at random, or all one way (a bias). Once the first window is full, a job reads its
    unperturbed class on every poll but within a poll of one of its transitions. Where its readings
    sit within that noise of a threshold (the 4-GPU pipeline stages: SM activity 0.51 against 0.5)
    and the noise does not cancel within the window (random runs, a bias), no rule can promise
    which side it reads: there it reads a class the noise reaches and changes class at most once
    more than unperturbed, never flapping."""
    samples = recorded_samples(path)
    base = verdicts(samples)
    classes = [each.reported for each in base]
    near_transition = {number for number in range(len(base)) if len(set(classes[max(0, number - 1):number + 2])) > 1}
    for name, noise in [*ALTERNATING.items(), *RANDOM.items(), *((f"bias {bias}", lambda _, bias=bias: bias) for bias in BIASES)]:
        perturbed = verdicts(samples, noise)
        settled = [number for number, each in enumerate(perturbed) if each.settled]
        off = [(number, classes[number], perturbed[number].reported) for number in settled if perturbed[number].reported != classes[number] and number not in near_transition]
        if name in ALTERNATING:
            assert not off, (name, off[:5])
        on_an_edge = any(len(base[number].near) > 1 for number, _, _ in off)
        assert all(reported in base[number].near | {classes[number]} for number, _, reported in off), (name, off[:5])
        assert changes([perturbed[number].reported for number in settled]) <= changes([classes[number] for number in settled]) + (1 if on_an_edge else 0), (name, [each.reported for each in perturbed])
