"""Xid errors from DCGM: it keeps only the last Xid per GPU (field 230) with its timestamp.

One event counts each time that timestamp changes after the first reading; the first reading (at start
or after a reconnect) is the baseline. Two Xids within one collect interval count as one.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class XidCounter:
    def __init__(self) -> None:
        self._counts: dict[str, dict[int, int]] = {}  # uuid -> Xid -> count since start
        self._last_ts: dict[str, int] = {}

    def forget_baseline(self) -> None:
        """After a reconnect the first reading is a new baseline (counts stay)."""
        self._last_ts.clear()

    def observe(self, uuid: str, index: int, code: float | None, ts: int) -> None:
        """A reading of field 230 (``code`` None where it is blank)."""
        previous = self._last_ts.get(uuid)
        self._last_ts[uuid] = ts
        if code is None or previous is None or ts == previous:
            return
        counts = self._counts.setdefault(uuid, {})
        counts[int(code)] = counts.get(int(code), 0) + 1
        log.warning("Xid %d on GPU %d (%s)", int(code), index, uuid)

    def counts(self, uuid: str) -> dict[int, int]:
        return dict(self._counts.get(uuid, {}))
