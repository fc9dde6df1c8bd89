"""The live page's data: the latest snapshot's overview and the history points a page has not seen,
as JSON. Reads only what the poller published (the snapshot and the history it fed)."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpueff import __version__
from gpueff.attribution.reasons import PATHS, REASONS
from gpueff.overview import GpuOverview, fleet, job_overviews, snapshot_overview
from gpueff.snapshot import Snapshot
from gpueff.taxonomy import CLASSES
from gpueff.untrusted import whole_number
from gpueff.web.history import SCALE, History, HistoryView

CONTENT_TYPE = "application/json"


def _finite(value: Any) -> Any:
    """A JSON-safe copy: NaN and infinities become null (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _fields(item: Any) -> dict[str, Any]:
    """A dataclass's fields, one level deep (dataclasses.asdict copies deeply, ten times slower)."""
    return {field.name: getattr(item, field.name) for field in dataclasses.fields(item)}


def _gpu(view: GpuOverview) -> dict[str, Any]:
    fields = _fields(view)
    fields["apps"] = [_fields(app) for app in view.apps]
    fields["flags"] = list(view.flags)
    fields["pods"] = [{"namespace": pod.namespace, "pod": pod.pod, "container": pod.container} for pod in view.pods]
    fields["slurm_jobs"] = [{"id": job.job_id, "user_id": job.user_id} for job in view.slurm_jobs]
    fields["attribution"] = None if view.attribution is None else {"path": view.attribution[0], "reason": view.attribution[1]}
    listed = view.processes
    fields["processes"] = None if listed is None else {
        "rows": [_fields(row) for row in listed.rows], "others": listed.others, "others_memory_bytes": listed.others_memory_bytes, "others_busy_share": listed.others_busy_share,
    }
    return fields


def _history(view: HistoryView) -> dict[str, Any]:
    return {
        "capacity": view.capacity,
        "first": view.first,
        "last": view.last,
        "times": [round(moment, 3) for moment in view.times],
        "scale": SCALE,  # the values are thousandths
        "gpus": {uuid: {"utilization": series.utilization, "sm_active": series.sm_active} for uuid, series in view.gpus.items()},
    }


def _head(snapshot: Snapshot, stale: bool, note: str) -> dict[str, Any]:
    """Everything the page shows but the history and the snapshot's age."""
    gpus = snapshot_overview(snapshot, stale)
    body: dict[str, Any] = _finite(
        {
            "version": __version__,
            "note": note,
            "backend": snapshot.backend_name,
            "replayed": snapshot.replayed,
            "stale": stale,
            "collect_interval_seconds": snapshot.settings.collect_interval,
            "fleet": _fields(fleet(gpus)),
            "gpus": [_gpu(view) for view in gpus],
            "jobs": [_fields(job) for job in job_overviews(snapshot, stale)],
        }
    )
    return body


def _classes() -> dict[str, dict[str, str]]:
    return {each.name: {"meaning": each.meaning, "what_to_try": each.what_to_try} for each in CLASSES}


_ATTRIBUTION = {"paths": PATHS, "reasons": REASONS}  # what each path and reason of a GPU's attribution means


def _json(value: Any) -> bytes:
    import json  # 0.5 MB of RSS: only once a page asks

    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


@dataclass(frozen=True, slots=True)
class _Answers:
    """One snapshot's answers to every poll, all but their last bytes (the age): ``full`` holds the
    whole history and the class descriptions (a new page, or one that fell behind), ``recent`` the
    exact answer for a page that holds the history up to one of the last RECENT points."""

    sequence: int
    stale: bool
    head: bytes  # the GPUs' overview, without its closing brace: shared by every answer
    full: bytes  # ',"history":...' with the whole window and the classes
    recent: dict[int, bytes]  # after -> ',"history":...' with the points after it


WATCHED_FOR = 30.0  # seconds after a page's last poll during which each new snapshot's answers are made ahead
RECENT = 8  # a page polls every 1-5 s and a point closes at most once a second: up to 6 points behind


class LiveData:
    """Answers the page's polls: ``answer(after)`` is the JSON for a page that holds history points
    up to number ``after`` (0: none, and then the class descriptions come too).

    The answers are made once per snapshot, never per request: while a page polls (in the last
    WATCHED_FOR seconds), by the poller's thread as it publishes each snapshot (``prepare``);
    otherwise by the first poll that finds none for the current snapshot (or finds it gone stale),
    once. A request only picks its bytes and appends the snapshot's age, whatever ``after`` it
    sends: an ``after`` outside the last RECENT points gets the whole history, from which a page
    takes the points it lacks.

    ``ready`` is what /-/ready asks (the poller's is_ready; without it, fresh data counts as ready):
    like the age, it is appended by each request."""

    def __init__(self, current: Callable[[], Snapshot | None], history: History, note: str, clock: Callable[[], float] = time.monotonic, ready: Callable[[], bool] | None = None) -> None:
        self.current = current
        self.history = history
        self.note = note
        self.clock = clock
        self.ready = ready
        self._lock = threading.Lock()
        self._answers: _Answers | None = None
        self._asked = -math.inf  # when a page last polled (clock)
        self._history_json: tuple[tuple[int, int], dict[int, bytes]] | None = None  # by (first, last): the JSON of the points after each recent ``after`` (0: all, and the classes)

    def prepare(self, snapshot: Snapshot) -> None:
        """On the poller's thread, after the history took ``snapshot`` and before it is published:
        make its answers where a page has polled lately."""
        if self.clock() - self._asked <= WATCHED_FOR:
            self._make(snapshot, stale=False)

    def answer(self, after: int) -> tuple[bytes, bytes, bytes] | None:
        """The JSON in three parts (written as they are, never joined), or None before the first poll."""
        snapshot = self.current()
        if snapshot is None:
            return None
        now = self.clock()
        self._asked = now
        age = max(0.0, now - snapshot.taken_monotonic)
        stale = age > snapshot.settings.stale_after
        answers = self._answers
        if answers is None or answers.sequence != snapshot.sequence or answers.stale != stale:
            answers = self._make(snapshot, stale)
        ready = not stale and (self.ready() if self.ready is not None else True)
        return answers.head, (answers.recent.get(after, answers.full) if after else answers.full), b',"ready":%s,"age_seconds":%.3f}' % (b"true" if ready else b"false", age)

    def _make(self, snapshot: Snapshot, stale: bool) -> _Answers:
        with self._lock:
            made = self._answers
            if made is not None and made.sequence == snapshot.sequence and made.stale == stale:
                return made
            head = _json(_head(snapshot, stale, self.note))[:-1]  # without its closing brace
            span = self.history.span()
            if self._history_json is None or self._history_json[0] != span:  # a point closed: at most once a second
                histories = {after: b',"history":' + _json(_history(self.history.since(after))) for after in range(max(1, span[1] - RECENT), span[1] + 1)}
                histories[0] = b',"history":' + _json(_history(self.history.since(0))) + b',"classes":' + _json(_classes()) + b',"attribution":' + _json(_ATTRIBUTION)
                self._history_json = (span, histories)
            histories = self._history_json[1]
            made = _Answers(snapshot.sequence, stale, head, histories[0], {after: history for after, history in histories.items() if after})
            self._answers = made
            return made


AFTER_DIGITS = 18


def parse_after(query: str) -> int | None:
    """The ``after`` parameter of the page's poll (``after=123``, the first one where repeated); 0
    where absent, None where it is not 1 to 18 ASCII digits (the server answers 400)."""
    for item in query.split("&"):
        name, _, value = item.partition("=")
        if name == "after":
            return whole_number(value, AFTER_DIGITS)
    return 0
