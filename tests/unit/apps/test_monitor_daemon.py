"""App throughput joined with replayed GPUs: exact figures under a controlled clock, the GPU poll
never waiting on an app, reloads, and a real daemon process scraping a real app."""

from __future__ import annotations

import re
import subprocess
import threading

import pytest
from conftest import free_port, running_daemon
from fakes.apps import App, send, serving
from prometheus_client import Counter
from prometheus_client.parser import text_string_to_metric_families
from waiting import PATIENCE, wait_until

from gpueff.apps.monitor import AppMonitor
from gpueff.apps.settings import AppsSettings
from gpueff.backends.replay import ReplayBackend
from gpueff.exposition.render import render
from gpueff.poller import Poller
from gpueff.settings import parse_config
from gpueff.trace import load_trace

H200_PEAK_BF16 = 989.4e12


def vllm_like(registry):
    tokens = Counter("vllm:generation_tokens", "Generation tokens.", ["model_name"], registry=registry)
    requests = Counter("vllm:request_success", "Finished requests.", ["model_name", "finished_reason"], registry=registry)
    return tokens.labels("llama"), requests.labels("llama", "stop")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def app_entry(url: str, **changes: object) -> dict:
    return {"name": "llm", "url": url, "counter": "vllm:generation_tokens_total", "unit": "tokens", **changes}


def exposed(snapshot) -> dict[tuple[str, tuple], float]:
    """The rendered exposition, parsed back: (sample name, sorted labels) -> value."""
    text = render(snapshot).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in text_string_to_metric_families(text) for s in family.samples}


def test_figures_match_the_known_rate_and_the_replayed_power(trace_paths):
    clock = Clock()
    traces = [load_trace(trace_paths[name]) for name in ("matmul_8192", "copy_2GB", "idle")]
    backend = ReplayBackend(traces, clock=clock)
    backend.start()
    app = App(vllm_like)
    tokens, requests = app.metrics
    with serving(app.respond) as url:
        entry = app_entry(url, gpus=[0, "GPU-replay-1-copy_2GB"], requests_counter="vllm:request_success_total", flops_per_unit=1.4e10)
        poller = Poller(backend, parse_config({"price_per_gpu_hour": 3.0, "currency": "EUR", "apps": [entry]}), clock=clock)
        scraper = poller.apps.scrapers[0]
        tokens.inc(5000)  # done before the exporter looked: not counted
        scraper.scrape_once()
        first = poller.poll_once().apps[0]
        assert first.up and first.units_total == 0 and first.throughput is None
        power, sm_active = [], []
        for second in range(1, 6):  # 400 tokens and 2 requests per second, for 5 s
            clock.now += 1.0
            tokens.inc(400)
            requests.inc(2)
            if second == 5:
                scraper.scrape_once()
            snapshot = poller.poll_once()
            polled = [state.sample for state in snapshot.gpus[:2]]  # what this poll read of GPUs 0 and 1
            power.append(sum(sample.power_watts for sample in polled))
            sm_active.append(sum(sample.profiling.sm_active for sample in polled))
    state = snapshot.apps[0]
    mean_power, mean_sm = sum(power) / 5, sum(sm_active) / 5
    assert [device.index for device in state.gpus] == [0, 1]
    assert state.units_total == 2000
    assert state.throughput == pytest.approx(400)
    assert state.requests_per_second == pytest.approx(2)
    assert state.units_per_joule == pytest.approx(400 / mean_power)
    assert 400 / 1200 < state.units_per_joule < 400 / 700  # two busy H200s draw 0.7..1.2 kW
    assert state.units_per_sm_active_second == pytest.approx(400 / mean_sm)
    assert state.flops_per_second == pytest.approx(400 * 1.4e10)
    assert state.model_flops_utilization == pytest.approx(400 * 1.4e10 / (2 * H200_PEAK_BF16))
    assert state.cost_per_million_units == pytest.approx(2 * 3.0 / 3600 / 400 * 1e6)

    metrics = exposed(snapshot)
    app_label, unit = ("app", "llm"), ("unit", "tokens")
    assert metrics[("gpueff_app_up", (app_label,))] == 1
    assert metrics[("gpueff_app_gpus", (app_label,))] == 2
    assert metrics[("gpueff_app_gpu_info", (app_label, ("gpu", "1"), ("uuid", "GPU-replay-1-copy_2GB")))] == 1
    assert metrics[("gpueff_app_units_total", (app_label, unit))] == 2000
    assert metrics[("gpueff_app_throughput_per_second", (app_label, unit))] == pytest.approx(400)
    assert metrics[("gpueff_app_requests_per_second", (app_label,))] == pytest.approx(2)
    assert metrics[("gpueff_app_units_per_joule", (app_label, unit))] == pytest.approx(400 / mean_power)
    assert metrics[("gpueff_app_units_per_sm_active_second", (app_label, unit))] == pytest.approx(400 / mean_sm)
    assert metrics[("gpueff_app_flops_per_second", (app_label,))] == pytest.approx(400 * 1.4e10)
    assert metrics[("gpueff_app_model_flops_utilization_ratio", (app_label,))] == pytest.approx(0.00283, rel=1e-3)
    assert metrics[("gpueff_app_cost_per_million_units", (app_label, ("currency", "EUR"), unit))] == pytest.approx(4.1667, rel=1e-4)
    assert metrics[("gpueff_app_scrape_errors_total", (app_label,))] == 0
    lint = subprocess.run(["promtool", "check", "metrics"], input=render(snapshot), capture_output=True, timeout=PATIENCE)
    assert lint.returncode == 0 and b"gpueff_app" not in lint.stdout + lint.stderr, lint.stdout + lint.stderr


def test_a_down_app_keeps_its_counters_and_the_gpu_metrics(trace_paths):
    clock = Clock()
    backend = ReplayBackend([load_trace(trace_paths["matmul_8192"])], clock=clock)
    backend.start()
    app = App(vllm_like)
    tokens = app.metrics[0]
    port = free_port()
    with serving(app.respond, port=port) as url:
        poller = Poller(backend, parse_config({"apps": [app_entry(url, price_per_gpu_hour=2.0)]}), clock=clock)
        scraper = poller.apps.scrapers[0]
        scraper.scrape_once()
        poller.poll_once()
        clock.now += 2.0
        tokens.inc(100)
        scraper.scrape_once()
        assert poller.poll_once().apps[0].throughput == pytest.approx(50)
    clock.now += 2.0
    tokens.inc(300)
    scraper.scrape_once()  # nothing listens any more
    down = poller.poll_once()
    assert not down.apps[0].up and down.apps[0].scrape_errors_total == 1
    metrics = exposed(down)
    assert metrics[("gpueff_app_up", (("app", "llm"),))] == 0
    assert not any(name.startswith("gpueff_app_throughput") for name, _ in metrics)
    assert metrics[("gpueff_gpu_up", (("gpu", "0"), ("uuid", "GPU-replay-0-matmul_8192")))] == 1
    assert ("gpueff_power_watts", (("gpu", "0"), ("uuid", "GPU-replay-0-matmul_8192"))) in metrics
    with serving(app.respond, port=port):  # back after 4 s in all: the rate covers the whole gap
        clock.now += 2.0
        tokens.inc(100)
        scraper.scrape_once()
        back = poller.poll_once().apps[0]
    assert back.up and back.units_total == 500 and back.throughput == pytest.approx(400 / 4)
    assert back.cost_per_million_units == pytest.approx(2.0 / 3600 / 100 * 1e6)


def test_the_gpu_poll_never_waits_for_a_slow_app(trace_paths):
    """The app answers only when the test ends: polls go on while its scrape hangs, and stopping the
    poller ends the scrape without the app's answer."""
    stop, asked = threading.Event(), threading.Event()

    def hang(handler) -> None:
        asked.set()
        stop.wait(PATIENCE)
        send(handler, b"x_total 1\n")

    backend = ReplayBackend([load_trace(trace_paths["idle"])])
    try:
        with serving(hang) as url:
            config = parse_config({"collect_interval": "100ms", "apps": [app_entry(url, scrape_interval=f"{PATIENCE:g}s", scrape_timeout=f"{PATIENCE:g}s")]})
            poller = Poller(backend, config)
            poller.start(backend.start())
            scraper = poller.apps.scrapers[0]
            wait_until(asked.is_set, "the app's first scrape")
            polls_then = wait_until(lambda: poller.snapshot, "the first poll").polls_total
            during = wait_until(lambda: poller.snapshot.polls_total >= polls_then + 3 and poller.snapshot, "three polls while the app's scrape hangs")
            poller.stop()
            scraper.join(PATIENCE)
            scraper_ended_first = not scraper.alive() and not stop.is_set()
    finally:
        stop.set()
    assert not during.apps[0].up and during.apps[0].scrape_errors_total == 0  # its scrape was still under way
    assert scraper_ended_first, "stopping the poller waited for the hung app"


def test_reload_keeps_unchanged_apps_and_restarts_changed_ones():
    first = parse_config({"apps": [app_entry("http://127.0.0.1:9/metrics"), {**app_entry("http://127.0.0.1:10/metrics"), "name": "tgi"}]}).apps_settings
    monitor = AppMonitor(first)
    llm, tgi = monitor.scrapers
    changed = parse_config({"apps": [app_entry("http://127.0.0.1:9/metrics"), {**app_entry("http://127.0.0.1:11/metrics"), "name": "tgi"}, {**app_entry("http://127.0.0.1:12/metrics"), "name": "new"}]}).apps_settings
    monitor.configure(changed)
    kept, restarted, added = monitor.scrapers
    assert kept is llm and restarted is not tgi and restarted.app.url.endswith(":11/metrics") and added.app.name == "new"
    monitor.configure(AppsSettings())
    assert monitor.scrapers == ()


@pytest.mark.slow
def test_daemon_scrapes_a_real_app(tmp_path):
    """Each scrape of the app finds 200 more tokens: the daemon's units total is a multiple of 200,
    however a busy machine spaces the scrapes. The rate itself is exact under a controlled clock
    (test_figures_match_the_known_rate_and_the_replayed_power)."""
    app = App(vllm_like)
    tokens = app.metrics[0]

    def respond(handler) -> None:
        tokens.inc(200)
        app.respond(handler)

    with serving(respond) as url:
        config = tmp_path / "gpueff.yml"
        config.write_text(
            "apps:\n"
            f"  - {{name: llm, url: '{url}', counter: 'vllm:generation_tokens_total', unit: tokens, gpus: [4], scrape_interval: 1s, scrape_timeout: 1s}}\n"
            f"  - {{name: gone, url: 'http://127.0.0.1:{free_port()}/metrics', counter: x_total, unit: requests, scrape_interval: 1s, scrape_timeout: 1s}}\n"
        )
        with running_daemon("--demo", "--config", str(config), "--collect-interval", "200ms") as daemon:

            def rated() -> str | None:
                page = daemon.metrics()
                return page if 'gpueff_app_throughput_per_second{app="llm",unit="tokens"}' in page else None

            body = wait_until(rated, "the app's first rate")

    def value(pattern: str) -> float:
        match = re.search(rf"^{pattern} (\S+)$", body, re.MULTILINE)
        assert match, pattern
        return float(match.group(1))

    throughput = value(r'gpueff_app_throughput_per_second\{app="llm",unit="tokens"\}')
    power = value(r'gpueff_power_watts\{gpu="4",uuid="[^"]+"[^}]*\}')  # the demo's declared pod's labels may follow
    total = value(r'gpueff_app_units_total\{app="llm",unit="tokens"\}')
    assert total > 0 and total % 200 == 0
    assert throughput > 0
    assert value(r'gpueff_app_units_per_joule\{app="llm",unit="tokens"\}') == pytest.approx(throughput / power, rel=0.25)
    assert value(r'gpueff_app_up\{app="llm"\}') == 1
    assert value(r'gpueff_app_up\{app="gone"\}') == 0
    assert value(r'gpueff_app_gpus\{app="llm"\}') == 1
    assert 'gpueff_gpu_up{gpu="0"' in body and "gpueff_sm_active_ratio{" in body


def test_process_pattern_follows_the_processes_nvml_lists(trace_paths, tmp_path):
    from fakes.nvml import FakeClock, FakeGpu, FakeNvml
    from fakes.proc import process

    from gpueff.backends.nvml.backend import NvmlBackend
    from gpueff.sample import GpuProcess

    clock = FakeClock()
    vllm = (4242, 70 << 30, "/usr/bin/python3")
    fake = FakeNvml(
        [
            FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[vllm]),
            FakeGpu(load_trace(trace_paths["idle"])),
            FakeGpu(load_trace(trace_paths["copy_2GB"]), processes=[(77, 1 << 30, "/opt/tritonserver/bin/tritonserver"), (4243, 1 << 30, "/usr/bin/python3")]),
        ],
        clock=clock,
    )
    backend = NvmlBackend(nvml=fake, clock=clock)
    backend.start()
    try:
        app = App(vllm_like)
        with serving(app.respond) as url:
            for pid, uid in ((4242, 998), (4243, 998), (77, 1001)):
                process(tmp_path, pid, "python3", uid=uid)
            poller = Poller(backend, parse_config({"apps": [app_entry(url, process=r"python3?$", user=998)], "proc_root": str(tmp_path)}), clock=clock)
            poller.apps.scrapers[0].scrape_once()
            snapshot = poller.poll_once()
            assert snapshot.gpus[2].sample.processes == (GpuProcess(77, "/opt/tritonserver/bin/tritonserver", 1 << 30), GpuProcess(4243, "/usr/bin/python3", 1 << 30))
            assert [device.index for device in snapshot.apps[0].gpus] == [0, 2]
            fake.gpus[0].processes = []  # the process on GPU 0 exited
            clock.advance(1.0)
            assert [device.index for device in poller.poll_once().apps[0].gpus] == [2]
    finally:
        backend.close()


def test_a_tenants_process_named_like_the_app_does_not_join_it(trace_paths, tmp_path):
    """Before, a process any tenant named /home/tenant/tritonserver joined the app ``process:
    tritonserver`` with its GPU (units per joule 1.45 -> 1.23): the join is bound to the app's user."""
    from fakes.nvml import FakeClock, FakeGpu, FakeNvml
    from fakes.proc import process

    from gpueff.backends.nvml.backend import NvmlBackend

    process(tmp_path, 77, "tritonserver", uid=998)
    process(tmp_path, 78, "tritonserver", uid=1001)
    clock = FakeClock()
    fake = FakeNvml([FakeGpu(load_trace(trace_paths["matmul_8192"]), processes=[(77, 1 << 30, "/opt/tritonserver/bin/tritonserver")]),
                     FakeGpu(load_trace(trace_paths["copy_2GB"]), processes=[(78, 1 << 30, "/home/tenant/tritonserver")])], clock=clock)
    backend = NvmlBackend(nvml=fake, clock=clock)
    backend.start()
    try:
        app = App(vllm_like)
        with serving(app.respond) as url:
            poller = Poller(backend, parse_config({"apps": [app_entry(url, process="tritonserver", user=998)], "proc_root": str(tmp_path)}), clock=clock)
            assert [device.index for device in poller.poll_once().apps[0].gpus] == [0]
            process(tmp_path, 79, "tritonserver", uid=998)  # the app's user starts a second server there: it joins
            fake.gpus[1].processes = [(79, 1 << 30, "/home/tenant/tritonserver")]
            clock.advance(1.0)
            assert [device.index for device in poller.poll_once().apps[0].gpus] == [0, 1]
    finally:
        backend.close()
