"""The report's accounting (gpueff/commands/report/ledger.py) on canned answers: pods named on
the GPU series, the fair split's holders for the rest of each GPU's time, never counted twice, the
time no owner accounts for under its reason, the dominant class, teams; and for any answers, the
owners and the no-owner rows add up to the fleet in every state."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpueff.commands.report.ledger import Answers, Ledger, account
from gpueff.commands.report.prometheus import Sample
from gpueff.pipeline.states import STATES

A, B, C = ("node-a:9947", "GPU-a"), ("node-a:9947", "GPU-b"), ("node-b:9947", "GPU-c")
UID = "c5be6b20-b934-50f8-ae90-5c607280f0b7"


def gpu_sample(gpu: tuple[str, str], state: str, value: float, pod: str = "", **more: str) -> Sample:
    namespace, _, name = pod.partition("/")
    labels = {"instance": gpu[0], "uuid": gpu[1], "gpu": "0", "state": state, **({"namespace": namespace, "pod": name} if pod else {}), **more}
    return Sample(labels, value)


def holder_sample(gpu: tuple[str, str], kind: str, holder: str, state: str, value: float, **more: str) -> Sample:
    return Sample({"instance": gpu[0], "uuid": gpu[1], "holder_kind": kind, "holder": holder, "state": state, **more}, value)


def answers(gpu: list[Sample], holder: list[Sample] = (), classes: list[Sample] = (), attribution: list[Sample] = (), jobs: list[Sample] = (), pods: list[Sample] = (),
            cost: list[Sample] = ()) -> Answers:  # type: ignore[assignment]
    return Answers({"seconds": gpu, "joules": [Sample(s.labels, s.value * 100) for s in gpu], "cost": cost}, {"seconds": list(holder), "joules": [Sample(s.labels, s.value * 100) for s in holder], "cost": []},
                   list(classes), list(attribution), list(jobs), list(pods))


def by_name(ledger: Ledger) -> dict[str, dict[str, float]]:
    return {f"{owner.kind} {owner.name}": {state: value for state, value in owner.amounts.seconds.items() if value} for owner in ledger.owners}


def test_a_pod_on_the_gpu_series_owns_every_state_of_its_gpu_free_included() -> None:
    ledger = account(answers([gpu_sample(A, "held_idle", 3600, "notebooks/jupyter-0"), gpu_sample(A, "free", 1800, "notebooks/jupyter-0"), gpu_sample(A, "free", 600)],
                             attribution=[Sample({"instance": A[0], "uuid": A[1], "path": "none", "reason": "no_process"}, 1)]))
    assert by_name(ledger) == {"pod notebooks/jupyter-0": {"held_idle": 3600, "free": 1800}}
    owner = ledger.owners[0]
    assert owner.wasted_seconds == 5400 and owner.team == "notebooks"  # allocated with no process is the pod's waste
    assert [(row.name, row.amounts.seconds["free"]) for row in ledger.unowned] == [("no_process", 600)]


def test_holders_take_the_time_without_a_pod_label_and_never_twice() -> None:
    gpu = [gpu_sample(A, "working", 1000, "ml/train-0"), gpu_sample(A, "working", 500),  # A: a pod for 1000 s, then shared for 500
           gpu_sample(B, "host_starved", 700), gpu_sample(B, "free", 300)]
    holder = [holder_sample(A, "pod", UID, "working", 1200), holder_sample(A, "process", "1003:python3", "working", 300),  # A's holders cover all 1500 s
              holder_sample(B, "slurm_job", "48213", "host_starved", 700)]
    ledger = account(answers(gpu, holder, jobs=[Sample({"job_id": "48213", "user_id": "2001"}, 1)], pods=[Sample({"uid": UID, "namespace": "ml", "pod": "train-0"}, 1)]))
    named = by_name(ledger)
    # 500 s of A had no pod label: its holders share it 1200:300 (the pod UID is the same pod, named through kube_pod_info).
    assert named["pod ml/train-0"]["working"] == pytest.approx(1000 + 400)
    assert named["process 1003:python3"]["working"] == pytest.approx(100)
    assert named["slurm_job 48213"] == {"host_starved": 700}
    slurm = next(owner for owner in ledger.owners if owner.kind == "slurm_job")
    assert slurm.team == "uid 2001"
    assert [(row.name, row.amounts.seconds["free"]) for row in ledger.unowned] == [("unknown", 300)]  # B's free time: no owner, no attribution series
    assert ledger.owners[0].name == "48213"  # most waste first


def test_a_pod_holder_without_kube_state_metrics_is_named_by_its_uid_and_teams_sum() -> None:
    gpu = [gpu_sample(A, "busy_not_working", 100), gpu_sample(B, "held_idle", 50, "research/a"), gpu_sample(C, "held_idle", 25, "research/b")]
    ledger = account(answers(gpu, [holder_sample(A, "pod", UID, "busy_not_working", 100)]), by="team")
    assert by_name(ledger) == {"team research": {"held_idle": 75}, f"team pod uid {UID}": {"busy_not_working": 100}}


def test_the_dominant_class_is_the_gpus_class_while_the_owner_held_it() -> None:
    gpu = [gpu_sample(A, "host_starved", 100, "serving/llm"), gpu_sample(B, "working", 100)]
    classes = [Sample({"instance": A[0], "uuid": A[1], "namespace": "serving", "pod": "llm", "class": "host"}, 90), Sample({"instance": A[0], "uuid": A[1], "namespace": "serving", "pod": "llm", "class": "unknown"}, 400),
               Sample({"instance": A[0], "uuid": A[1], "class": "idle"}, 1000),  # A's time without the pod's label: not the pod's
               Sample({"instance": B[0], "uuid": B[1], "class": "compute"}, 70), Sample({"instance": B[0], "uuid": B[1], "class": "memory"}, 30)]
    ledger = account(answers(gpu, [holder_sample(B, "user", "1003", "working", 100)], classes))
    classes_of = {owner.name: owner.dominant_class for owner in ledger.owners}
    assert classes_of == {"serving/llm": "host", "1003": "compute"}  # unknown never wins where another class was read
    assert ledger.owners[0].what_to_try.startswith("Feed the GPU faster")


def test_money_is_kept_per_currency_and_an_unknown_state_is_not_counted() -> None:
    cost = [gpu_sample(A, "held_idle", 2.5, "ml/x", currency="USD"), gpu_sample(B, "held_idle", 1.0, "ml/y", currency="EUR")]
    ledger = account(answers([gpu_sample(A, "held_idle", 3600, "ml/x"), gpu_sample(B, "held_idle", 3600, "ml/y"), gpu_sample(B, "napping", 99, "ml/y")], cost=cost))
    assert ledger.fleet.cost == {"USD": {**dict.fromkeys(STATES, 0.0), "held_idle": 2.5}, "EUR": {**dict.fromkeys(STATES, 0.0), "held_idle": 1.0}}
    assert sum(ledger.fleet.seconds.values()) == 7200


SAMPLE_STATES = st.sampled_from(STATES)
GPUS = st.sampled_from([A, B, C])
AMOUNT = st.floats(0, 1e6, allow_nan=False)


@given(st.lists(st.tuples(GPUS, SAMPLE_STATES, AMOUNT, st.sampled_from(["", "ml/a", "ml/b"])), max_size=30),
       st.lists(st.tuples(GPUS, st.sampled_from([("pod", UID), ("slurm_job", "7"), ("process", "1:x"), ("unattributed", "")]), SAMPLE_STATES, AMOUNT), max_size=30))
def test_owners_and_the_time_no_owner_accounts_for_add_up_to_the_fleet_in_every_state(gpu_rows, holder_rows) -> None:
    gpu = [gpu_sample(g, state, value, pod) for g, state, value, pod in gpu_rows]
    holder = [holder_sample(g, kind, name, state, value) for g, (kind, name), state, value in holder_rows]
    ledger = account(answers(gpu, holder))
    for state in STATES:
        parts = sum(owner.amounts.seconds[state] for owner in ledger.owners) + sum(row.amounts.seconds[state] for row in ledger.unowned)
        assert parts == pytest.approx(ledger.fleet.seconds[state], rel=1e-9, abs=1e-6), state
        joules = sum(owner.amounts.joules[state] for owner in ledger.owners) + sum(row.amounts.joules[state] for row in ledger.unowned)
        assert joules == pytest.approx(ledger.fleet.joules[state], rel=1e-9, abs=1e-4), state
