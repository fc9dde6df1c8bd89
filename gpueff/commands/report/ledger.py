"""The report's accounting: from the answers to its queries, each owner's GPU time, energy and money
per state over the range, its dominant class and what to try, and the time no owner accounts for.

Owners come from two places, never counted twice:

- **pods named on the GPU series** (the kubelet's assignment, ``kubernetes.pod_labels:
  every_series``): while a pod holds a GPU, every state of that GPU is the pod's, ``free`` included
  (allocated, no process running);
- **the fair split's holders** (``sharing.enabled``, or the demo's declared owners) for the rest of
  each GPU's time: the holders of a GPU take its time that carried no pod label, in proportion to
  their own state counters (all of it on a GPU that never had a pod label);

and whatever of a GPU's time neither names goes to **no owner**, under the reason its
``gpueff_gpu_attribution_info`` gave. For every state the owners and the no-owner rows add up to
the fleet's total. A pod holder's UID is named namespace/pod where kube-state-metrics'
``kube_pod_info`` says so; a Slurm job carries its user from ``gpueff_gpu_job_info``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpueff.commands.report.prometheus import Sample
from gpueff.pipeline.states import STATES
from gpueff.taxonomy import CLASS_NAMES, WHAT_TO_TRY

WASTE = ("held_idle", "host_starved", "busy_not_working")  # held, and not doing the GPU's work
QUANTITIES = ("seconds", "joules", "cost")
Gpu = tuple[str, str]  # (instance, uuid)


@dataclass
class Amounts:
    """Per state; cost per currency and state."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STATES, 0.0))
    joules: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STATES, 0.0))
    cost: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, quantity: str, state: str, value: float, currency: str = "") -> None:
        if state not in STATES:
            return  # a state this report does not know (a newer exporter): not counted
        if quantity == "cost":
            self.cost.setdefault(currency, dict.fromkeys(STATES, 0.0))[state] += value
        else:
            getattr(self, quantity)[state] += value

    def merge(self, other: Amounts, factor: Mapping[tuple[str, str, str], float] | None = None) -> None:
        """Add ``other``, each (quantity, currency, state) scaled by ``factor`` where given."""
        scale = (lambda key: factor.get(key, 1.0)) if factor is not None else (lambda _key: 1.0)
        for state in STATES:
            self.seconds[state] += other.seconds[state] * scale(("seconds", "", state))
            self.joules[state] += other.joules[state] * scale(("joules", "", state))
        for currency, costs in other.cost.items():
            mine = self.cost.setdefault(currency, dict.fromkeys(STATES, 0.0))
            for state in STATES:
                mine[state] += costs[state] * scale(("cost", currency, state))

    def wasted(self, quantity: str, free_counts: bool) -> float:
        """The seconds or joules of the waste states (and of free time, where it counts)."""
        values: dict[str, float] = getattr(self, quantity)
        return sum(values[state] for state in (*WASTE, "free") if state != "free" or free_counts)

    def wasted_cost(self, free_counts: bool) -> dict[str, float]:
        return {currency: sum(costs[state] for state in (*WASTE, "free") if state != "free" or free_counts) for currency, costs in self.cost.items()}


@dataclass
class Owner:
    kind: str  # pod, slurm_job, user, process, unattributed; "no_owner" for the time none names
    name: str  # how the report names it: namespace/pod, the job id, uid:program, the reason
    team: str  # the namespace, the user's uid, or "" where unknown
    free_is_waste: bool = False  # a pod's free time is GPU time allocated to it with no process
    per_gpu: dict[Gpu, Amounts] = field(default_factory=lambda: defaultdict(Amounts))
    classes: dict[str, float] = field(default_factory=dict)  # the class mix of the GPU time it wasted (of all of it, where it wasted none)

    @property
    def amounts(self) -> Amounts:
        total = Amounts()
        for amounts in self.per_gpu.values():
            total.merge(amounts)
        return total

    @property
    def gpus(self) -> set[Gpu]:
        return set(self.per_gpu)

    @property
    def wasted_seconds(self) -> float:
        return self.amounts.wasted("seconds", self.free_is_waste)

    @property
    def dominant_class(self) -> str:
        known = {name: score for name, score in self.classes.items() if score > 0 and name != "unknown"}
        if not known:
            return "unknown"
        return max(sorted(known), key=lambda name: known[name])

    @property
    def what_to_try(self) -> str:
        return WHAT_TO_TRY.get(self.dominant_class, "")

    def weigh(self, classes: Mapping[tuple[Gpu, str], Mapping[str, float]], labelled: bool) -> None:
        """Its class mix: each GPU's classes (read while its series carried this pod, for a pod
        named on them; else while they carried none) weighted by the time it wasted there, or by
        all its time where it wasted none."""
        wasted = {gpu: amounts.wasted("seconds", self.free_is_waste) for gpu, amounts in self.per_gpu.items()}
        busy = {gpu: sum(amounts.seconds.values()) - amounts.seconds["free"] for gpu, amounts in self.per_gpu.items()}
        weights = wasted if any(value > 0 for value in wasted.values()) else busy
        mix: dict[str, float] = defaultdict(float)
        for gpu, weight in weights.items():
            counts = classes.get((gpu, self.name if labelled else ""), {})
            total = sum(counts.values())
            for name, count in counts.items() if total > 0 and weight > 0 else ():
                mix[name] += weight * count / total
        self.classes = dict(mix)


@dataclass
class Ledger:
    fleet: Amounts
    gpus: int
    owners: list[Owner]  # ranked: most GPU time wasted first
    unowned: list[Owner]  # the time no owner accounts for, by reason


@dataclass
class Answers:
    """What the report's queries answered (gpueff/commands/report/queries.py)."""

    gpu: dict[str, list[Sample]]  # quantity -> by (instance, uuid, gpu, namespace, pod, state[, currency])
    holder: dict[str, list[Sample]]  # quantity -> by (instance, uuid, holder_kind, holder, state[, currency])
    classes: list[Sample]  # by (instance, uuid, namespace, pod, class): samples in each class over the range
    attribution: list[Sample]  # by (instance, uuid, gpu, path, reason)
    jobs: list[Sample]  # by (job_id, user_id)
    pod_names: list[Sample]  # kube_pod_info by (uid, namespace, pod)


def _gpu(labels: Mapping[str, str]) -> Gpu:
    return labels.get("instance", ""), labels.get("uuid", "")


def account(answers: Answers, by: str = "owner") -> Ledger:
    """The ledger of the answers; ``by`` owner, or team (a pod's namespace, a job's or process's user)."""
    fleet = Amounts()
    unlabelled: dict[Gpu, Amounts] = defaultdict(Amounts)  # each GPU's time that carried no pod label
    owners: dict[tuple[str, str], Owner] = {}
    labelled: set[tuple[str, str]] = set()  # the pods named on GPU series
    all_gpus: set[Gpu] = set()
    for quantity in QUANTITIES:
        for sample in answers.gpu.get(quantity, ()):
            labels = sample.labels
            gpu, state, currency = _gpu(labels), labels.get("state", ""), labels.get("currency", "")
            all_gpus.add(gpu)
            fleet.add(quantity, state, sample.value, currency)
            namespace, pod = labels.get("namespace", ""), labels.get("pod", "")
            if pod:
                key = ("pod", f"{namespace}/{pod}")
                labelled.add(key)
                owners.setdefault(key, Owner("pod", key[1], namespace, free_is_waste=True)).per_gpu[gpu].add(quantity, state, sample.value, currency)
            else:
                unlabelled[gpu].add(quantity, state, sample.value, currency)
    pod_names = {sample.labels.get("uid", ""): (sample.labels.get("namespace", ""), sample.labels.get("pod", "")) for sample in answers.pod_names}
    job_users = {sample.labels.get("job_id", ""): sample.labels.get("user_id", "") for sample in answers.jobs}
    for gpu, parts in _holders(answers.holder, pod_names, job_users).items():
        rest = unlabelled.get(gpu, Amounts())
        total = Amounts()
        for _owner, part in parts.values():
            total.merge(part)
        factor = _fit(total, rest)
        for key, (owner, part) in parts.items():
            owners.setdefault(key, owner).per_gpu[gpu].merge(part, factor)
        unlabelled[gpu] = _less(rest, total, factor)
    reasons = _reasons(answers.attribution)
    unowned: dict[str, Owner] = {}
    for gpu, left in unlabelled.items():
        if sum(left.seconds.values()) > 0:
            reason = reasons.get(gpu, "unknown")
            unowned.setdefault(reason, Owner("no_owner", reason, "")).per_gpu[gpu].merge(left)
    classes = _classes(answers.classes)
    for key, owner in owners.items():
        owner.weigh(classes, key in labelled)
    for row in unowned.values():
        row.weigh(classes, False)
    ranked = _ranked(owners.values() if by == "owner" else _teams(owners.values(), classes))
    return Ledger(fleet, len(all_gpus), ranked, sorted(unowned.values(), key=lambda row: (-sum(row.amounts.seconds.values()), row.name)))


def _holders(answers: dict[str, list[Sample]], pod_names: Mapping[str, tuple[str, str]], job_users: Mapping[str, str]) -> dict[Gpu, dict[tuple[str, str], tuple[Owner, Amounts]]]:
    """GPU -> each holder's owner row (not yet in the ledger) and amounts on it."""
    found: dict[Gpu, dict[tuple[str, str], tuple[Owner, Amounts]]] = defaultdict(dict)
    for quantity in QUANTITIES:
        for sample in answers.get(quantity, ()):
            labels = sample.labels
            owner = _holder_owner(labels.get("holder_kind", ""), labels.get("holder", ""), pod_names, job_users)
            entry = found[_gpu(labels)].setdefault((owner.kind, owner.name), (owner, Amounts()))
            entry[1].add(quantity, labels.get("state", ""), sample.value, labels.get("currency", ""))
    return found


def _holder_owner(kind: str, holder: str, pod_names: Mapping[str, tuple[str, str]], job_users: Mapping[str, str]) -> Owner:
    if kind == "pod":
        namespace, pod = pod_names.get(holder, ("", ""))
        return Owner("pod", f"{namespace}/{pod}", namespace, free_is_waste=True) if pod else Owner("pod", f"pod uid {holder}", "")
    if kind == "slurm_job":
        user = job_users.get(holder, "")
        return Owner("slurm_job", holder, f"uid {user}" if user else "")
    if kind in ("process", "user"):
        uid = holder.split(":", 1)[0]
        return Owner(kind, holder, f"uid {uid}" if uid else "")
    return Owner("unattributed", "", "")


def _fit(total: Amounts, room: Amounts) -> dict[tuple[str, str, str], float]:
    """Per (quantity, currency, state): the share of the holders' amounts that fits in the GPU's
    time without a pod label (all of it where it fits, as on a GPU that never had one)."""
    factor: dict[tuple[str, str, str], float] = {}
    for state in STATES:
        for quantity in ("seconds", "joules"):
            held, free = getattr(total, quantity)[state], getattr(room, quantity)[state]
            factor[(quantity, "", state)] = min(1.0, free / held) if held > 0 else 0.0
        for currency, costs in total.cost.items():
            held, free = costs[state], room.cost.get(currency, {}).get(state, 0.0)
            factor[("cost", currency, state)] = min(1.0, free / held) if held > 0 else 0.0
    return factor


def _less(room: Amounts, total: Amounts, factor: Mapping[tuple[str, str, str], float]) -> Amounts:
    """What is left of a GPU's unlabelled time once its holders took their fitted shares."""
    left = Amounts()
    for state in STATES:
        left.seconds[state] = max(0.0, room.seconds[state] - total.seconds[state] * factor[("seconds", "", state)])
        left.joules[state] = max(0.0, room.joules[state] - total.joules[state] * factor[("joules", "", state)])
    for currency, costs in room.cost.items():
        taken = total.cost.get(currency, {})
        left.cost[currency] = {state: max(0.0, costs[state] - taken.get(state, 0.0) * factor.get(("cost", currency, state), 0.0)) for state in STATES}
    return left


def _classes(samples: Iterable[Sample]) -> dict[tuple[Gpu, str], dict[str, float]]:
    """(GPU, namespace/pod or "") -> samples in each class over the range."""
    found: dict[tuple[Gpu, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for sample in samples:
        labels = sample.labels
        name = labels.get("class", "")
        if name in CLASS_NAMES:
            pod = f"{labels.get('namespace', '')}/{labels['pod']}" if labels.get("pod") else ""
            found[(_gpu(labels), pod)][name] += sample.value
    return found


def _reasons(samples: Iterable[Sample]) -> dict[Gpu, str]:
    """GPU -> the reason no owner was named (the one that is not ok, where the GPU had several in the range)."""
    found: dict[Gpu, set[str]] = defaultdict(set)
    for sample in samples:
        found[_gpu(sample.labels)].add(sample.labels.get("reason", ""))
    return {gpu: min(reasons - {"ok"}) if reasons - {"ok"} else "ok" for gpu, reasons in found.items()}


def _teams(owners: Iterable[Owner], classes: Mapping[tuple[Gpu, str], Mapping[str, float]]) -> list[Owner]:
    """The owners summed by team: a pod's namespace, a Slurm job's or a process's user."""
    teams: dict[str, Owner] = {}
    mixes: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for owner in owners:
        name = owner.team or ("unattributed" if owner.kind == "unattributed" else owner.name if owner.kind == "pod" else f"{owner.kind} {owner.name}")
        team = teams.setdefault(name, Owner("team", name, name, free_is_waste=owner.free_is_waste))
        for gpu, amounts in owner.per_gpu.items():
            team.per_gpu[gpu].merge(amounts)
        weight = owner.wasted_seconds or sum(owner.amounts.seconds.values())
        for each, score in owner.classes.items():
            mixes[name][each] += score / max(sum(owner.classes.values()), 1e-12) * weight
    for name, team in teams.items():
        team.classes = dict(mixes[name])
    return list(teams.values())


def _ranked(owners: Iterable[Owner]) -> list[Owner]:
    return sorted((owner for owner in owners if sum(owner.amounts.seconds.values()) > 0), key=lambda owner: (-owner.wasted_seconds, owner.kind, owner.name))
