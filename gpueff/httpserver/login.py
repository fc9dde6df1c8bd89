"""Basic-auth logins off the serving thread, throttled.

- A request whose credentials passed before is let in at once (BasicAuth's cache).
- Otherwise its bcrypt check runs on one worker thread, one check at a time, so failed logins
  cost at most one core's share and scrapes on the serving thread keep answering.
- Checks wait in three lanes, each of at most ``MAX_QUEUED_CHECKS``, taken in order: clients that
  logged in before (remembered across web-config reloads), then clients that have not failed a
  check in the last ``FAILURE_MEMORY`` seconds, then clients that have (and a client's checks
  beyond its first waiting one). So a flood of wrong
  passwords from many addresses, which keeps the check busy, does not keep Prometheus out after a
  password rotation (first lane) or a restart (second lane): its check is among the next ones.
  A full lane answers 429 at once.
- Each client (an IPv4 address, an IPv6 /64) may fail ``FAILED_LOGIN_BURST`` logins in a row and
  then one every ``FAILED_LOGIN_REFILL`` seconds; beyond that it gets 429 without a check.
- A failed check is answered no sooner than ``FAILED_LOGIN_DELAY`` after the request, so a wrong
  password for a cheap hash, a costly hash and an unknown user all take as long.
- Failures are logged one line at a time (user quoted and shortened, never the password), at most
  one line a minute with a count of those held back.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from gpueff.httpserver.loop import LimitLog
from gpueff.httpserver.tlsconfig import BasicAuth

FAILED_LOGIN_BURST = 10
FAILED_LOGIN_REFILL = 5.0  # seconds for a client to earn back one failed login
FAILED_LOGIN_DELAY = 0.5  # seconds: the earliest a failed check is answered
MAX_QUEUED_CHECKS = 16
MAX_TRACKED_CLIENTS = 4096
MAX_REMEMBERED_LOGINS = 1024  # clients that logged in before, for the first lane
FAILURE_MEMORY = 600.0  # seconds a failed check keeps its client out of the second lane

_Check = tuple[BasicAuth, str, bytes, str, Callable[[bool], None]]

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
        self._logged_in: dict[str, None] = {}  # clients that passed a check, oldest first
        self._failed_at: dict[str, float] = {}  # clients -> their last failed check, oldest first
        self._waiting: dict[str, int] = {}  # client -> its checks queued or running
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._lanes: tuple[deque[_Check], ...] = (deque(), deque(), deque())  # logged in before, not failing, failing
        self._closed = False
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
            lane = self._lanes[self._lane_of(key)]
            if not self._take(key):
                verdict = THROTTLED
            elif len(lane) >= MAX_QUEUED_CHECKS:
                self._give_back(key)
                verdict = BUSY
            else:
                lane.append((auth, user, password, key, done))
                self._waiting[key] = self._waiting.get(key, 0) + 1
                self._ready.notify()
                verdict = None
                if self._worker is None:
                    self._worker = threading.Thread(target=self._run, name="login-check", daemon=True)
                    self._worker.start()
        if verdict == THROTTLED:
            self.log.warning("login throttled", f"http: {key} failed {FAILED_LOGIN_BURST} logins in a row: its logins get 429 without a check (one attempt more every {FAILED_LOGIN_REFILL:g} s)")
        elif verdict == BUSY:
            self.log.warning("login busy", f"http: {MAX_QUEUED_CHECKS} password checks already waiting: further logins get 429 at once")
        return verdict

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._ready.notify()

    def _next(self) -> _Check | None:
        """The next check to run, the first lane first; None once closed."""
        with self._lock:
            while not self._closed and not any(self._lanes):
                self._ready.wait()
            if self._closed:
                return None
            return next(lane for lane in self._lanes if lane).popleft()

    def _run(self) -> None:
        while (item := self._next()) is not None:
            auth, user, password, key, done = item
            try:
                ok = auth.verify(user, password)
            except Exception as error:  # bcrypt refusing an input: a failed login, not a dead worker
                ok = False
                self.log.warning("login error", f"http: a password check failed: {type(error).__name__}: {error}")
            with self._lock:
                self._waiting[key] -= 1
                if not self._waiting[key]:
                    del self._waiting[key]
                if ok:
                    self._give_back(key)
                    _remember(self._logged_in, key, None, MAX_REMEMBERED_LOGINS)
                else:
                    _remember(self._failed_at, key, self.clock(), MAX_TRACKED_CLIENTS)
            if not ok:
                reason = "wrong password" if user in auth.users else "unknown user"
                self.log.warning("login failed", f"http: failed basic-auth login from {key} as user {user[:64]!r}: {reason}")
            done(ok)

    def _lane_of(self, key: str) -> int:
        if key in self._waiting:
            return 2
        if key in self._logged_in:
            return 0
        failed = self._failed_at.get(key)
        return 1 if failed is None or self.clock() - failed > FAILURE_MEMORY else 2

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


def _remember(entries: dict[str, Any], key: str, value: Any, most: int) -> None:
    """Set ``key`` as the newest entry, forgetting the oldest beyond ``most``."""
    entries.pop(key, None)
    entries[key] = value
    if len(entries) > most:
        del entries[next(iter(entries))]
