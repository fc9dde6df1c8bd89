"""Pushes the newest snapshot's series to an OTLP receiver (gRPC or HTTP/protobuf) on a timer,
through the OpenTelemetry SDK. The series are the ones /metrics serves, read back from the same
rendering, so the two outlets never disagree: each catalogue metric becomes one instrument
(gpueff.otlp.names), its labels the attributes, and the GPU semantic conventions are added where
one exists. Summaries (the poll's duration) are left out: OTLP's summary is legacy."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpueff import __version__
from gpueff.exposition.render import render
from gpueff.metrics import COUNTER, GAUGE, METRICS
from gpueff.otlp import OtlpUnavailable
from gpueff.otlp.names import CONVENTIONS, otlp_name, otlp_unit
from gpueff.snapshot import Snapshot

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Observation

log = logging.getLogger("gpueff")


@dataclass(frozen=True)
class OtlpSettings:
    endpoint: str  # gRPC: http(s)://host:port; HTTP: the full URL of the metrics path
    protocol: str = "grpc"
    interval: float = 60.0  # seconds between pushes
    timeout: float = 10.0  # seconds one push may take


class _Samples:
    """The newest snapshot's series by name, parsed once per push from its rendering."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._parsed: tuple[Snapshot | None, dict[str, list[tuple[dict[str, str], float]]]] = (None, {})

    def take(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshot = snapshot

    def of(self, name: str) -> list[tuple[dict[str, str], float]]:
        with self._lock:
            snapshot = self._snapshot
            if snapshot is not self._parsed[0]:
                self._parsed = (snapshot, _parse(render(snapshot)) if snapshot is not None else {})
            return self._parsed[1].get(name, [])


def _parse(text: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    from prometheus_client.parser import text_string_to_metric_families

    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            series.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return series


def _observer(samples: _Samples, name: str, extra: Iterable[tuple[str, str]] = (), semantic: bool = False) -> Callable[[CallbackOptions], Iterable[Observation]]:
    from opentelemetry.metrics import Observation

    added = dict(extra)

    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        found = []
        for labels, value in samples.of(name):
            if value != value:  # NaN: no reading
                continue
            if semantic:  # the conventions' attributes: the GPU's UUID is its hw.id
                attributes = {"hw.id": labels.get("uuid", labels.get("gpu", "")), "hw.type": "gpu", **added}
                if "gpu" in labels:
                    attributes["gpueff.gpu"] = labels["gpu"]
            else:
                attributes = dict(labels)
            found.append(Observation(value, attributes))
        return found

    return observe


def _exporter(settings: OtlpSettings) -> Any:
    try:
        if settings.protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

            insecure = settings.endpoint.startswith("http://")
            return GrpcExporter(endpoint=settings.endpoint, insecure=insecure, timeout=settings.timeout)
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter

        return HttpExporter(endpoint=settings.endpoint, timeout=settings.timeout)
    except ImportError as error:
        raise OtlpUnavailable(f"--otlp.endpoint needs the otlp extra (pip install 'gpu-efficiency-exporter[otlp]'): {error}") from None


class OtlpPusher:
    """Subscribed to the poller (``take``); pushes every ``interval`` from the SDK's own thread."""

    def __init__(self, settings: OtlpSettings) -> None:
        try:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
            from opentelemetry.sdk.resources import Resource
        except ImportError as error:
            raise OtlpUnavailable(f"--otlp.endpoint needs the otlp extra (pip install 'gpu-efficiency-exporter[otlp]'): {error}") from None
        self.settings = settings
        self._samples = _Samples()
        reader = PeriodicExportingMetricReader(_exporter(settings), export_interval_millis=settings.interval * 1000, export_timeout_millis=settings.timeout * 1000)
        resource = Resource.create({"service.name": "gpu-efficiency-exporter", "service.version": __version__, "host.name": socket.gethostname()})
        self._provider = MeterProvider(metric_readers=[reader], resource=resource)
        meter = self._provider.get_meter("gpu-efficiency-exporter", __version__)
        for metric in METRICS:
            if metric.type not in (GAUGE, COUNTER):
                continue
            make = meter.create_observable_counter if metric.type == COUNTER else meter.create_observable_gauge
            make(otlp_name(metric), callbacks=[_observer(self._samples, metric.name)], unit=otlp_unit(metric), description=metric.help)
        kinds = {"gauge": meter.create_observable_gauge, "counter": meter.create_observable_counter, "updowncounter": meter.create_observable_up_down_counter}
        by_name: dict[str, list[Callable[[CallbackOptions], Iterable[Observation]]]] = {}
        for convention in CONVENTIONS:
            by_name.setdefault(convention.name, []).append(_observer(self._samples, convention.source, convention.extra, semantic=True))
        for name, callbacks in by_name.items():
            first = next(convention for convention in CONVENTIONS if convention.name == name)
            kinds[first.kind](name, callbacks=callbacks, unit=first.unit, description=first.description)

    def take(self, snapshot: Snapshot) -> None:
        self._samples.take(snapshot)

    def close(self, timeout: float = 5.0) -> None:
        """One last push of what was collected, then stop."""
        try:
            self._provider.shutdown(timeout_millis=timeout * 1000)
        except Exception as error:  # the receiver gone at exit: say so, never hold the exit
            log.warning("otlp: the last push failed at exit: %s", error)
