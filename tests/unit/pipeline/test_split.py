"""The fair split of a shared GPU: window shares from per-process samples, and per-holder counters
that add up to the GPU's own."""

from __future__ import annotations

import pytest

from gpueff.attribution.holders import UNATTRIBUTED, Holder, ProcessIdentity
from gpueff.pipeline.split import (
    FORGET_AFTER_SECONDS,
    MAX_HOLDERS_PER_GPU,
    MAX_NAMES_PER_USER,
    GpuLedger,
    window_shares,
)
from gpueff.pipeline.totals import Growth
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample, ProcessUtilization

DEVICE = DeviceInfo(index=0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3")
A, B = Holder("pod", "uid-a"), Holder("slurm_job", "42")
IDS = {1: ProcessIdentity(A), 2: ProcessIdentity(A), 3: ProcessIdentity(B)}
MAX_GAP = 5.0


def sample(t: float, utilization: tuple[tuple[int, float], ...] | None = (), pids: tuple[int, ...] = (1, 3), power: float | None = 100.0, energy: float | None = None) -> GpuSample:
    return GpuSample(
        device=DEVICE,
        timestamp=t,
        power_watts=power,
        energy_joules=energy,
        processes=tuple(GpuProcess(pid, "python3") for pid in pids),
        process_utilization=None if utilization is None else tuple(ProcessUtilization(pid, sm, 0.0, int(t * 1e6)) for pid, sm in utilization),
    )


def test_shares_follow_summed_samples_per_holder_not_per_pid() -> None:
    shares = window_shares(sample(1, ((1, 0.3), (2, 0.2), (3, 0.25), (3, 0.25))), IDS)
    assert shares == pytest.approx({A: 0.5, B: 0.5})


def test_samples_of_unknown_pids_go_to_unattributed() -> None:
    assert window_shares(sample(1, ((1, 0.6), (9, 0.2))), IDS) == pytest.approx({A: 0.75, UNATTRIBUTED: 0.25})


def test_without_samples_a_single_holder_takes_all_and_several_are_unattributed() -> None:
    assert window_shares(sample(1, (), pids=(1, 2)), IDS) == {A: 1.0}
    assert window_shares(sample(1, None, pids=(1, 2)), IDS) == {A: 1.0}  # unsupported (MIG)
    assert window_shares(sample(1, ((1, 0.0),), pids=(1, 3)), IDS) == {UNATTRIBUTED: 1.0}
    assert window_shares(sample(1, (), pids=()), IDS) == {UNATTRIBUTED: 1.0}


def test_holder_counters_add_up_to_the_gpu_counters() -> None:
    ledger = GpuLedger()
    gpu_busy = gpu_sm = gpu_idle = 0.0
    for step, (a, b) in enumerate([(0.7, 0.3), (0.5, 0.1), (0.0, 0.4), (0.9, 0.0)]):
        s = sample(step, ((1, a), (3, b)))
        delta = Growth(busy_seconds=a + b, sm_active_seconds=(a + b) / 2, busy_idle_sm_seconds=(a + b) / 2)
        gpu_busy, gpu_sm, gpu_idle = gpu_busy + (a + b), gpu_sm + (a + b) / 2, gpu_idle + (a + b) / 2
        holders = ledger.add(s, window_shares(s, IDS), delta, MAX_GAP)
    assert sum(t.busy_seconds for t in holders.values()) == pytest.approx(gpu_busy)
    assert sum(t.sm_active_seconds for t in holders.values()) == pytest.approx(gpu_sm)
    assert sum(t.busy_idle_sm_seconds for t in holders.values()) == pytest.approx(gpu_idle)
    assert holders[A].busy_seconds == pytest.approx(0.7 + 0.5 + 0.9)
    assert holders[B].busy_seconds == pytest.approx(0.3 + 0.1 + 0.4)


def test_energy_counter_advances_are_split_by_power_weighted_holding_time() -> None:
    ledger = GpuLedger()
    none = Growth()
    ledger.add(sample(0, energy=1000.0), {A: 1.0}, none, MAX_GAP)  # baseline reading: nothing to split yet
    ledger.add(sample(1, power=300.0), {A: 1.0}, none, MAX_GAP)  # A alone, at 300 W
    ledger.add(sample(2, power=100.0), {A: 0.5, B: 0.5}, none, MAX_GAP)  # shared, at 100 W
    holders = ledger.add(sample(3, power=100.0, energy=1450.0), {UNATTRIBUTED: 1.0}, none, MAX_GAP)  # nobody ran
    # weights: A 300 + 50 = 350, B 50, unattributed 100 (of 500) -> the counter's 450 J split so.
    assert holders[A].energy_joules == pytest.approx(450 * 350 / 500)
    assert holders[B].energy_joules == pytest.approx(450 * 50 / 500)
    assert holders[UNATTRIBUTED].energy_joules == pytest.approx(450 * 100 / 500)
    assert sum(t.energy_joules for t in holders.values()) == pytest.approx(450)


def test_energy_counter_restart_splits_nothing_and_gaps_are_not_weighted() -> None:
    ledger = GpuLedger()
    none = Growth()
    ledger.add(sample(0, energy=5000.0), {A: 1.0}, none, MAX_GAP)
    holders = ledger.add(sample(1, energy=10.0), {A: 1.0}, none, MAX_GAP)  # driver reloaded
    assert A not in holders
    ledger.add(sample(60, power=500.0), {B: 1.0}, none, MAX_GAP)  # after a 59 s gap: not weighted
    holders = ledger.add(sample(61, power=100.0, energy=110.0), {A: 1.0}, none, MAX_GAP)
    assert holders[A].energy_joules == pytest.approx(100)
    assert B not in holders


def test_down_sample_splits_nothing_and_gone_holders_are_forgotten() -> None:
    ledger = GpuLedger()
    ledger.add(sample(0), {A: 1.0}, Growth(1.0), MAX_GAP)
    down = GpuSample(device=DEVICE, timestamp=1, up=False)
    assert ledger.add(down, {B: 1.0}, Growth(1.0), MAX_GAP)[A].busy_seconds == 1.0
    holders = ledger.add(sample(FORGET_AFTER_SECONDS + 1), {B: 1.0}, Growth(1.0), MAX_GAP)
    assert A not in holders and holders[B].busy_seconds == 1.0


def test_holders_beyond_the_cap_are_unattributed_and_the_total_is_kept() -> None:
    ledger = GpuLedger()
    many = {Holder("pod", f"p{n}"): 1 / (MAX_HOLDERS_PER_GPU + 10) for n in range(MAX_HOLDERS_PER_GPU + 10)}
    holders = ledger.add(sample(0), many, Growth(busy_seconds=1.0), MAX_GAP)
    assert len(holders) == MAX_HOLDERS_PER_GPU and UNATTRIBUTED in holders
    assert sum(t.busy_seconds for t in holders.values()) == pytest.approx(1.0)
    holders = ledger.add(sample(1), {Holder("pod", "late"): 1.0}, Growth(busy_seconds=1.0), MAX_GAP)
    assert Holder("pod", "late") not in holders and holders[UNATTRIBUTED].busy_seconds == pytest.approx(1.0 + 11 / (MAX_HOLDERS_PER_GPU + 10))


def test_one_users_churn_of_names_fills_only_its_own_holders() -> None:
    """A new (pid, name) every 0.25 s: 70 names of user 1001 in 17.5 s, each kept 5 minutes. Before,
    they took all 64 slots and a later tenant's time went to unattributed; now the user's names
    beyond MAX_NAMES_PER_USER share its own ``user`` holder and the later tenant gets its own."""
    ledger = GpuLedger()
    for n in range(70):
        ledger.add(sample(n * 0.25), {Holder("process", f"churn{n}", "1001"): 1.0}, Growth(busy_seconds=0.25), MAX_GAP)
    late = Holder("process", "python3", "1002")
    holders = ledger.add(sample(18.0), {late: 0.6, Holder("process", "churn70", "1001"): 0.4}, Growth(busy_seconds=1.0), MAX_GAP)
    assert holders[late].busy_seconds == pytest.approx(0.6) and UNATTRIBUTED not in holders
    churner = {holder for holder in holders if holder.user == "1001"}
    assert len(churner) == MAX_NAMES_PER_USER + 1 and Holder("user", "", "1001") in churner
    assert holders[Holder("user", "", "1001")].busy_seconds == pytest.approx((70 - MAX_NAMES_PER_USER) * 0.25 + 0.4)
    assert sum(t.busy_seconds for t in holders.values()) == pytest.approx(70 * 0.25 + 1.0)


def test_two_users_programs_of_one_name_are_two_holders() -> None:
    a, b = Holder("process", "python3", "1001"), Holder("process", "python3", "1002")
    ids = {1: ProcessIdentity(a), 2: ProcessIdentity(b)}
    assert window_shares(sample(1, ((1, 0.3), (2, 0.1)), pids=(1, 2)), ids) == pytest.approx({a: 0.75, b: 0.25})
    assert (a.label, b.label) == ("1001:python3", "1002:python3")


def test_a_busy_window_in_which_a_holder_left_is_not_the_remaining_ones() -> None:
    """Live on an H200: tenant A's last quarter second of matmuls, its samples gone with it, went to
    tenant B's tiny process, alone on the GPU at the poll. A GPU is one holder's only where that
    holder held it alone at both ends of the window."""
    assert window_shares(sample(1, (), pids=(3,)), IDS, before=frozenset({A, B})) == {UNATTRIBUTED: 1.0}
    assert window_shares(sample(1, (), pids=(3,)), IDS, before=frozenset({B})) == {B: 1.0}
    assert window_shares(sample(1, (), pids=(3,)), IDS, before=frozenset()) == {B: 1.0}  # it came to a GPU no one held
    assert window_shares(sample(1, ((1, 0.5),), pids=(3,)), IDS, before=frozenset({A, B})) == {A: 1.0}  # samples still say whose
