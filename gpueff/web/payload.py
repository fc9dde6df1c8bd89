"""What /metrics serves: each snapshot's text rendered once, right after its poll, and gzipped once
where scrapes ask for gzip; each scrape only appends the snapshot's age.

A poll whose snapshot no scrape will read is not rendered: once scrapes have shown their cadence
(Prometheus scrapes at a fixed interval), a snapshot is rendered only when the next scrape is due
within ``RENDER_AHEAD`` collect intervals of its poll, or overdue. Polling at 100 ms for a scrape
every 15 s renders 2 or 3 polls of 150. The cadence is the shortest gap between recent scrapes, so
two scrapers at different offsets (a Prometheus pair) make it their shortest gap and more polls are
rendered, never fewer. A scrape that comes earlier than its cadence finds the latest snapshot
unrendered and renders it itself (once).

The body is compressed at level 1 and stops at a sync flush; each scrape appends the age line as a
stored (uncompressed) final deflate block and the gzip trailer, whose CRC-32 continues the body's.
The result is one ordinary gzip member that any client decompresses.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import NamedTuple

from gpueff.exposition.render import age_tail, render
from gpueff.snapshot import Snapshot

RENDER_AHEAD = 2  # collect intervals before a due scrape from which each poll is rendered
CADENCE_SCRAPES = 8  # the recent scrapes whose shortest gap is the expected cadence

@dataclass(frozen=True, slots=True)
class GzipBody:
    """A body compressed at level 1 into an unfinished gzip stream: ``finish`` appends the age
    line as a stored deflate block and the trailer, so a scrape never compresses anything."""

    prefix: bytes  # gzip header + the body's deflate blocks, sync-flushed (byte-aligned, not final)
    crc: int
    size: int

    @classmethod
    def of(cls, body: bytes) -> GzipBody:
        compressor = zlib.compressobj(1, zlib.DEFLATED, 31)  # 31: gzip wrapper
        prefix = compressor.compress(body) + compressor.flush(zlib.Z_SYNC_FLUSH)
        return cls(prefix, zlib.crc32(body), len(body))

    def finish(self, tail: bytes) -> tuple[bytes, bytes]:
        """The whole gzip stream in two parts: the prefix, then the tail (< 64 KiB) as the final
        stored block and the gzip trailer (CRC-32, size)."""
        length = len(tail)
        block = b"\x01" + length.to_bytes(2, "little") + (length ^ 0xFFFF).to_bytes(2, "little") + tail
        trailer = zlib.crc32(tail, self.crc).to_bytes(4, "little") + ((self.size + length) & 0xFFFFFFFF).to_bytes(4, "little")
        return self.prefix, block + trailer


class Payload(NamedTuple):
    """What a scrape sends: ``parts`` joined are the body (one write), ``encoding`` its Content-Encoding."""

    parts: tuple[bytes, ...]
    encoding: str | None  # "gzip" or None

    @property
    def length(self) -> int:
        return sum(len(part) for part in self.parts)


class _Prepared(NamedTuple):
    snapshot: Snapshot
    stale: bool  # rendered as stale (every GPU down)
    body: bytes | None  # the text without the age line; None: not rendered (no scrape was due)
    gzip: GzipBody | None


class Payloads:
    """The latest snapshot, rendered. ``publish`` (on the poller's thread, before the snapshot is
    served) renders it where a scrape is due, and gzips it too from the first scrape that asked for
    gzip on; a scrape reads what was published in one step and renders only a snapshot it finds
    stale or unrendered (once)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._prepared: _Prepared | None = None
        self._gzip_wanted = False
        self._scrapes: deque[float] = deque(maxlen=CADENCE_SCRAPES)  # when recent scrapes came

    def publish(self, snapshot: Snapshot) -> None:
        if not self._scrape_due(snapshot.settings.collect_interval):
            self._prepared = _Prepared(snapshot, False, None, None)
            return
        body = render(snapshot)
        self._prepared = _Prepared(snapshot, False, body, GzipBody.of(body) if self._gzip_wanted else None)

    def _scrape_due(self, collect_interval: float) -> bool:
        """Whether a scrape may come before the poll after next: always until scrapes have shown a
        cadence (three of them), then from ``RENDER_AHEAD`` intervals before the next is due."""
        scrapes = tuple(self._scrapes)  # copied in one C call: the serving thread appends meanwhile
        if len(scrapes) < 3:
            return True
        cadence = min(later - earlier for earlier, later in pairwise(scrapes))
        return self.clock() + RENDER_AHEAD * collect_interval >= scrapes[-1] + cadence

    def payload(self, gzip: bool = False) -> Payload | None:
        """The metrics for one scrape (gzip if ``gzip``), or None before the first poll."""
        prepared = self._prepared
        if prepared is None:
            return None
        now = self.clock()
        self._scrapes.append(now)
        snapshot = prepared.snapshot
        age = max(0.0, now - snapshot.taken_monotonic)
        stale = age > snapshot.settings.stale_after
        if stale != prepared.stale or prepared.body is None or (gzip and prepared.gzip is None):
            prepared = self._prepare(prepared, stale, gzip)
        assert prepared.body is not None
        tail = age_tail(age)
        if not gzip:
            return Payload((prepared.body, tail), None)
        assert prepared.gzip is not None
        return Payload(prepared.gzip.finish(tail), "gzip")

    def body(self) -> bytes | None:
        """The uncompressed metrics text, or None before the first poll."""
        payload = self.payload()
        return None if payload is None else b"".join(payload.parts)

    def _prepare(self, seen: _Prepared, stale: bool, gzip: bool) -> _Prepared:
        """What the poller did not make: the snapshot rendered (as stale, or where no scrape was
        due), or its gzip body before any scrape had asked for gzip. Made once; a newer
        publication wins over it."""
        with self._lock:
            if gzip:
                self._gzip_wanted = True
            current = self._prepared
            if current is not None and current.snapshot is seen.snapshot and current.stale == stale and current.body is not None:
                seen = current
            elif seen.stale != stale or seen.body is None:
                seen = _Prepared(seen.snapshot, stale, render(seen.snapshot, stale), None)
            if gzip and seen.gzip is None:
                assert seen.body is not None
                seen = seen._replace(gzip=GzipBody.of(seen.body))
            if self._prepared is None or self._prepared.snapshot is seen.snapshot:
                self._prepared = seen
            return seen
