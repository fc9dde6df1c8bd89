"""Xid errors from DCGM: each Xid the driver reports is one sample of field 230, on the GPU or, for an
Xid the driver attributes to a MIG instance, on that GPU instance or compute instance.

The backend reads every sample cached since its previous read (dcgmGetValuesSince_v2), so each is one
event, two Xids within one poll included. The first read after a (re)connect returns what the cache
already held and is not counted: it is the baseline. Instances' Xids count on their physical GPU.
"""

from __future__ import annotations

import logging

from gpueff.logs import gpu_fields

log = logging.getLogger(__name__)


class XidCounter:
    def __init__(self) -> None:
        self._counts: dict[str, dict[int, int]] = {}  # uuid -> Xid -> count since start
        self._last: dict[str, int] = {}  # uuid -> the most recent Xid

    def count(self, uuid: str, index: int, code: int, where: str = "") -> None:
        counts = self._counts.setdefault(uuid, {})
        counts[code] = counts.get(code, 0) + 1
        self._last[uuid] = code
        log.warning("Xid %d on GPU %d (%s)%s", code, index, uuid, where, extra=gpu_fields(index, uuid, xid=code))

    def counts(self, uuid: str) -> dict[int, int]:
        return dict(self._counts.get(uuid, {}))

    def last(self, uuid: str) -> int | None:
        return self._last.get(uuid)
