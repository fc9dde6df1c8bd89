"""A deadline over a whole HTTP exchange. A socket timeout bounds each read, not the exchange: a
peer that trickles a byte now and then (a hostile exporter page, a compromised API server) holds
the reader for as long as it likes. Here a timer shuts the connection's socket down at the
deadline, which ends whatever read is under way."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # http.client (and email with it) is imported only by the callers that use it
    import http.client


@contextlib.contextmanager
def exchange_deadline(connection: http.client.HTTPConnection, seconds: float) -> Iterator[threading.Event]:
    """Within the block, ``connection`` is cut off ``seconds`` after it began; the event yielded is
    set once that happened (a read then fails or comes back short: check the event first)."""
    expired = threading.Event()
    opened: list[socket.socket] = []  # http.client forgets the socket once a response says it closes
    connect = connection.connect

    def connect_and_keep() -> None:
        connect()
        if connection.sock is not None:
            opened.append(connection.sock)

    connection.connect = connect_and_keep  # type: ignore[method-assign]

    def cut() -> None:
        expired.set()
        for sock in [*opened, connection.sock]:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(seconds, cut)
    timer.daemon = True
    timer.start()
    try:
        yield expired
    finally:
        timer.cancel()
        connection.connect = connect  # type: ignore[method-assign]
