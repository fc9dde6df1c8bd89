"""The HTTP server's event loop: one thread and one selector serve every connection, within bounds.

Every socket is non-blocking, so no client can hold a thread. The bounds (docs/security.md):

- a request's line, header fields and (discarded) body, and a TLS handshake, must arrive within
  ``header_timeout`` of the connection's accept or, on a kept-alive connection, of the request's
  first byte; a kept-alive connection with no request under way is closed after ``idle_timeout``;
  a client must take a response within ``write_timeout``;
- at most ``max_connections`` are open (fewer where the open-file limit leaves less room); at the
  cap, or when the process runs out of file descriptors, a new connection closes the open one that
  has waited longest without a request being answered, so a scrape always gets in;
- when no connection can make room, accepting pauses for ``accept_backoff`` (the pending ones wait
  in the listen backlog) instead of spinning on a listening socket that stays readable;
- when a limit bites, one line is logged per kind and interval, with a count of what it held back;
- TLS handshakes run on their own thread, one step at a time (OpenSSL releases the GIL for the
  key's signature), so a flood of ClientHellos costs that thread's core, not the loop's turns:
  kept-alive scrapes go on being answered;
- a connection gets one request answered per turn of the loop: a client pipelining hundreds of
  requests waits its turn behind everyone else's, and is not read from while its next request
  waits; the next request is taken only once the last answer is with the kernel, and the kernel
  holds at most ``UNSENT_BYTES`` of a connection's answer that the client has not taken
  (TCP_NOTSENT_LOWAT), so a client that does not read pins almost no memory.

The handler answers each request at once with a ``Reply``, or returns None and calls ``complete``
later from another thread (basic auth's bcrypt runs off this thread).
"""

from __future__ import annotations

import collections
import errno
import logging
import math
import queue
import resource
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gpueff.httpserver.request import MAX_HEAD_BYTES, HttpError, Request, head_end, parse_head
from gpueff.logs import one_line

if TYPE_CHECKING:
    import ssl

log = logging.getLogger("gpueff.web.server")  # the serving log's source, as the server's lines have always said

FD_RESERVE = 64  # file descriptors left to everything else (NVML, logs, app scrapes, the kubelet socket)
_RECV_BYTES = 65536
_ACCEPT_BATCH = 64
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_TLS_JOIN_BYTES = 16 * 1024
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_PLAIN_HTTP_TO_TLS = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"

LINGER_TIMEOUT = 2.0  # seconds a closing connection's unread input is drained, so the answer is not lost to a reset
# Unsent bytes the kernel may queue per connection (TCP_NOTSENT_LOWAT); the rest of an answer waits
# in the loop as views of the shared payload. Without it the kernel grows each send buffer up to
# net.ipv4.tcp_wmem's maximum (4 MiB): 500 pipelined, unread scrapes pinned 3.8 MB per connection.
UNSENT_BYTES = 128 * 1024

# Connection states
PEEK, HANDSHAKE, READ, DISCARD, WAIT, HOLD, WRITE, LINGER = range(8)
_EVICTION_RANK = {LINGER: 0, WRITE: 2}  # closing ones first, then the longest waiting, then slow readers


@dataclass(frozen=True)
class Limits:
    header_timeout: float = 10.0
    idle_timeout: float = 120.0
    write_timeout: float = 30.0
    max_connections: int = 512
    listen_backlog: int = 1024
    accept_backoff: float = 0.5
    log_interval: float = 60.0


DEFAULT_LIMITS = Limits()


class Reply:
    """What to send: byte chunks written with one system call where the socket allows it."""

    __slots__ = ("chunks", "close", "not_before")

    def __init__(self, chunks: Sequence[bytes], close: bool = False, not_before: float = 0.0) -> None:
        self.chunks = chunks
        self.close = close
        self.not_before = not_before  # monotonic time before which it is held back (failed logins)


class Connection:
    __slots__ = ("sock", "fd", "client", "state", "buffer", "output", "since", "deadline", "idle", "keep_alive", "discard_left", "request", "held", "tls", "events", "closed", "tls_context", "queued", "handshaking")

    def __init__(self, sock: socket.socket, client: str, now: float, deadline: float, tls_context: ssl.SSLContext | None) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.client = client  # the peer's address, without the port
        self.state = PEEK if tls_context is not None else READ
        self.buffer = bytearray()
        self.output: list[bytes | memoryview] = []
        self.since = now  # when the current wait began: accept, end of the last response, write start
        self.deadline = deadline
        self.idle = False  # kept alive after a response, no byte of the next request yet
        self.keep_alive = False
        self.discard_left = 0
        self.request: Request | None = None
        self.held: Reply | None = None
        self.tls = False
        self.events = 0
        self.closed = False
        self.tls_context = tls_context
        self.queued = False  # in the loop's queue of connections whose buffered request waits for the next turn
        self.handshaking = False  # its socket is with the handshake thread: the loop leaves it alone


class Handler(Protocol):
    def respond(self, request: Request, connection: Connection) -> Reply | None: ...

    def error(self, status: int, message: str) -> Reply: ...

    def tls_context(self) -> ssl.SSLContext | None: ...


class LimitLog:
    """One warning per kind and interval; the next one says how many were held back meanwhile."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def warning(self, kind: str, message: str) -> None:
        now = self.clock()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval:
                self._held[kind] = self._held.get(kind, 0) + 1
                return
            held = self._held.pop(kind, 0)
            self._last[kind] = now
        log.warning("%s%s", message, f" ({held} more like it since the last such line)" if held else "")


def fd_budget() -> int:
    """How many connections the open-file limit leaves room for."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, soft - FD_RESERVE) if soft != resource.RLIM_INFINITY else 1 << 20


class EventLoop:
    def __init__(self, listeners: Sequence[socket.socket], handler: Handler, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.listeners = tuple(listeners)  # every listen address is served by this one loop
        self.handler = handler
        self.limits = limits
        self.clock = clock
        self.max_connections = min(limits.max_connections, fd_budget())
        self.connections: dict[int, Connection] = {}
        self.limit_log = LimitLog(limits.log_interval, clock)
        self.selector = selectors.DefaultSelector()
        for listener in self.listeners:
            listener.setblocking(False)
            self.selector.register(listener, selectors.EVENT_READ, listener)
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._wake_writer.setblocking(False)
        self.selector.register(self._wake_reader, selectors.EVENT_READ, self)
        self._completed: collections.deque[tuple[Connection, Reply]] = collections.deque()
        self._queued: collections.deque[Connection] = collections.deque()  # a buffered request waits for its turn
        self._handshake_steps: queue.SimpleQueue[Connection | None] = queue.SimpleQueue()
        self._handshaken: collections.deque[tuple[Connection, int | BaseException | None]] = collections.deque()
        self._handshaker: threading.Thread | None = None
        self._next_check = math.inf
        self._accept_resume = 0.0  # while accepting is paused: when it resumes
        self._stopping = False
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="http", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stopping = True
        if self._handshaker is not None:
            self._handshake_steps.put(None)
        if self._thread is not None and self._thread.is_alive():
            self._wake()
            self._thread.join(timeout)
        else:
            self._shutdown()

    def complete(self, connection: Connection, reply: Reply) -> None:
        """Answer a request whose ``respond`` returned None; safe from any thread."""
        self._completed.append((connection, reply))
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_writer.send(b"\0")
        except OSError:
            pass  # full (a wake-up is pending anyway) or closed (stopping)

    def run(self) -> None:
        try:
            while not self._stopping:
                try:
                    self._run_once()
                except Exception as error:  # a bug in the loop itself: log it, breathe, serve on
                    self.limit_log.warning("loop bug", f"http: internal error in the server loop: {one_line(error)}")
                    time.sleep(0.1)
        finally:
            self._shutdown()

    def _run_once(self) -> None:
        timeout = None if self._next_check == math.inf else max(0.0, self._next_check - self.clock())
        if self._queued:
            timeout = 0.0
        events = self.selector.select(timeout)
        now = self.clock()
        for key, _mask in events:
            data = key.data
            if isinstance(data, Connection) and data.closed:
                continue  # closed by an earlier event of this batch
            try:
                self._on_event(data, now)
            except Exception as error:  # a bug on one connection must not stop the server
                self.limit_log.warning("bug", f"http: internal error, closing a connection: {one_line(error)}")
                log.debug("http: internal error", exc_info=True)
                if isinstance(data, Connection):
                    self._close(data)
        for _ in range(len(self._queued)):  # one request each, after everyone else's events
            connection = self._queued.popleft()
            connection.queued = False
            if not connection.closed and connection.state == READ:
                self._process(connection, now)
        if now >= self._next_check:
            self._check_deadlines(now)

    def _shutdown(self) -> None:
        for connection in list(self.connections.values()):
            self._close(connection)
        closings: tuple[selectors.BaseSelector | socket.socket, ...] = (self.selector, *self.listeners, self._wake_reader, self._wake_writer)
        for closing in closings:
            try:
                closing.close()
            except OSError:
                pass

    def _on_event(self, data: object, now: float) -> None:
        if isinstance(data, socket.socket):
            self._accept(data, now)
        elif data is self:
            try:
                while self._wake_reader.recv(4096):
                    pass
            except OSError:
                pass
            while self._completed:
                connection, reply = self._completed.popleft()
                if not connection.closed and connection.state == WAIT:
                    self._answer_and_continue(connection, reply, now)
            while self._handshaken:
                connection, outcome = self._handshaken.popleft()
                self._handshake_stepped(connection, outcome, now)
        else:
            assert isinstance(data, Connection)
            state = data.state
            if state == WRITE:
                if self._write(data, now):
                    self._process(data, now)
            elif state == PEEK:
                self._peek(data, now)
            elif state == HANDSHAKE:
                self._handshake(data, now)
            elif state in (READ, DISCARD):
                self._read(data, now)
            elif state == LINGER:
                self._drain(data)

    # --- accepting -------------------------------------------------------------------------------

    def _accept(self, listener: socket.socket, now: float) -> None:
        for _ in range(_ACCEPT_BATCH):
            if len(self.connections) >= self.max_connections and not self._evict(f"the connection limit ({self.max_connections})"):
                self._pause_accepting(now, f"http: {self.max_connections} connections open and none can be closed to make room; pausing accepting for {self.limits.accept_backoff:g} s")
                return
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                if error.errno in _OUT_OF_DESCRIPTORS:
                    if self._evict(f"the open-file limit ({error.strerror})"):
                        continue
                    self._pause_accepting(now, f"http: cannot accept connections: {error.strerror}; pausing accepting for {self.limits.accept_backoff:g} s")
                    return
                if error.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR):
                    continue  # the client gave up before we took the connection
                self._pause_accepting(now, f"http: accept failed: {error}; pausing accepting for {self.limits.accept_backoff:g} s")
                return
            self._add(sock, peer, now)

    def _add(self, sock: socket.socket, peer: object, now: float) -> None:
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, "TCP_NOTSENT_LOWAT", 25), UNSENT_BYTES)  # 25 on Linux
        except OSError:
            pass
        client = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        connection = Connection(sock, client, now, now + self.limits.header_timeout, self.handler.tls_context())
        self.connections[connection.fd] = connection
        self._watch(connection, selectors.EVENT_READ)
        self._note_deadline(connection.deadline)

    def _pause_accepting(self, now: float, message: str) -> None:
        self.limit_log.warning("accept-paused", message)
        if not self._accept_resume:
            for listener in self.listeners:
                self.selector.unregister(listener)
        self._accept_resume = now + self.limits.accept_backoff
        self._note_deadline(self._accept_resume)

    def _evict(self, why: str) -> bool:
        """Close the connection that has waited longest without a request being answered."""
        victim, best = None, (3, 0.0)
        for connection in self.connections.values():
            if connection.state == WAIT or connection.handshaking:
                continue
            rank = (_EVICTION_RANK.get(connection.state, 1), connection.since)
            if rank < best:
                victim, best = connection, rank
        if victim is None:
            return False
        self.limit_log.warning(f"evict {why}", f"http: at {why}: closing the connection that waited longest without an answered request (from {victim.client}) to admit a new one")
        self._close(victim)
        return True

    # --- reading ---------------------------------------------------------------------------------

    def _peek(self, connection: Connection, now: float) -> None:
        """TLS port: tell a TLS ClientHello from plain HTTP by the first byte, then start the handshake."""
        try:
            first = connection.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return
        except OSError as error:
            self._close(connection, error)
            return
        if not first:
            self._close(connection)
            return
        if first.isalpha():  # "GET ..." where a TLS record (0x16) belongs
            self._start_write(connection, Reply((_PLAIN_HTTP_TO_TLS,), close=True), now)
            return
        assert connection.tls_context is not None
        connection.sock = connection.tls_context.wrap_socket(connection.sock, server_side=True, do_handshake_on_connect=False)
        connection.tls = True
        connection.state = HANDSHAKE
        self._handshake(connection, now)

    def _handshake(self, connection: Connection, now: float) -> None:
        """Hand the next step of the handshake to the handshake thread; the loop does not watch
        the socket until the step is done (``_handshake_stepped``)."""
        self._watch(connection, 0)
        connection.handshaking = True
        if self._handshaker is None:
            self._handshaker = threading.Thread(target=self._run_handshakes, name="http-tls-handshake", daemon=True)
            self._handshaker.start()
        self._handshake_steps.put(connection)

    def _run_handshakes(self) -> None:
        """The handshake thread: one ``do_handshake`` step per connection handed over; the outcome
        (done, the event to wait for, or the error) goes back to the loop."""
        import ssl

        while (connection := self._handshake_steps.get()) is not None:
            outcome: int | BaseException | None = None
            sock = connection.sock
            assert isinstance(sock, ssl.SSLSocket)
            try:
                sock.do_handshake()
            except ssl.SSLWantReadError:
                outcome = selectors.EVENT_READ
            except ssl.SSLWantWriteError:
                outcome = selectors.EVENT_WRITE
            except Exception as error:  # OSError (ssl.SSLError included), or a socket closed under it
                outcome = error
            self._handshaken.append((connection, outcome))
            self._wake()

    def _handshake_stepped(self, connection: Connection, outcome: int | BaseException | None, now: float) -> None:
        connection.handshaking = False
        if connection.closed:
            return
        if isinstance(outcome, BaseException):
            self._close(connection, outcome)
            return
        if outcome is not None:  # the handshake waits for the client
            self._watch(connection, outcome)
            return
        connection.state = READ
        self._watch(connection, selectors.EVENT_READ)
        self._read(connection, now)  # the request may have come with the handshake's last flight

    def _receive(self, connection: Connection) -> bytes | None:
        """What the socket has now; b"" at end of stream; None when nothing is there yet."""
        sock = connection.sock
        if not connection.tls:
            try:
                return sock.recv(_RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                return None
        import ssl

        assert isinstance(sock, ssl.SSLSocket)
        try:
            data = sock.recv(_RECV_BYTES)
        except ssl.SSLWantReadError:
            self._watch(connection, selectors.EVENT_READ)
            return None
        except ssl.SSLWantWriteError:
            self._watch(connection, selectors.EVENT_WRITE)
            return None
        while data and sock.pending():  # decrypted bytes that no selector event will announce
            try:
                data += sock.recv(_RECV_BYTES)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
        self._watch(connection, selectors.EVENT_READ)
        return data

    def _read(self, connection: Connection, now: float) -> None:
        try:
            data = self._receive(connection)
        except OSError as error:
            self._close(connection, error)
            return
        if data is None:
            return
        if not data:
            self._close(connection)
            return
        if connection.idle:  # the first byte of a new request: its head has header_timeout from now
            connection.idle = False
            connection.since = now
            connection.deadline = now + self.limits.header_timeout
            self._note_deadline(connection.deadline)
        connection.buffer += data
        self._process(connection, now)

    def _process(self, connection: Connection, now: float) -> None:
        """Answer the next complete request in the buffer. One a turn: where another one is
        buffered, the connection is queued for the next turn and not read from meanwhile."""
        buffer = connection.buffer
        answered = False
        while not connection.closed:
            if connection.state == DISCARD:
                taken = min(len(buffer), connection.discard_left)
                del buffer[:taken]
                connection.discard_left -= taken
                if connection.discard_left:
                    return
                if answered:
                    self._queue(connection)
                    return
                request, connection.request = connection.request, None
                assert request is not None
                connection.state = READ
                if not self._dispatch(connection, request, now):
                    return
                answered = True
                continue
            if connection.state != READ:
                return
            if not buffer:
                self._watch(connection, selectors.EVENT_READ)
                return
            if buffer[0] in b"\r\n":  # empty lines before a request line are allowed, and ignored
                del buffer[: len(buffer) - len(buffer.lstrip(b"\r\n"))]
                continue
            found = head_end(buffer)
            if found is None or found[0] > MAX_HEAD_BYTES:
                if found is not None or len(buffer) > MAX_HEAD_BYTES:
                    self._fail(connection, HttpError(431, f"The request line and header fields are longer than {MAX_HEAD_BYTES} bytes."), now)
                else:
                    self._watch(connection, selectors.EVENT_READ)  # the rest of the request is still to come
                return
            if answered:
                self._queue(connection)
                return
            end, body_start = found
            head = bytes(buffer[:end])
            del buffer[:body_start]
            try:
                request = parse_head(head)
            except HttpError as error:
                self._fail(connection, error, now)
                return
            if request.content_length:
                connection.state = DISCARD
                connection.discard_left = request.content_length
                connection.request = request
                if request.expects_continue and not buffer:
                    self._send_continue(connection)
                continue
            if not self._dispatch(connection, request, now):
                return
            answered = True

    def _send_continue(self, connection: Connection) -> None:
        """Tell a client that waits before sending its body (``Expect: 100-continue``) to go on; the
        body is read and discarded as any other. A few bytes on a socket with an empty send queue:
        where even they do not fit at once, the client sends its body after its own wait anyway."""
        try:
            connection.sock.send(_CONTINUE)
        except OSError:
            pass

    def _queue(self, connection: Connection) -> None:
        if not connection.queued:
            connection.queued = True
            self._queued.append(connection)
        self._watch(connection, 0)

    def _fail(self, connection: Connection, error: HttpError, now: float) -> None:
        connection.buffer.clear()
        self._answer(connection, self.handler.error(error.status, error.message), now)

    def _dispatch(self, connection: Connection, request: Request, now: float) -> bool:
        """Answer one request; True when the connection is ready for the next one at once."""
        connection.keep_alive = request.keep_alive
        try:
            reply = self.handler.respond(request, connection)
        except Exception as error:
            self.limit_log.warning("bug", f"http: internal error answering {request.method} {request.path[:100]!r}: {one_line(error)}")
            log.debug("http: internal error", exc_info=True)
            reply = self.handler.error(500, "Internal error; see the exporter's log.")
        if reply is None:
            connection.state = WAIT
            connection.deadline = math.inf
            self._watch(connection, 0)
            return False
        return self._answer(connection, reply, now)

    # --- writing ---------------------------------------------------------------------------------

    def _answer_and_continue(self, connection: Connection, reply: Reply, now: float) -> None:
        if self._answer(connection, reply, now):
            self._process(connection, now)

    def _answer(self, connection: Connection, reply: Reply, now: float) -> bool:
        if reply.close:
            connection.keep_alive = False
        if reply.not_before > now:
            connection.state = HOLD
            connection.held = reply
            connection.since = now
            connection.deadline = reply.not_before
            self._watch(connection, 0)
            self._note_deadline(connection.deadline)
            return False
        return self._start_write(connection, reply, now)

    def _start_write(self, connection: Connection, reply: Reply, now: float) -> bool:
        if reply.close:
            connection.keep_alive = False
        connection.state = WRITE
        connection.since = now
        connection.deadline = now + self.limits.write_timeout
        # TLS sends each chunk as records of its own: a small answer is joined into one, a large one
        # is sent from the shared payload's bytes (a copy per connection would let clients that do
        # not read pin a copy of the page each: 512 x the page).
        small = sum(len(chunk) for chunk in reply.chunks) <= _TLS_JOIN_BYTES
        connection.output = [b"".join(reply.chunks)] if connection.tls and small and len(reply.chunks) > 1 else list(reply.chunks)
        return self._write(connection, now)

    def _write(self, connection: Connection, now: float) -> bool:
        """Send what is pending; True when all is sent and the connection waits for its next request."""
        output = connection.output
        try:
            if connection.tls:
                while output:
                    sent = connection.sock.send(output[0])
                    output[0] = memoryview(output[0])[sent:]
                    if not len(output[0]):
                        output.pop(0)
            else:
                while output:
                    sent = connection.sock.sendmsg(output)
                    while output and sent >= len(output[0]):
                        sent -= len(output.pop(0))
                    if sent:
                        output[0] = memoryview(output[0])[sent:]
        except (BlockingIOError, InterruptedError):
            self._watch(connection, selectors.EVENT_WRITE)
            self._note_deadline(connection.deadline)
            return False
        except OSError as error:
            if connection.tls:
                import ssl

                if isinstance(error, (ssl.SSLWantWriteError, ssl.SSLWantReadError)):
                    self._watch(connection, selectors.EVENT_WRITE if isinstance(error, ssl.SSLWantWriteError) else selectors.EVENT_READ)
                    self._note_deadline(connection.deadline)
                    return False
            self._close(connection, error)
            return False
        if not connection.keep_alive:
            self._linger(connection, now)
            return False
        connection.state = READ
        connection.since = now
        if connection.buffer:  # a pipelined request is already under way
            connection.idle = False
            connection.deadline = now + self.limits.header_timeout
        else:
            connection.idle = True
            connection.deadline = now + self.limits.idle_timeout
        self._note_deadline(connection.deadline)
        self._watch(connection, selectors.EVENT_READ)
        return True

    def _linger(self, connection: Connection, now: float) -> None:
        """Close after an answer: send FIN, then read and drop what the client still sends until it
        closes too (or LINGER_TIMEOUT). Closing with unread input would send a reset that can
        destroy the answer before the client reads it."""
        try:
            connection.sock.shutdown(socket.SHUT_WR)  # on TLS this drops the TLS layer: what follows is discarded raw
        except OSError:
            self._close(connection)
            return
        connection.state = LINGER
        connection.tls = False
        connection.buffer.clear()
        connection.deadline = now + LINGER_TIMEOUT
        self._note_deadline(connection.deadline)
        self._watch(connection, selectors.EVENT_READ)

    def _drain(self, connection: Connection) -> None:
        try:
            if connection.sock.recv(_RECV_BYTES):
                return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._close(connection)

    # --- deadlines and bookkeeping ---------------------------------------------------------------

    def _note_deadline(self, deadline: float) -> None:
        if deadline < self._next_check:
            self._next_check = deadline

    def _check_deadlines(self, now: float) -> None:
        expired = {READ: 0, DISCARD: 0, PEEK: 0, HANDSHAKE: 0, WRITE: 0}
        for connection in list(self.connections.values()):
            if connection.closed or connection.deadline > now or connection.handshaking:
                continue  # a handshaking one is closed when its step comes back, if still late
            if connection.state == HOLD:
                reply, connection.held = connection.held, None
                assert reply is not None
                if self._start_write(connection, reply, now):
                    self._process(connection, now)
                continue
            if (connection.state == READ and connection.idle) or connection.state == LINGER:
                self._close(connection)  # an ordinary end
                continue
            expired[connection.state] = expired.get(connection.state, 0) + 1
            self._close(connection)
        slow = expired[READ] + expired[DISCARD] + expired[PEEK] + expired[HANDSHAKE]
        if slow:
            self.limit_log.warning("header timeout", f"http: closed {slow} connection(s) that did not send a complete request (or TLS handshake) within {self.limits.header_timeout:g} s")
        if expired[WRITE]:
            self.limit_log.warning("write timeout", f"http: closed {expired[WRITE]} connection(s) whose client did not take its response within {self.limits.write_timeout:g} s")
        if self._accept_resume and now >= self._accept_resume:
            self._accept_resume = 0.0
            for listener in self.listeners:
                self.selector.register(listener, selectors.EVENT_READ, listener)
        self._next_check = min((c.deadline for c in self.connections.values()), default=math.inf)
        if self._accept_resume:
            self._next_check = min(self._next_check, self._accept_resume)

    def _watch(self, connection: Connection, events: int) -> None:
        if events == connection.events or connection.closed:
            return
        if connection.events == 0:
            self.selector.register(connection.fd, events, connection)
        elif events == 0:
            self.selector.unregister(connection.fd)
        else:
            self.selector.modify(connection.fd, events, connection)
        connection.events = events

    def _close(self, connection: Connection, error: BaseException | None = None) -> None:
        if connection.closed:
            return
        if error is not None:
            log.debug("http: connection from %s closed: %s: %s", connection.client, type(error).__name__, error)
        if connection.events:
            self.selector.unregister(connection.fd)
            connection.events = 0
        connection.closed = True
        if self.connections.get(connection.fd) is connection:
            del self.connections[connection.fd]
            if not self.connections and not self._accept_resume:
                self._next_check = math.inf  # nothing left to time out: sleep until the next event
        try:
            connection.sock.close()
        except OSError:
            pass
