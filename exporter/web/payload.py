"""A metrics body gzipped once per poll, finished per scrape without compressing anything.

The poller compresses the body at level 1 and stops at a sync flush; each scrape appends the
snapshot's age line as a stored (uncompressed) final deflate block and the gzip trailer, whose CRC-32
continues the body's. The result is one ordinary gzip member that any client decompresses.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


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
