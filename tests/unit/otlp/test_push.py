"""--otlp.endpoint: the daemon pushes the catalogue's series and the GPU semantic conventions to
OTLP receivers, over gRPC and over HTTP. The receivers decode what arrives with OpenTelemetry's own
protocol definitions (opentelemetry-proto's generated service and messages), as a collector does;
the reference collector itself is a Go program not installable here."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from conftest import running_daemon
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from waiting import PATIENCE, wait_until

from gpueff.metrics import BY_NAME, METRICS
from gpueff.otlp.names import otlp_name, otlp_unit


class Received:
    """Every ExportMetricsServiceRequest a receiver took, decoded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []

    def add(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self.lock:
            self.requests.append(request)

    def metrics(self) -> dict[str, object]:
        """The newest data of each metric by name."""
        found: dict[str, object] = {}
        with self.lock:
            for request in self.requests:
                for resource in request.resource_metrics:
                    for scope in resource.scope_metrics:
                        for metric in scope.metrics:
                            found[metric.name] = metric
        return found

    def resource(self) -> dict[str, str]:
        with self.lock:
            attributes = self.requests[-1].resource_metrics[0].resource.attributes
        return {item.key: item.value.string_value for item in attributes}


class _Service(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request, context):  # noqa: N802 (the proto's name)
        self.received.add(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


@pytest.fixture()
def grpc_receiver() -> Iterator[tuple[str, Received]]:
    received = Received()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Service(received), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(0)


@pytest.fixture()
def http_receiver() -> Iterator[tuple[str, Received]]:
    received = Received()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            assert self.path == "/v1/metrics" and self.headers["Content-Type"] == "application/x-protobuf"
            request = metrics_service_pb2.ExportMetricsServiceRequest()
            request.ParseFromString(body)
            received.add(request)
            answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/metrics", received
    finally:
        server.shutdown()
        server.server_close()


def gauge_points(metric) -> dict[str, float]:
    """A gauge's points by their GPU's uuid (hw.id for the conventions)."""
    points = {}
    for point in metric.gauge.data_points:
        attributes = {item.key: item.value.string_value for item in point.attributes}
        points[attributes.get("uuid") or attributes["hw.id"]] = point.as_double
    return points


def test_names_and_units_follow_opentelemetry():
    assert (otlp_name(BY_NAME["gpueff_sm_active_ratio"]), otlp_unit(BY_NAME["gpueff_sm_active_ratio"])) == ("gpueff.sm_active", "1")
    assert (otlp_name(BY_NAME["gpueff_energy_joules_total"]), otlp_unit(BY_NAME["gpueff_energy_joules_total"])) == ("gpueff.energy", "J")
    assert otlp_name(BY_NAME["gpueff_busy_idle_sm_seconds_total"]) == "gpueff.busy_idle_sm.time"
    assert otlp_name(BY_NAME["process_cpu_seconds_total"]) == "process_cpu.time"
    names = [otlp_name(metric) for metric in METRICS]
    assert sorted({name for name in names if names.count(name) > 1}) == []  # one instrument a metric
    assert all(otlp_unit(metric) for metric in METRICS)  # every unit of the catalogue has its UCUM spelling


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_demo_is_pushed_over_otlp(protocol, grpc_receiver, http_receiver):
    endpoint, received = grpc_receiver if protocol == "grpc" else http_receiver
    with running_daemon("--demo", "--collect-interval", "200ms", "--otlp.endpoint", endpoint, "--otlp.protocol", protocol, "--otlp.interval", "1s") as daemon:
        wait_until(lambda: "gpueff.sm_active" in received.metrics() and "hw.gpu.utilization" in received.metrics(), what=f"a push over {protocol} with the demo's series")
        body = daemon.metrics()
    metrics = received.metrics()
    sm_active = metrics["gpueff.sm_active"]
    assert sm_active.unit == "1" and len(sm_active.gauge.data_points) == 20
    # The spin on one SM reads as /metrics says: SM activity near 0 under full utilization.
    spin = next(line for line in body.splitlines() if line.startswith('gpueff_sm_active_ratio{gpu="4",'))
    uuid = spin.split('uuid="')[1].split('"')[0]
    assert gauge_points(sm_active)[uuid] < 0.05 and gauge_points(metrics["hw.gpu.utilization"])[uuid] > 0.9
    energy = metrics["hw.energy"]
    assert energy.unit == "J" and energy.sum.is_monotonic and len(energy.sum.data_points) == 20
    assert metrics["gpueff.busy_idle_sm.time"].sum.is_monotonic and metrics["hw.gpu.memory.limit"].unit == "By"
    tasks = {item.value.string_value for point in metrics["hw.gpu.utilization"].gauge.data_points for item in point.attributes if item.key == "hw.gpu.task"}
    assert "general" in tasks
    resource = received.resource()
    assert resource["service.name"] == "gpu-efficiency-exporter" and resource["service.version"]
    assert "pushing over OTLP" in daemon.output


def test_a_receiver_that_is_down_costs_no_data_on_metrics(tmp_path):
    with running_daemon("--demo", "--otlp.endpoint", "http://127.0.0.1:9", "--otlp.interval", "1s", "--otlp.timeout", "500ms") as daemon:
        assert "gpueff_gpu_up{" in daemon.metrics()


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("ftp://collector:4317", "expected an http:// or https:// URL"),
        ("http://user:secret@collector:4317", "credentials in the URL are not accepted"),
        ("http://collector:99999", "is not a URL"),
    ],
)
def test_a_bad_endpoint_is_refused_at_start(endpoint, message):
    import subprocess
    import sys

    from conftest import ROOT

    result = subprocess.run([sys.executable, "-m", "gpueff", "--demo", "--otlp.endpoint", endpoint], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 2 and message in result.stderr and "secret" not in result.stderr
