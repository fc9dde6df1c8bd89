"""An inference server's metrics as recorded in server_metrics.yml, in a real prometheus_client
registry, fed the way the server feeds them (``Request``), and served through prometheus_client's
own content negotiation (``wsgi_app``: prometheus_client.make_wsgi_app)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.metrics_core import Metric

DESCRIPTIONS = Path(__file__).with_name("server_metrics.yml")
# Latency buckets wide enough for a test server's milliseconds and a real server's seconds.
SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0)


def servers() -> dict[str, dict[str, Any]]:
    """Every recorded server's description, by its key in server_metrics.yml."""
    loaded: dict[str, dict[str, Any]] = yaml.safe_load(DESCRIPTIONS.read_text(encoding="utf-8"))["servers"]
    return loaded


def exposed_name(metric: dict[str, Any]) -> str:
    """The sample name a scraper reads for a role's counter: a counter with "_total" (unless the
    server writes it bare), a histogram's "_sum" (a count of units observed per request)."""
    name: str = metric["name"]
    if metric["type"] == "histogram":
        return name + "_sum"
    if metric["type"] == "counter" and not metric.get("bare_counter") and not name.endswith("_total"):
        return name + "_total"
    return name


class BareCounter:
    """A counter written without "_total", as Rust's metrics-exporter-prometheus and prometheus-cpp
    write one. prometheus_client appends "_total" to every Counter, so this collector gives an
    untyped family of exactly the server's sample name."""

    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.name = name
        self.labels = labels
        self.value = 0.0
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self.value += amount

    def collect(self) -> Iterator[Metric]:
        family = Metric(self.name, f"{self.name}, a counter its server writes without _total.", "unknown")
        family.add_sample(self.name, self.labels, self.value)
        yield family


class ServerMetrics:
    """One server's recorded families, registered in a fresh registry; ``role(name)`` is the
    instrument of that role (None where the server has none)."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.description = servers()[server]
        self.registry = CollectorRegistry()
        self._roles: dict[str, tuple[dict[str, Any], Any]] = {}
        for metric in self.description["metrics"]:
            labels = {**self.description["labels"], **metric.get("labels", {})}
            self._roles[metric["role"]] = (metric, self._instrument(metric, labels))

    def _instrument(self, metric: dict[str, Any], labels: dict[str, str]) -> Any:
        name, help_text = metric["name"], f"{metric['name']} as {self.description['release']} declares it."
        if metric.get("bare_counter"):
            counter = BareCounter(name, labels)
            self.registry.register(counter)  # type: ignore[arg-type]
            return counter
        if metric["type"] == "counter":
            family: Any = Counter(name, help_text, list(labels), registry=self.registry)
        elif metric["type"] == "gauge":
            family = Gauge(name, help_text, list(labels), registry=self.registry)
        else:
            buckets = tuple(b * 1000 for b in SECONDS_BUCKETS) if name.endswith("_ms") else SECONDS_BUCKETS
            family = Histogram(name, help_text, list(labels), buckets=buckets, registry=self.registry)
        return family.labels(**labels) if labels else family

    def metric(self, role: str) -> dict[str, Any] | None:
        found = self._roles.get(role)
        return found[0] if found else None

    def _act(self, role: str, act: Callable[[Any, dict[str, Any]], None]) -> None:
        found = self._roles.get(role)
        if found is not None:
            act(found[1], found[0])

    def count(self, role: str, amount: float = 1.0, finished: bool = False) -> None:
        """Add ``amount`` to a count role, at the moment the server does: per token, or (a role
        counted ``at_finish``, or a histogram of per-request counts) once the request is done."""

        def act(instrument: Any, metric: dict[str, Any]) -> None:
            per_request = metric.get("at_finish") or metric["type"] == "histogram"
            if bool(per_request) != finished:
                return
            if metric["type"] == "histogram":
                instrument.observe(amount)
            else:
                instrument.inc(amount)

        self._act(role, act)

    def add(self, role: str, delta: float) -> None:
        """Move a gauge role (running, waiting) by ``delta``."""
        self._act(role, lambda instrument, _: instrument.inc(delta))

    def set(self, role: str, value: float) -> None:
        self._act(role, lambda instrument, _: instrument.set(value))

    def observe_seconds(self, role: str, seconds: float) -> None:
        """A latency role's observation, in the unit its name says (seconds, or milliseconds for *_ms)."""
        self._act(role, lambda instrument, metric: instrument.observe(seconds * 1000 if metric["name"].endswith("_ms") else seconds))

    def wsgi_app(self) -> Callable[..., Any]:
        """/metrics as the server serves it: prometheus_client's own negotiation of the Accept header."""
        return make_wsgi_app(self.registry)


class Request:
    """One request's life as the server instruments it: arrival, start, tokens, finish."""

    def __init__(self, metrics: ServerMetrics, prompt_tokens: int, clock: Callable[[], float]) -> None:
        self.metrics = metrics
        self.prompt_tokens = prompt_tokens
        self.clock = clock
        self.arrived = clock()
        self.last = self.arrived
        self.generated = 0
        metrics.count("arrivals")
        metrics.add("waiting", 1)

    def start(self) -> None:
        self.metrics.add("waiting", -1)
        self.metrics.add("running", 1)
        self.metrics.count("prompt_tokens", self.prompt_tokens)

    def token(self) -> None:
        now = self.clock()
        self.metrics.observe_seconds("itl" if self.generated else "ttft", now - self.last)
        self.last = now
        self.generated += 1
        self.metrics.count("units")

    def finish(self) -> None:
        self.metrics.add("running", -1)
        self.metrics.count("units", self.generated, finished=True)
        self.metrics.count("prompt_tokens", self.prompt_tokens, finished=True)
        self.metrics.count("completions")
        self.metrics.observe_seconds("e2e", self.clock() - self.arrived)
