"""Failed logins (issue 14 item 6): throttled per client, checked one at a time off the serving
thread, answered no sooner than a floor so that timing tells nothing, and logged without passwords."""

from __future__ import annotations

import base64
import http.client
import logging
import socket
import threading
import time
from pathlib import Path

import bcrypt
import pytest
from waiting import PATIENCE

from gpueff.httpserver.login import (
    ALLOWED,
    BUSY,
    FAILED_LOGIN_BURST,
    FAILED_LOGIN_DELAY,
    FAILED_LOGIN_REFILL,
    MISSING,
    THROTTLED,
    LoginGuard,
    client_key,
)
from gpueff.httpserver.tlsconfig import BasicAuth, parse_web_config
from gpueff.web.payload import Payload
from gpueff.web.server import WebServer


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_client_gets_a_burst_of_failures_then_one_per_refill_and_a_success_gives_its_try_back():
    auth = BasicAuth({"alice": bcrypt.hashpw(b"right", bcrypt.gensalt(4))})
    clock = FakeClock()
    guard = LoginGuard(clock=clock)
    results: list[bool] = []
    finished = threading.Semaphore(0)

    def done(ok: bool) -> None:
        results.append(ok)
        finished.release()

    def attempt(password: str, client: str = "10.0.0.1") -> str | None:
        verdict = guard.check(auth, basic("alice", password), client, done)
        if verdict is None:
            assert finished.acquire(timeout=PATIENCE)
        return verdict

    assert guard.check(auth, None, "10.0.0.1", done) == MISSING
    assert [attempt("wrong") for _ in range(FAILED_LOGIN_BURST)] == [None] * FAILED_LOGIN_BURST
    assert attempt("wrong") == THROTTLED and attempt("right") == THROTTLED  # no check at all, right or wrong
    assert attempt("wrong", client="10.0.0.2") is None  # other clients are not held up
    clock.now += FAILED_LOGIN_REFILL
    assert attempt("right") is None and results[-1] is True  # one try earned back, and given back on success
    assert attempt("right") == ALLOWED  # cached now
    assert attempt("wrong") is None and attempt("wrong") == THROTTLED
    guard.close()
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff") == "2001:db8::/64"


def server_with_users(users: dict[str, bytes]) -> WebServer:
    config = parse_web_config({"basic_auth_users": {user: hashed.decode() for user, hashed in users.items()}}, "web.yml", Path("."))
    web = WebServer("127.0.0.1:0", lambda gzip: Payload((b"m 1\n",), None), lambda: True, "login", web_config=config)
    web.start()
    return web


def get(port: int, authorization: str | None, connection: http.client.HTTPConnection | None = None) -> int:
    own = connection is None
    connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
    try:
        connection.request("GET", "/metrics", headers={"Authorization": authorization} if authorization else {})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        if own:
            connection.close()


@pytest.mark.slow
def test_scrapes_keep_answering_while_wrong_passwords_are_hammered(caplog):
    caplog.set_level(logging.WARNING, logger="gpueff.web.server")
    web = server_with_users({"prometheus": bcrypt.hashpw(b"right-password", bcrypt.gensalt(10))})
    try:
        scraper = http.client.HTTPConnection("127.0.0.1", web.port, timeout=PATIENCE)
        assert get(web.port, basic("prometheus", "right-password"), scraper) == 200  # checked once, then cached
        stop = threading.Event()
        hammered: list[int] = []

        def hammer() -> None:
            while not stop.is_set():
                hammered.append(get(web.port, basic("prometheus", "guess-" + str(len(hammered)))))

        attackers = [threading.Thread(target=hammer) for _ in range(4)]
        for thread in attackers:
            thread.start()
        scrapes = []
        started = time.monotonic()
        deadline = started + PATIENCE
        while (len(scrapes) < 100 or 429 not in hammered) and time.monotonic() < deadline:  # until the throttle bites
            scrapes.append(get(web.port, basic("prometheus", "right-password"), scraper))
            time.sleep(0.01)
        stop.set()
        for thread in attackers:
            thread.join(PATIENCE)
        lasted = time.monotonic() - started
        scraper.close()
        checkers = [thread for thread in threading.enumerate() if thread.name == "login-check"]
    finally:
        web.close()
    assert scrapes == [200] * len(scrapes)
    assert hammered.count(401) <= FAILED_LOGIN_BURST + 2 and hammered.count(429) > 0  # the rest were refused without bcrypt
    assert len(checkers) == 1  # one bcrypt check at a time, never on the serving thread
    failed_lines = [record.getMessage() for record in caplog.records if "failed basic-auth login" in record.getMessage()]
    assert 1 <= len(failed_lines) <= 2 + lasted / 60 and "'prometheus': wrong password" in failed_lines[0]  # rate-limited: a line a minute
    assert not any("guess-" in record.getMessage() for record in caplog.records)  # never a password
    assert any("logins get 429 without a check" in record.getMessage() for record in caplog.records)


def fastest_wrong_password(costs: dict[str, int], users: tuple[str, ...], rounds: int = 2) -> dict[str, float]:
    """Serve users whose bcrypt hashes have these costs, try a wrong password for each of ``users``
    ``rounds`` times in turn, and return each user's fastest 401 in seconds (the fastest: on a busy
    machine other work only ever lengthens a try, so the least of several is the check's own work)."""
    web = server_with_users({user: bcrypt.hashpw(b"x", bcrypt.gensalt(cost)) for user, cost in costs.items()})
    try:
        timings: dict[str, list[float]] = {}
        for user in users * rounds:
            started = time.perf_counter()
            assert get(web.port, basic(user, "wrong")) == 401
            timings.setdefault(user, []).append(time.perf_counter() - started)
    finally:
        web.close()
    return {user: min(times) for user, times in timings.items()}


@pytest.mark.slow
def test_unknown_users_and_wrong_passwords_of_cheap_and_costly_hashes_take_as_long():
    """Before: a cost-4 user's wrong password took ~1 ms, an unknown user ~250 ms (a decoy of the
    highest cost). Now each failed check is answered after the same floor. A busy machine only
    lengthens a try, so rounds are tried until the fastest of each are within 2x (a retry budget)."""
    fastest: dict[str, float] = {}
    deadline = time.monotonic() + PATIENCE
    while not fastest or max(fastest.values()) / min(fastest.values()) >= 2:
        assert time.monotonic() < deadline, fastest
        for user, took in fastest_wrong_password({"cheap": 4, "costly": 9}, ("cheap", "costly", "nobody")).items():
            fastest[user] = min(fastest.get(user, took), took)
        assert all(value >= FAILED_LOGIN_DELAY * 0.9 for value in fastest.values()), fastest  # the floor: a lower bound, which load only lengthens


def get_from(source: str, port: int, authorization: str) -> int:
    """GET /metrics over a connection from the loopback address ``source`` (127.0.0.x)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE, source_address=(source, 0))
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
    connection.sock = sock
    try:
        return get(port, authorization, connection)
    finally:
        connection.close()


def test_ipv4_clients_of_a_dual_stack_listener_are_throttled_one_address_each(monkeypatch):
    """On ``[::]`` IPv4 peers arrive as ``::ffff:a.b.c.d``; taken as IPv6 they all fell in ``::/64``,
    so one address failing locked every IPv4 client out."""
    assert client_key("::ffff:10.0.0.5") == "10.0.0.5" and client_key("::ffff:10.0.0.6") == "10.0.0.6"
    monkeypatch.setattr("gpueff.httpserver.login.FAILED_LOGIN_DELAY", 0.0)
    config = parse_web_config({"basic_auth_users": {"prometheus": bcrypt.hashpw(b"right", bcrypt.gensalt(4)).decode()}}, "web.yml", Path("."))
    web = WebServer("[::]:0", lambda gzip: Payload((b"m 1\n",), None), lambda: True, "login", web_config=config)
    web.start()
    try:
        failures = [get_from("127.0.0.2", web.port, basic("prometheus", "wrong")) for _ in range(FAILED_LOGIN_BURST + 1)]
        assert failures == [401] * FAILED_LOGIN_BURST + [429]
        assert get_from("127.0.0.3", web.port, basic("prometheus", "right")) == 200
    finally:
        web.close()


class SlowAuth(BasicAuth):
    """A bcrypt check that takes as long as a costly hash (20 ms more), without burning the CPU."""

    checks = 0  # every SlowAuth check begun so far (all run on the one login-check thread)

    def verify(self, user: str, password: bytes) -> bool:
        SlowAuth.checks += 1
        time.sleep(0.02)
        return super().verify(user, password)


def test_valid_logins_do_not_queue_behind_a_flood_of_wrong_passwords_from_many_addresses():
    """120 addresses failing keep the one check busy and its queue full. Before, every uncached
    valid login (after a restart or a password rotation) got 429 for the whole flood."""
    hashed = {"prometheus": bcrypt.hashpw(b"right", bcrypt.gensalt(4))}
    guard = LoginGuard()
    busy_seen = threading.Event()
    stop = threading.Event()
    failed: set[str] = set()

    def flood() -> None:
        auth = SlowAuth(hashed)
        while not stop.is_set():
            for n in range(120):
                client = f"10.1.0.{n}"
                if guard.check(auth, basic("prometheus", "guess"), client, lambda ok, client=client: failed.add(client)) == BUSY:
                    busy_seen.set()
            time.sleep(0.005)

    def login(client: str, auth: BasicAuth) -> tuple[str | None, bool, int]:
        """The verdict, the outcome, and how many of the flood's checks began while it waited."""
        finished = threading.Event()
        outcome: list[bool] = []
        ended: list[int] = []  # the count as the check ends, read on the worker before it takes the next
        began = SlowAuth.checks
        verdict = guard.check(auth, basic("prometheus", "right"), client, lambda ok: (outcome.append(ok), ended.append(SlowAuth.checks), finished.set()))
        if verdict is None:
            assert finished.wait(PATIENCE)
        return verdict, bool(outcome and outcome[0]), (ended[0] if ended else began + 1) - began - 1

    flooder = threading.Thread(target=flood)
    flooder.start()
    try:
        deadline = time.monotonic() + PATIENCE
        while len(failed) < 120 and time.monotonic() < deadline:  # every attacker has failed once (~3 s)
            time.sleep(0.05)
        assert busy_seen.is_set()
        results = [login("10.9.9.9", SlowAuth(hashed))]  # a restart: a fresh client, no cache
        results += [login("10.9.9.9", SlowAuth(hashed)) for _ in range(19)]  # rotations: a new hash, no cache
    finally:
        stop.set()
        flooder.join(PATIENCE)
        guard.close()
    assert [(verdict, ok) for verdict, ok, _ in results] == [(None, True)] * 20
    # Each waited for the check under way at most (or one just taken from its lane), never for the
    # flood's queue of 16: counted in checks, so a busy machine cannot make it fail.
    assert max(between for _, _, between in results) <= 1, results


def test_with_users_of_mixed_costs_every_failure_takes_as_long_as_the_costliest(monkeypatch):
    """A cost-12 check outlasts the floor (lowered to 50 ms for the test). Every failure does the
    same bcrypt work (one check per configured cost, tests/unit/httpserver/test_tlsconfig.py), so a costly user's
    wrong password, a cheap one's and an unknown user's take as long as each other however busy the
    machine: compared with each other, measured in turn in the same run, never with a figure."""
    monkeypatch.setattr("gpueff.httpserver.login.FAILED_LOGIN_DELAY", 0.05)
    monkeypatch.setattr("gpueff.httpserver.login.FAILED_LOGIN_BURST", 100)  # 15 tries from one address: none throttled
    fastest = fastest_wrong_password({"cheap": 4, "costly": 12}, ("cheap", "nobody", "costly"), rounds=5)
    assert max(fastest.values()) / min(fastest.values()) < 2, fastest
