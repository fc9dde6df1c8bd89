"""Basic-auth logins off the serving thread, throttled.

- A request whose credentials passed before is let in at once (BasicAuth's cache).
- Otherwise its bcrypt check runs on one worker thread, one check at a time, so failed logins
  cost at most one core's share and scrapes on the serving thread keep answering; at most
  ``MAX_QUEUED_CHECKS`` wait, further ones get 429 at once.
- Each client (an IPv4 address, an IPv6 /64) may fail ``FAILED_LOGIN_BURST`` logins in a row and
  then one every ``FAILED_LOGIN_REFILL`` seconds; beyond that it gets 429 without a check.
- A failed check is answered no sooner than ``FAILED_LOGIN_DELAY`` after the request, so a wrong
  password for a cheap hash, a costly hash and an unknown user all take as long.
- Failures are logged one line at a time (user quoted and shortened, never the password), at most
  one line a minute with a count of those held back.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from exporter.web.loop import LimitLog
from exporter.web.tlsconfig import BasicAuth

FAILED_LOGIN_BURST = 10
FAILED_LOGIN_REFILL = 5.0  # seconds for a client to earn back one failed login
FAILED_LOGIN_DELAY = 0.5  # seconds: the earliest a failed check is answered
MAX_QUEUED_CHECKS = 16
MAX_TRACKED_CLIENTS = 4096

# Verdicts of LoginGuard.check besides "queued" (None)
ALLOWED, MISSING, THROTTLED, BUSY = "allowed", "missing", "throttled", "busy"


def client_key(address: str) -> str:
    """One throttle bucket per IPv4 address and per IPv6 /64 (one host usually holds a whole /64).
    An IPv4 client of a dual-stack listener arrives as ``::ffff:a.b.c.d``: that is its IPv4 address,
    not a /64 that every IPv4 client would share."""
    if ":" not in address:
        return address
    import ipaddress

    try:
        ip = ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((ip, 64), strict=False))


class LoginGuard:
    def __init__(self, log_interval: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.log = LimitLog(log_interval, clock)
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (failures it may still make, when)
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[tuple[BasicAuth, str, bytes, str, Callable[[bool], None]] | None] = queue.SimpleQueue()
        self._queued = 0
        self._worker: threading.Thread | None = None

    def check(self, auth: BasicAuth, header: str | None, client: str, done: Callable[[bool], None]) -> str | None:
        """ALLOWED, MISSING (no usable credentials), THROTTLED or BUSY at once; or None: the check
        was queued and ``done(ok)`` will be called from the worker thread."""
        credentials = auth.credentials(header)
        if credentials is None:
            return MISSING
        user, password = credentials
        if auth.cached(user, password):
            return ALLOWED
        key = client_key(client)
        with self._lock:
            if not self._take(key):
                verdict = THROTTLED
            elif self._queued >= MAX_QUEUED_CHECKS:
                self._give_back(key)
                verdict = BUSY
            else:
                self._queued += 1
                verdict = None
                if self._worker is None:
                    self._worker = threading.Thread(target=self._run, name="login-check", daemon=True)
                    self._worker.start()
        if verdict == THROTTLED:
            self.log.warning("login throttled", f"http: {key} failed {FAILED_LOGIN_BURST} logins in a row: its logins get 429 without a check (one attempt more every {FAILED_LOGIN_REFILL:g} s)")
        elif verdict == BUSY:
            self.log.warning("login busy", f"http: {MAX_QUEUED_CHECKS} password checks already waiting: further logins get 429 at once")
        else:
            self._queue.put((auth, user, password, key, done))
        return verdict

    def close(self) -> None:
        if self._worker is not None:
            self._queue.put(None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            auth, user, password, key, done = item
            try:
                ok = auth.verify(user, password)
            except Exception as error:  # bcrypt refusing an input: a failed login, not a dead worker
                ok = False
                self.log.warning("login error", f"http: a password check failed: {type(error).__name__}: {error}")
            with self._lock:
                self._queued -= 1
                if ok:
                    self._give_back(key)
            if not ok:
                reason = "wrong password" if user in auth.users else "unknown user"
                self.log.warning("login failed", f"http: failed basic-auth login from {key} as user {user[:64]!r}: {reason}")
            done(ok)

    def _take(self, key: str) -> bool:
        """Reserve one failure from the client's bucket (given back if the login succeeds)."""
        now = self.clock()
        tokens, since = self._buckets.get(key, (float(FAILED_LOGIN_BURST), now))
        tokens = min(float(FAILED_LOGIN_BURST), tokens + (now - since) / FAILED_LOGIN_REFILL)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1.0, now)
        if len(self._buckets) > MAX_TRACKED_CLIENTS:
            self._forget_full(now)
        return True

    def _give_back(self, key: str) -> None:
        tokens, since = self._buckets.get(key, (float(FAILED_LOGIN_BURST), self.clock()))
        self._buckets[key] = (min(float(FAILED_LOGIN_BURST), tokens + 1.0), since)

    def _forget_full(self, now: float) -> None:
        """Drop clients whose buckets have refilled; if that is not enough, forget them all."""
        for key, (tokens, since) in list(self._buckets.items()):
            if tokens + (now - since) / FAILED_LOGIN_REFILL >= FAILED_LOGIN_BURST:
                del self._buckets[key]
        if len(self._buckets) > MAX_TRACKED_CLIENTS:
            self._buckets.clear()
