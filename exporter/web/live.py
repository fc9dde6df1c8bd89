"""The live page's data: the latest snapshot's overview and the history points a page has not seen,
as JSON. Reads only what the poller published (the snapshot and the history it fed)."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from exporter import __version__
from exporter.overview import GpuOverview, fleet, job_overviews, snapshot_overview
from exporter.snapshot import Snapshot
from exporter.taxonomy import CLASSES
from exporter.web.history import SCALE, History, HistoryView

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


def document(snapshot: Snapshot, stale: bool, age: float, history: HistoryView, note: str, with_classes: bool) -> dict[str, Any]:
    """Everything the page shows, for one poll of the page."""
    gpus = snapshot_overview(snapshot, stale)
    body: dict[str, Any] = _finite(
        {
            "version": __version__,
            "note": note,
            "backend": snapshot.backend_name,
            "replayed": snapshot.replayed,
            "stale": stale,
            "age_seconds": round(age, 3),
            "collect_interval_seconds": snapshot.settings.collect_interval,
            "fleet": _fields(fleet(gpus)),
            "gpus": [_gpu(view) for view in gpus],
            "jobs": [_fields(job) for job in job_overviews(snapshot, stale)],
        }
    )
    body["history"] = _history(history)  # integers and None only: nothing to make finite
    if with_classes:
        body["classes"] = {each.name: {"meaning": each.meaning, "what_to_try": each.what_to_try} for each in CLASSES}
    return body


class LiveData:
    """Answers the page's polls: ``body(after)`` is the JSON for a page that holds history points up
    to number ``after`` (0: none, and then the class descriptions come too)."""

    def __init__(self, current: Callable[[], Snapshot | None], history: History, note: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.current = current
        self.history = history
        self.note = note
        self.clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[tuple[int, bool, int, int, bool], bytes] | None = None

    def body(self, after: int) -> bytes | None:
        """The JSON, or None before the first poll."""
        snapshot = self.current()
        if snapshot is None:
            return None
        age = max(0.0, self.clock() - snapshot.taken_monotonic)
        stale = age > snapshot.settings.stale_after
        view = self.history.since(after)
        key = (snapshot.sequence, stale, view.first, view.last, after == 0)
        with self._lock:
            if self._cached is not None and self._cached[0] == key:
                return self._cached[1]
        import json  # 0.5 MB of RSS: only once a page asks

        encoded = json.dumps(document(snapshot, stale, age, view, self.note, after == 0), separators=(",", ":"), allow_nan=False).encode()
        with self._lock:
            self._cached = (key, encoded)
        return encoded


def parse_after(query: str) -> int:
    """The ``after`` parameter of the page's poll (``after=123``); 0 where absent or not a small number."""
    for item in query.split("&"):
        name, _, value = item.partition("=")
        if name == "after" and value.isdigit() and len(value) <= 18:
            return int(value)
    return 0
