"""Load and soak.

- 100 concurrent scrapers against a real daemon in replay mode for GPUEFF_LOAD_SECONDS (default 60,
  the figure in the issue): every scraper answered, no error (a hung scrape is one: its connection
  times out), and the daemon's RSS flat; the same over TLS with basic auth for GPUEFF_TLS_LOAD_SECONDS
  (default 10). Latency figures are printed (run with -s to see them), never asserted: a busy machine
  makes any bound on them flaky; bench/web/prometheus_spacing.py measures them on a quiet one.
- A soak of the poller and exposition with heavy churn: every refresh a new set of pods holds each GPU
  (a real gRPC kubelet fake on a unix socket) and new processes in new pods run on it (fake /proc
  cgroups, the fake pynvml's process list). Series of gone pods and processes must be gone by the
  first poll after the refresh that no longer lists them, the series count must stay bounded, and
  Python's traced memory must stay flat. The test makes each refresh itself, on its fake clock.
"""

from __future__ import annotations

import gc
import http.client
import os
import statistics
import threading
import time
import tracemalloc
import uuid as uuidlib

import pytest
from conftest import payloads_following, running_daemon
from fakes.nvml import FakeClock, FakeGpu, FakeNvml
from waiting import PATIENCE

from gpueff.attribution.kubernetes.attribution import PodRefresher
from gpueff.backends.nvml.backend import NvmlBackend
from gpueff.poller import Poller
from gpueff.settings import parse_config
from gpueff.trace import load_trace

pytestmark = pytest.mark.slow  # concurrent scrapers, soaks

LOAD_SECONDS = float(os.environ.get("GPUEFF_LOAD_SECONDS", "60"))
TLS_LOAD_SECONDS = float(os.environ.get("GPUEFF_TLS_LOAD_SECONDS", "10"))
SCRAPERS = 100


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def hammer(pid: int, connect, headers: dict[str, str], seconds: float) -> tuple[list[float], list[str], list[int], float]:
    """SCRAPERS threads scrape /metrics back to back on keep-alive connections for ``seconds``."""
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(SCRAPERS)]
    errors: list[str] = []

    def scraper(mine: list[float]) -> None:
        connection = connect()
        while not stop.is_set():
            started = time.perf_counter()
            try:
                connection.request("GET", "/metrics", headers=headers)
                response = connection.getresponse()
                body = response.read()
                if response.status != 200 or not body.endswith(b"\n") or b"gpueff_gpu_up{" not in body:
                    errors.append(f"status {response.status}, {len(body)} bytes")
            except (OSError, http.client.HTTPException) as error:
                errors.append(f"{type(error).__name__}: {error}")
                connection.close()
                connection = connect()
                continue
            mine.append(time.perf_counter() - started)
        connection.close()

    threads = [threading.Thread(target=scraper, args=(latencies[n],), daemon=True) for n in range(SCRAPERS)]
    rss = [rss_bytes(pid)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    while time.monotonic() - started < seconds:
        time.sleep(min(1.0, seconds / 10))
        rss.append(rss_bytes(pid))
    stop.set()
    for thread in threads:
        thread.join(PATIENCE)
    assert not any(thread.is_alive() for thread in threads), "a scraper hangs"
    assert all(mine for mine in latencies), "a scraper never got an answer"
    return [value for mine in latencies for value in mine], errors, rss, time.monotonic() - started


def report(what: str, every: list[float], errors: list[str], rss: list[int], elapsed: float) -> None:
    p50, p99 = statistics.median(every), percentile(every, 0.99)
    warm = rss[len(rss) // 5]
    print(f"\n{what}: {SCRAPERS} scrapers x {elapsed:.0f} s: {len(every)} scrapes ({len(every) / elapsed:.0f}/s), {len(errors)} errors, "
          f"latency p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max {max(every) * 1000:.1f} ms; "
          f"daemon RSS {rss[0] / 2**20:.1f} MiB idle, {warm / 2**20:.1f} MiB warm, {rss[-1] / 2**20:.1f} MiB at the end, peak {max(rss) / 2**20:.1f} MiB")
    assert not errors, errors[:5]
    assert rss[-1] - warm < 32 * 2**20, "the daemon's memory grew under load"


def test_100_concurrent_scrapers_get_no_error_and_no_memory_growth():
    with running_daemon("--demo", "--collect-interval", "500ms") as daemon:
        results = hammer(daemon.process.pid, lambda: http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=PATIENCE), {}, LOAD_SECONDS)
        assert daemon.process.poll() is None
    report("load", *results)


def test_100_concurrent_scrapers_over_tls_with_basic_auth(tmp_path):
    """bcrypt costs ~70 ms a check at cost 10: without the cache 100 scrapers would queue behind it."""
    import bcrypt
    import yaml
    from tls_certs import make_pki

    from system.test_tls import basic, client_context, tls_daemon

    pki = make_pki(tmp_path)
    config = tmp_path / "web.yml"
    config.write_text(yaml.safe_dump({"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"}, "basic_auth_users": {"prometheus": bcrypt.hashpw(b"secret", bcrypt.gensalt(10)).decode()}}))
    context, headers = client_context(pki), basic("prometheus", "secret")
    with tls_daemon(config, context, headers) as daemon:
        results = hammer(daemon.process.pid, lambda: http.client.HTTPSConnection("127.0.0.1", daemon.port, context=context, timeout=PATIENCE), headers, TLS_LOAD_SECONDS)
        assert daemon.process.poll() is None
    report("load over TLS with basic auth", *results)


# The fake kubelet's gRPC server lives in this process too; what it keeps is not the exporter's.
NOT_THE_EXPORTER = [tracemalloc.Filter(False, pattern) for pattern in ("*grpc/_server.py", "*concurrent/futures/*", "*threading.py", "*fakes/kubelet.py", tracemalloc.__file__)]


def exporter_side_memory() -> tracemalloc.Snapshot:
    gc.collect()  # cyclic garbage waiting for the collector is not growth
    return tracemalloc.take_snapshot().filter_traces(NOT_THE_EXPORTER)


def pod_uid() -> str:
    return str(uuidlib.uuid4())


@pytest.fixture
def churn_world(tmp_path, trace_paths):
    """Two fake GPUs, a fake kubelet and a fake /proc whose pods and processes the test replaces."""
    from fakes.kubelet import FakeKubelet  # needs grpcio (test extra)

    clock = FakeClock()
    gpus = [FakeGpu(load_trace(trace_paths[name])) for name in ("matmul_8192", "copy_2GB")]
    fake = FakeNvml(gpus, clock=clock)
    socket_path = tmp_path / "kubelet.sock"
    proc = tmp_path / "proc"
    proc.mkdir()
    with FakeKubelet(socket_path, []) as kubelet:
        yield clock, fake, kubelet, socket_path, proc


def refresh_only_when_asked(poller: Poller) -> PodRefresher:
    """The poller's pod refresher with its thread ended: a refresh of the thread's own, on real time,
    could read one round's pods and store them after the test's refresh of the next round."""
    refresher = poller.attributor._refresher
    assert refresher is not None, "pod attribution is not configured"
    refresher.stop()
    refresher._thread.join(PATIENCE)
    assert not refresher._thread.is_alive(), "the pod refresher's thread did not end"
    return refresher


def refreshed(refresher: PodRefresher) -> None:
    """One List answered: what the refresher's thread does every refresh_interval. The call's
    deadline is that interval (1 s here, for the process attribution's cadence); a call a busy
    machine made miss it is made again (a retry budget), never taken for the kubelet's answer."""
    deadline = time.monotonic() + PATIENCE
    refresher.refresh()
    while not refresher.health().up:
        assert time.monotonic() < deadline, f"no List answer within {PATIENCE:g} s"
        refresher.refresh()


def test_soak_with_pod_and_process_churn_drops_gone_series_and_keeps_memory_flat(churn_world):
    from fakes.kubelet import pod

    clock, fake, kubelet, socket_path, proc = churn_world
    config = parse_config({"collect_interval": "1s", "kubernetes": {"enabled": True, "pod_resources_socket": str(socket_path), "refresh_interval": "1s", "process_attribution": True}, "proc_root": str(proc)})
    backend = NvmlBackend(slow_interval=10.0, nvml=fake, clock=clock)
    poller = Poller(backend, config, clock=clock)
    backend.start()  # no poller thread: the test calls poll_once and moves the clock
    exposition = payloads_following(poller, clock)
    poller.poll_once()  # configures pod attribution: its refresh thread starts (and is ended next)
    refresher = refresh_only_when_asked(poller)
    rounds = int(os.environ.get("GPUEFF_SOAK_ROUNDS", "600"))
    pid = 1000
    series_counts, memory = [], []
    tracemalloc.start()
    try:
        for round_number in range(rounds):
            for old in proc.iterdir():  # the processes of the last round are gone
                (old / "cgroup").unlink()
                old.rmdir()
            pods, current_uids = [], []
            for gpu_index, gpu in enumerate(fake.gpus):
                processes = []
                for replica in range(3):  # three short-lived pods share each GPU (time-slicing)
                    uid = pod_uid()
                    current_uids.append(uid)
                    pods.append(pod("team", f"job-{round_number}-{gpu_index}-{replica}", {"main": {"nvidia.com/gpu": [gpu.uuid]}}))
                    pid += 1
                    (proc / str(pid)).mkdir()
                    container = uuidlib.uuid4().hex + uuidlib.uuid4().hex
                    (proc / str(pid) / "cgroup").write_text(f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/cri-containerd-{container}.scope\n")
                    processes.append((pid, 2**30, f"python-{round_number}"))
                gpu.processes = processes
            kubelet.pods = pods
            clock.advance(1.0)
            refreshed(refresher)
            poller.poll_once()
            body = exposition.body().decode()
            series = [line for line in body.splitlines() if line and not line.startswith("#")]
            series_counts.append(len(series))
            pod_lines = [line for line in series if line.startswith(("gpueff_gpu_pod_info{", "gpueff_pod_compute_processes{"))]
            assert len([line for line in pod_lines if line.startswith("gpueff_gpu_pod_info{")]) == 6
            assert all(f"job-{round_number}-" in line for line in pod_lines if line.startswith("gpueff_gpu_pod_info{")), "a gone pod is still exported"
            processes_lines = [line for line in pod_lines if line.startswith("gpueff_pod_compute_processes{")]
            assert len(processes_lines) == 6 and all(any(uid in line for uid in current_uids) for line in processes_lines), "a gone process is still exported"
            if round_number in (rounds // 5, rounds - 1):
                memory.append(exporter_side_memory())
    finally:
        tracemalloc.stop()
        backend.close()
        poller.attributor.close()
    # One big block is an interpreter table (e.g. of interned strings) resized when it filled up,
    # at a moment that depends on the tests before; a leak is many small blocks, one set per poll.
    sizes = [sum(stat.size for stat in snapshot.statistics("traceback") if stat.count > 1 or stat.size < 64 * 1024) for snapshot in memory]
    growth = sizes[1] - sizes[0]
    grew = [str(stat) for stat in memory[1].compare_to(memory[0], "lineno")[:5]]
    print(f"\nsoak: {rounds} polls, 6 new pods and 6 new processes each: series per scrape {min(series_counts)}..{max(series_counts)}, "
          f"traced Python memory (less the fake kubelet's) {sizes[0] / 2**20:.2f} MiB after warm-up, {sizes[1] / 2**20:.2f} MiB at the end ({growth / 1024:+.0f} KiB)")
    assert max(series_counts) - min(series_counts[len(series_counts) // 5:]) <= 10  # bounded: no growth with churn
    assert growth < 256 * 1024, f"memory grew with pod and process churn: {grew}"
