"""End to end: a real Prometheus scrapes the daemon (the demo's 20 GPUs: the recorded H200 traces and
the H100 real-workload corpus) and a real
text-generation app; every dashboard panel query runs through Prometheus's HTTP API; a real
Alertmanager running the shipped deploy/prometheus/alertmanager.yml (its receivers' URLs pointed at
a webhook here) sends the mismatch alert of the replayed 1-thread spin trace to the team, each
team's waste to its own receiver, and applies its inhibitions per device uuid.

The live copy of the rules has every ``for:`` shortened to 1s (the real durations are covered by
``promtool test rules`` in tests/deploy/test_rules.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grafana_queries
import pytest
import yaml
from conftest import ROOT, free_port, http_get, running_daemon
from repo import DASHBOARDS
from waiting import PATIENCE, wait_until

from gpueff.taxonomy import WHAT_TO_TRY

pytestmark = pytest.mark.e2e  # a real Prometheus and Alertmanager

RULES = ROOT / "deploy" / "prometheus" / "gpu-efficiency-rules.yml"
# Both generations of dcgm-exporter's names, loaded side by side.
DCGM_COMPAT_RULES = ROOT / "deploy" / "prometheus" / "dcgm-exporter-compat.yml"
DCGM47_COMPAT_RULES = ROOT / "deploy" / "prometheus" / "dcgm-exporter-compat-dcgm47.yml"
# The panel and variable queries of dcgm-exporter's public Grafana dashboard (source in the file),
# and the same under the DCGM 4.7 names (each panel whose field has a public new name).
DCGM_EXPORTER_DASHBOARD = ROOT / "tests" / "deploy" / "dcgm_exporter" / "dashboard-queries.json"
DCGM47_EXPORTER_DASHBOARD = ROOT / "tests" / "deploy" / "dcgm_exporter" / "dashboard-queries-dcgm47.json"
# Alert rules in the shapes dcgm-exporter's users write (promtool fires each: tests/deploy/test_dcgm_compat.py).
DCGM_EXPORTER_ALERTS = ROOT / "tests" / "deploy" / "dcgm_exporter" / "alert-examples.yml"
ALERTMANAGER_CONFIG = ROOT / "deploy" / "prometheus" / "alertmanager.yml"
DASHBOARD_FILES = sorted(DASHBOARDS.glob("*.json"))
SCRAPE_INTERVAL = 1.0
SPIN_UUID = "GPU-replay-4-spin_1sm"
# Metrics that replay outside Kubernetes cannot produce (gpu-trace/1 holds no process list; no
# kubelet to attribute pods): a panel query reading one of them may come back empty, and only while
# the daemon really does not export it.
NOT_IN_REPLAY = ("gpueff_compute_processes", "gpueff_compute_process_memory_bytes",
                 # Hardware-health series no demo trace holds (no Xid or memory-temperature readings were
                 # recorded; the H200 recordings with health have no fan, page retirement or NVLink
                 # error counters, and only the 2-GPU job's have NVLink link states).
                 "gpueff_xid_errors_total", "gpueff_memory_temperature_celsius", "gpueff_nvlink_errors_total",
                 "gpueff_fan_speed_ratio", "gpueff_retired_pages",
                 # (The fair split's holder series are not here: on --demo its holders are the declared
                 # owners', gpueff/traces/demo-owners.json, so their panels must answer.)
                 # Never set without a kubelet that answered once.
                 "gpueff_kubernetes_attribution_last_success_timestamp_seconds")
# The health readings (docs/health.md) the demo replays only on the GPUs whose traces recorded them:
# h200/idle and h200/matmul_8192, GPUs 1 and 2, and the 2-GPU job h200-jobs/2gpu_straggler, GPUs 18 and 19 (gpueff/traces/README.md).
RECORDED_HEALTH = ("gpueff_clock_violation_seconds_total", "gpueff_pcie_replay_errors_total", "gpueff_pcie_link_width", "gpueff_pcie_link_max_width",
                   "gpueff_pcie_link_generation", "gpueff_pcie_link_max_generation", "gpueff_encoder_utilization_ratio", "gpueff_decoder_utilization_ratio",
                   "gpueff_performance_state", "gpueff_temperature_limit_celsius", "gpueff_ecc_errors_total", "gpueff_remapped_rows",
                   "gpueff_nvlink_link_active")
HEALTH_GPUS = 'gpu=~"(1|2|18|19)"'
# The demo's declared owners (gpueff/traces/demo-owners.json) hold some GPUs only: its pods GPUs 0-2,
# 4, 6 and 8-10 (the kubelet here answers for none, so the declared pods stay), its Slurm jobs 11 and
# 13-17. A query of the other GPUs may come back empty.
DECLARED_OWNERS = ("gpueff_gpu_pod_info", "gpueff_gpu_job_info")
SPIN_POD = {"namespace": "research", "pod": "sweep-lr-3e4-0", "container": "trainer"}
# The exporter joins the vLLM-like token server with GPUs 0 and 5.
APP_GPUS = ("0", "5")
# The token servers (tests/support/fakes/app_servers/server_metrics.yml) and the namespace label their scrape adds: the
# dashboards' All matches the empty one; the pre-V1 vLLM names are checked on their own namespace.
APP_SERVERS = {"vllm": "", "sglang": "", "vllm-0.8": "legacy"}


def binary(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError(f"none of {names} is installed: tests/run.sh installs the Debian packages prometheus and prometheus-alertmanager")


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    """wait_until, with a server that is not up yet (refused, half an answer) counting as not yet."""
    return wait_until(check, what, timeout, interval, ignoring=(OSError, ValueError, KeyError))


def eventually(what: str, check: Callable[[], None]) -> None:
    """Run ``check``'s assertions until they hold: a series Prometheus has yet to store, a rule it has
    yet to evaluate (twice, for a rate over it) come later on a busy machine. Its last failure after PATIENCE."""
    deadline = time.monotonic() + PATIENCE
    while True:
        try:
            check()
            return
        except (AssertionError, OSError, ValueError, KeyError) as error:
            if time.monotonic() > deadline:
                raise AssertionError(f"gave up after {PATIENCE:g} s waiting for {what}: {error}") from error
        time.sleep(0.5)


class Process:
    """A server process with its output in a log file, stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, name: str, command: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        self._file = log.open("w")
        self.process = subprocess.Popen(command, stdout=self._file, stderr=subprocess.STDOUT, cwd=ROOT)

    def check_running(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._file.close()


class Webhook:
    """A real HTTP receiver for Alertmanager's webhook notifications."""

    def __init__(self) -> None:
        self.payloads: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with webhook.lock:
                    webhook.payloads.append((self.path, json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def alerts(self, name: str, path: str | None = None) -> list[dict[str, Any]]:
        """Alerts named ``name`` delivered (to the receiver at ``path``, or to any)."""
        with self.lock:
            return [alert for where, payload in self.payloads for alert in payload["alerts"]
                    if alert["labels"].get("alertname") == name and path in (None, where)]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        status, body = http_get(f"{self.url}/api/v1/{path}?{query}", timeout=PATIENCE)
        reply = json.loads(body)
        if status != 200 or reply.get("status") != "success":
            raise AssertionError(f"{path} {params}: HTTP {status}: {reply.get('errorType')}: {reply.get('error')}")
        return reply["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]


def alertmanager_config(webhook_url: str) -> str:
    """The shipped alertmanager.yml with each receiver's URL pointed at the test webhook
    (``/<receiver name>``) and the group timers at 1s; routes and inhibitions as shipped."""
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    for receiver in config["receivers"]:
        for hook in receiver["webhook_configs"]:
            hook["url"] = f"{webhook_url}/{receiver['name']}"
            hook["send_resolved"] = False
    config["route"].update(group_wait="1s", group_interval="1s")
    return yaml.safe_dump(config)


def shortened_rules(text: str) -> str:
    """The rules with every alert's ``for:`` set to 1s."""
    shortened, count = re.subn(r"^(\s+for:) \S+$", r"\1 1s", text, flags=re.M)
    assert count == text.count("for:"), "every for: must be rewritten"
    return shortened


class LoadDriver:
    """Sends completion requests to the apps in turn until stopped, so their counters move."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.sent = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        body = json.dumps({"prompt": "how busy is the gpu", "max_tokens": 16}).encode()
        while not self._stop.wait(0.05 / len(self.urls)):
            url = self.urls[self.sent % len(self.urls)]
            request = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
            with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=PATIENCE) as response:
                response.read()
                self.sent += 1

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("e2e")
    with contextlib.ExitStack() as stack:
        webhook = Webhook()
        stack.callback(webhook.stop)

        am_port = free_port()
        (work / "alertmanager.yml").write_text(alertmanager_config(webhook.url))
        alertmanager = Process("alertmanager", [binary("prometheus-alertmanager", "alertmanager"), f"--config.file={work / 'alertmanager.yml'}", f"--storage.path={work / 'am'}",
                                                f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="], work / "alertmanager.log")
        stack.callback(alertmanager.stop)

        # Text-generation servers exposing vLLM's (V1), SGLang's and vLLM 0.8's metrics through
        # prometheus_client's own negotiation, as the real servers do (tests/support/fakes/app_servers/server_metrics.yml).
        apps: dict[str, str] = {}
        for server in APP_SERVERS:
            port = free_port()
            app = Process(f"token_server {server}", [sys.executable, str(ROOT / "tests" / "support" / "fakes" / "app_servers" / "token_server.py"), "--listen", f"127.0.0.1:{port}", "--server", server], work / f"app-{server}.log")
            stack.callback(app.stop)
            apps[server] = f"http://127.0.0.1:{port}"
            wait_for(f"the {server} token server", lambda app=app, url=apps[server]: (app.check_running(), http_get(url + "/health", timeout=PATIENCE)[0] == 200)[1], PATIENCE)
        app_url = apps["vllm"]

        (work / "exporter.yml").write_text(yaml.safe_dump({
            "price_per_gpu_hour": 2.5, "currency": "USD",
            # The counters as Prometheus 2.x shows them: the join takes either spelling.
            "apps": [{"name": "llm", "url": app_url + "/metrics", "counter": "vllm_generation_tokens_total", "unit": "tokens",
                      "requests_counter": "vllm_request_success_total", "gpus": [int(gpu) for gpu in APP_GPUS], "flops_per_unit": 1.6e10,
                      "scrape_interval": "500ms", "scrape_timeout": "500ms"}],
            # Attribution on, with no kubelet: gpueff_kubernetes_attribution_up is 0 (the
            # exporter-health panels read it, GpuKubernetesAttributionDown fires).
            "kubernetes": {"enabled": True, "pod_resources_socket": str(work / "no-kubelet.sock")},
        }))
        daemon = stack.enter_context(running_daemon("--demo", "--collect-interval", "500ms", "--config", str(work / "exporter.yml")))

        load = LoadDriver(list(apps.values()))
        stack.callback(load.stop)

        (work / "rules.yml").write_text(shortened_rules(RULES.read_text()))
        prom_port = free_port()
        (work / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": f"{SCRAPE_INTERVAL:g}s", "scrape_timeout": f"{SCRAPE_INTERVAL:g}s", "evaluation_interval": "1s"},
            "rule_files": [str(work / "rules.yml"), str(DCGM_COMPAT_RULES), str(DCGM47_COMPAT_RULES)],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
            "scrape_configs": [
                {"job_name": "gpu-efficiency-exporter", "static_configs": [{"targets": [f"127.0.0.1:{daemon.port}"]}]},
                *({"job_name": f"{server}-server", "static_configs": [{"targets": [url.removeprefix("http://")], "labels": {"namespace": APP_SERVERS[server]}}]}
                  for server, url in apps.items()),
            ],
        }))
        prometheus = Process("prometheus", [binary("prometheus"), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
                                            f"--web.listen-address=127.0.0.1:{prom_port}"], work / "prometheus.log")
        stack.callback(prometheus.stop)
        prom = Prometheus(f"http://127.0.0.1:{prom_port}")

        def ready(process: Process, url: str) -> bool:
            process.check_running()
            return http_get(url + "/-/ready", timeout=PATIENCE)[0] == 200

        wait_for("Alertmanager to be ready", lambda: ready(alertmanager, f"http://127.0.0.1:{am_port}"), PATIENCE)
        wait_for("Prometheus to be ready", lambda: ready(prometheus, prom.url), PATIENCE)
        wait_for("every scrape target up", lambda: len(prom.query('up == 1')) == 1 + len(apps), PATIENCE)
        started = time.time()
        # Enough samples for rate() over $__rate_interval (4 scrapes) and for the recording rules.
        # Prometheus 2.x asked for OpenMetrics without escaping=allow-utf-8: the colons were escaped.
        wait_for("the app's token rate", lambda: prom.query("sum(rate(vllm_generation_tokens_total[4s])) > 0"), PATIENCE)
        wait_for("the exporter's app join", lambda: prom.query("gpueff_app_units_per_joule > 0"), PATIENCE)
        time.sleep(max(0.0, started + 6 - time.time()))
        yield {"prometheus": prom, "webhook": webhook, "daemon_metrics": daemon.metrics(), "started": started, "work": work, "load": load,
               "alertmanager": f"http://127.0.0.1:{am_port}"}


def _label_values(prom: Prometheus, start: float, end: float) -> Callable[[str | None, str], list[str]]:
    def label_values(selector: str | None, label: str) -> list[str]:
        params: dict[str, Any] = {"start": start, "end": end}
        if selector:
            params["match[]"] = selector
        return sorted(prom.api(f"label/{label}/values", **params))

    return label_values


def pick_all(variable: dict[str, Any], options: list[str]) -> str:
    return variable["allValue"]


def pick_first_and_last(variable: dict[str, Any], options: list[str]) -> str:
    """A concrete selection like a user's: the first and last option in the variable's order
    (Grafana's sort 3, numerical: GPUs 0 and 19 of the demo), All where there are none. The owner
    variables (namespace, pod) stay at All: they are not narrowed by the GPUs picked, so their first
    and last options (pods on other GPUs than 0 and 19 of the demo) would leave nothing to draw."""
    if not options or variable["name"] in ("namespace", "pod"):
        return variable["allValue"]
    assert variable["sort"] == 3
    ordered = sorted(options, key=lambda option: (0, int(option), "") if option.isdigit() else (1, 0, option))
    return grafana_queries.format_multi(sorted({ordered[0], ordered[-1]}))


def exported(metrics: str, name: str) -> bool:
    """Whether the daemon's exposition has a sample of ``name`` (with or without labels)."""
    return re.search(rf"^{re.escape(name)}[{{ ]", metrics, flags=re.M) is not None


def exported_on(metrics: str, name: str, expr: str) -> bool:
    """Whether the daemon exports ``name`` for a GPU the query's gpu=~"..." selects."""
    selection = re.search(r'gpu=~"([^"]*)"', expr)
    selected = re.compile(selection.group(1) if selection else ".*")
    return any(selected.fullmatch(gpu) for gpu in re.findall(rf'^{re.escape(name)}\{{gpu="(\d+)"', metrics, flags=re.M))


def active_clock_events(metrics: str, expr: str) -> list[str]:
    """The daemon's clock-event reasons at 1 on the GPUs the query's gpu=~"..." selects: "Throttle
    reasons" draws only active ones, so it is empty exactly when there are none (the copy and
    tiny-kernel traces, GPUs 0 and 5, are never throttled; idle and the matmuls are)."""
    selected = re.compile(re.search(r'gpu=~"([^"]*)"', expr).group(1))
    lines = re.findall(r'^gpueff_clock_event_active\{gpu="(\d+)",[^}]*\} 1$', metrics, flags=re.M)
    return [gpu for gpu in lines if selected.fullmatch(gpu)]


def run_dashboard_queries(stack: dict[str, Any], pick: Callable[[dict[str, Any], list[str]], str]) -> tuple[int, list[str]]:
    prom: Prometheus = stack["prometheus"]
    end = time.time()
    start = stack["started"] + 1
    builtins = grafana_queries.builtins(end - start, SCRAPE_INTERVAL)
    step = builtins["__interval"]
    failures, count = [], 0
    for path in DASHBOARD_FILES:
        dashboard = grafana_queries.load(path)
        values = {**grafana_queries.resolve_variables(dashboard, _label_values(prom, start, end), pick), **builtins}
        for query in grafana_queries.queries(dashboard, values):
            count += 1
            where = f"{path.name} / {query.panel!r} / {query.ref}"
            try:
                if query.instant:
                    result = prom.api("query", query=query.expr, time=end)["result"]
                else:
                    result = prom.api("query_range", query=query.expr, start=start, end=end, step=step)["result"]
            except AssertionError as error:
                failures.append(f"{where}: {error}")
                continue
            if not result:
                missing = [name for name in NOT_IN_REPLAY if name in query.expr and not exported(stack["daemon_metrics"], name)]
                missing += [name for name in RECORDED_HEALTH + DECLARED_OWNERS if name in query.expr and not exported_on(stack["daemon_metrics"], name, query.expr)]
                if query.panel == "Throttle reasons" and not active_clock_events(stack["daemon_metrics"], query.expr):
                    missing.append("an active clock-event reason on the selected GPUs")
                if not missing:
                    failures.append(f"{where}: empty result for {query.expr}")
    return count, failures


def dashboard_queries_until_answered(stack: dict[str, Any], pick: Callable[[dict[str, Any], list[str]], str]) -> tuple[int, list[str]]:
    """run_dashboard_queries, asked again while any fails, up to PATIENCE: a panel over rate() needs
    a few stored scrapes and one over a recording rule an evaluation, which a busy machine delays."""
    deadline = time.monotonic() + PATIENCE
    while True:
        count, failures = run_dashboard_queries(stack, pick)
        if not failures or time.monotonic() > deadline:
            return count, failures
        time.sleep(1)


def test_every_dashboard_panel_query_returns_data_with_all_selected(stack):
    count, failures = dashboard_queries_until_answered(stack, pick_all)
    assert count >= 50, f"only {count} panel queries found"
    assert not failures, "\n".join(failures)


def test_every_dashboard_panel_query_returns_data_with_some_gpus_selected(stack):
    count, failures = dashboard_queries_until_answered(stack, pick_first_and_last)
    assert not failures, "\n".join(failures)


def test_per_watt_of_an_app_is_the_same_with_all_and_with_its_gpus_selected(stack):
    """The app dashboard's units-per-joule query gives an app the same figure whatever GPU
    selection holds one of its GPUs: All, both of its GPUs, or just one of them."""
    prom: Prometheus = stack["prometheus"]
    dashboard = grafana_queries.load(DASHBOARDS / "gpu-efficiency-app-throughput.json")
    (panel,) = [p for p in grafana_queries.panels(dashboard) if p["title"] == "Units per joule"]
    now = time.time()
    builtins = grafana_queries.builtins(60, SCRAPE_INTERVAL)
    label_values = _label_values(prom, now - 60, now)

    def per_joule(gpus: list[str] | None) -> float:
        def pick(variable: dict[str, Any], options: list[str]) -> str:
            if variable["name"] == "gpu" and gpus is not None:
                return grafana_queries.format_multi(gpus)
            return variable["allValue"]

        values = {**grafana_queries.resolve_variables(dashboard, label_values, pick), **builtins}
        expr = grafana_queries.interpolate(panel["targets"][0]["expr"], values)
        (sample,) = prom.api("query", query=expr, time=now)["result"]
        assert sample["metric"]["app"] == "llm" and sample["metric"]["unit"] == "tokens"
        return float(sample["value"][1])

    everything = per_joule(None)
    assert everything > 0
    assert per_joule(list(APP_GPUS)) == pytest.approx(everything, rel=1e-9)
    assert per_joule([APP_GPUS[0]]) == pytest.approx(everything, rel=1e-9)
    # Against the power of the app's two GPUs only, not of all 18.
    power = sum(float(s["value"][1]) for s in prom.api("query", query=f'gpueff_power_watts{{gpu=~"{"|".join(APP_GPUS)}"}}', time=now)["result"])
    (tput,) = prom.api("query", query='gpueff_app_throughput_per_second{app="llm"}', time=now)["result"]
    assert everything == pytest.approx(float(tput["value"][1]) / power, rel=1e-9)
    # A selection without the app's GPUs has no figure for it.
    values = {**grafana_queries.resolve_variables(dashboard, label_values, lambda v, o: "(1|2)" if v["name"] == "gpu" else v["allValue"]), **builtins}
    assert not prom.api("query", query=grafana_queries.interpolate(panel["targets"][0]["expr"], values), time=now)["result"]


def test_processes_are_really_absent_in_replay(stack):
    """The exemptions above hold only because this daemon exports no such metrics, and because the
    "Throttle reasons" panel is empty only for GPUs that have none active."""
    for name in NOT_IN_REPLAY:
        assert not exported(stack["daemon_metrics"], name), name
    for name in RECORDED_HEALTH:
        assert exported_on(stack["daemon_metrics"], name, HEALTH_GPUS) and not exported_on(stack["daemon_metrics"], name, 'gpu=~"(0|[3-9]|1[0-7])"'), name


def test_the_demo_replays_the_recorded_health_readings(stack: dict[str, Any]) -> None:
    """The GPU detail dashboard's health row under --demo: the matmul (GPU 2) ran at its power limit
    all along, so its clocks were held down for power the whole time; the idle GPU (1) for low
    utilization. The counters keep rising across the replay's loops."""
    prom: Prometheus = stack["prometheus"]

    def share_of_time(selector: str) -> float:
        """The counter's rise over the time between its first and last stored samples (no
        extrapolation: the stack may have run only a few seconds)."""
        (series,) = prom.api("query", query=f"{selector}[5m]", time=time.time())["result"]
        (start, first), (end, last) = series["values"][0], series["values"][-1]
        return (float(last) - float(first)) / (end - start)

    # 1.0 recorded; the figure jitters by a poll or so over the stored span (more where a busy
    # machine delays polls and scrapes), so it is waited for as that span grows.
    for selector in ('gpueff_clock_violation_seconds_total{gpu="2", reason="power"}', 'gpueff_clock_violation_seconds_total{gpu="1", reason="low_utilization"}'):
        wait_for(f"{selector}'s share of time near 1", lambda selector=selector: 0.7 < share_of_time(selector) < 1.3, PATIENCE, interval=1)
    assert {s["metric"]["threshold"]: float(s["value"][1]) for s in prom.query('gpueff_temperature_limit_celsius{gpu="2"}')} == {"slowdown": 89, "shutdown": 95, "gpu_max": 87, "memory_max": 95}
    assert [float(s["value"][1]) for s in prom.query('gpueff_pcie_link_width{gpu="2"}')] == [16.0]
    assert active_clock_events(stack["daemon_metrics"], 'gpu=~".*"') and not active_clock_events(stack["daemon_metrics"], 'gpu=~"(0|5)"')


def test_mismatch_alert_from_spin_trace_reaches_the_team(stack):
    """A warning by default (wasted time, no outage): the receiver of the team whose namespace holds
    the GPU (research: team-ml), with the pod's labels, not on-call."""
    webhook: Webhook = stack["webhook"]
    alerts = wait_for("the mismatch alert at the team webhook", lambda: webhook.alerts("GpuHighUtilizationLowSmActivity", "/team-ml"), PATIENCE, interval=0.5)
    alert = alerts[0]
    assert alert["status"] == "firing"
    assert alert["labels"]["uuid"] == SPIN_UUID and alert["labels"]["gpu"] == "4"
    assert alert["labels"]["severity"] == "warning"
    assert alert["annotations"]["summary"] == "GPU looks busy but its SMs are mostly idle."
    # The spin trace's SM activity is 0.757 % (1 SM of 132): the description carries its mean and the device.
    assert re.search(r"^GPU 4 \(GPU-replay-4-spin_1sm\) on 127\.0\.0\.1:\d+ counted as busy .* only 0\.75\d*% of its SMs were active", alert["annotations"]["description"]), alert["annotations"]["description"]
    assert alert["annotations"]["runbook_url"].endswith("/docs/dashboards-and-alerts.md#gpuhighutilizationlowsmactivity")
    # What to try for the spin trace's class now (underfilled: one SM of 132 has work), looked up
    # by the real Prometheus from gpueff_bottleneck and gpueff_bottleneck_class_info.
    assert alert["annotations"]["what_to_try"] == f"Bottleneck now: underfilled. {WHAT_TO_TRY['underfilled']}"
    # Whose: the demo's pod on that GPU, by its labels (routed on namespace) and in words.
    assert {key: alert["labels"].get(key) for key in SPIN_POD} == SPIN_POD
    assert alert["annotations"]["owner"] == "pod research/sweep-lr-3e4-0 (container trainer)"
    assert not webhook.alerts("GpuHighUtilizationLowSmActivity", "/gpu-team")
    # Only the spin trace is 'busy but not working': the matmul, copy, idle and tiny-kernel GPUs are not.
    assert {a["labels"]["uuid"] for a in webhook.alerts("GpuHighUtilizationLowSmActivity")} == {SPIN_UUID}
    assert not webhook.alerts("GpuHighUtilizationLowSmActivity", "/gpu-oncall")
    firing = stack["prometheus"].api("alerts")["alerts"]
    assert {a["labels"]["uuid"] for a in firing if a["labels"]["alertname"] == "GpuHighUtilizationLowSmActivity"} == {SPIN_UUID}


def test_attribution_down_alert_reaches_the_team(stack: dict[str, Any]) -> None:
    """With Kubernetes attribution on and no kubelet, the exporter says so and the alert fires."""
    webhook: Webhook = stack["webhook"]
    (up,) = stack["prometheus"].query("gpueff_kubernetes_attribution_up")
    assert up["value"][1] == "0"
    alerts = wait_for("the attribution alert at the team webhook", lambda: webhook.alerts("GpuKubernetesAttributionDown", "/gpu-team"), PATIENCE, interval=0.5)
    assert alerts[0]["labels"]["severity"] == "warning" and alerts[0]["annotations"]["runbook_url"].endswith("#gpukubernetesattributiondown")


def test_no_gpu_of_the_demo_reads_implausible_counters(stack: dict[str, Any]) -> None:
    """The demo's recorded readings are physically possible: no counter-health check is 1, so the
    waste alerts and efficiency rules leave no GPU out."""
    flags = stack["prometheus"].query("gpueff_readings_implausible")
    assert flags and all(sample["value"][1] == "0" for sample in flags)
    assert not [a for a in stack["prometheus"].api("alerts")["alerts"] if a["labels"]["alertname"] == "GpuReadingsImplausible"]


def test_shipped_inhibitions_match_on_the_device_uuid(stack):
    """A lost MIG device silences the efficiency alert of itself, not of its sibling on the same GPU."""
    webhook: Webhook = stack["webhook"]
    common = {"job": "gpu-efficiency-exporter", "instance": "node9:9947", "gpu": "7"}
    alerts = [
        {"labels": {**common, "alertname": "GpuLost", "uuid": "MIG-x", "severity": "critical"}},
        {"labels": {**common, "alertname": "GpuLowEfficiency", "uuid": "MIG-x", "severity": "warning"}},
        {"labels": {**common, "alertname": "GpuLowEfficiency", "uuid": "MIG-y", "severity": "warning"}},
    ]
    request = urllib.request.Request(stack["alertmanager"] + "/api/v2/alerts", data=json.dumps(alerts).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=PATIENCE) as response:
        assert response.status == 200
    wait_for("the lost MIG device to page", lambda: [a for a in webhook.alerts("GpuLost", "/gpu-oncall") if a["labels"]["uuid"] == "MIG-x"], PATIENCE, interval=0.3)
    delivered = lambda: {a["labels"]["uuid"] for a in webhook.alerts("GpuLowEfficiency", "/gpu-team") if a["labels"]["instance"] == "node9:9947"}  # noqa: E731
    wait_for("the sibling's low-efficiency alert", lambda: "MIG-y" in delivered(), PATIENCE, interval=0.3)

    def held_back() -> bool:
        """Alertmanager's own word that MIG-x's low-efficiency alert is inhibited: it never notifies one."""
        query = urllib.parse.urlencode([("filter", 'alertname="GpuLowEfficiency"'), ("filter", 'uuid="MIG-x"')])
        with urllib.request.urlopen(f"{stack['alertmanager']}/api/v2/alerts?{query}", timeout=PATIENCE) as response:
            (alert,) = json.loads(response.read())
        return alert["status"]["state"] == "suppressed" and bool(alert["status"]["inhibitedBy"])

    wait_for("the lost device's low-efficiency alert to be inhibited", held_back, PATIENCE, interval=0.3)
    assert delivered() == {"MIG-y"}


def test_each_team_gets_its_own_waste_from_the_shipped_alertmanager_config(stack: dict[str, Any]) -> None:
    """The real Alertmanager with the shipped routes: a waste alert of namespace ml reaches team-ml,
    one of serving team-serving, a Slurm job's hpc-users, one without an owner gpu-team; a hot GPU
    of namespace ml is not waste and stays with gpu-team."""
    webhook: Webhook = stack["webhook"]
    common = {"job": "gpu-efficiency-exporter", "instance": "node8:9947", "gpu": "0", "severity": "warning"}
    sent = {
        "/team-ml": {"alertname": "GpuHeldIdle", "uuid": "GPU-ml", "namespace": "ml", "pod": "notebook-0", "container": "main"},
        "/team-serving": {"alertname": "GpuLowEfficiency", "uuid": "GPU-serving", "namespace": "serving", "pod": "llama-b1", "container": "vllm"},
        "/hpc-users": {"alertname": "GpuHostStarved", "uuid": "GPU-slurm", "job_id": "48377", "user_id": "2002"},
        "/gpu-team": {"alertname": "GpuHeldIdle", "uuid": "GPU-nobody"},
    }
    alerts = [{"labels": {**common, **labels}} for labels in sent.values()]
    alerts.append({"labels": {**common, "alertname": "GpuTemperatureHigh", "uuid": "GPU-hot", "namespace": "ml"}})
    request = urllib.request.Request(stack["alertmanager"] + "/api/v2/alerts", data=json.dumps(alerts).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=PATIENCE) as response:
        assert response.status == 200
    for path, labels in sent.items():
        wait_for(f"{labels['uuid']} at {path}", lambda path=path, labels=labels: [a for a in webhook.alerts(labels["alertname"], path) if a["labels"]["uuid"] == labels["uuid"]], PATIENCE, interval=0.3)
    wait_for("the hot GPU at gpu-team", lambda: [a for a in webhook.alerts("GpuTemperatureHigh", "/gpu-team") if a["labels"]["uuid"] == "GPU-hot"], PATIENCE, interval=0.3)
    for path, labels in sent.items():
        elsewhere = [p for p in sent if p != path]
        assert not any(a["labels"]["uuid"] == labels["uuid"] for other in elsewhere for a in webhook.alerts(labels["alertname"], other)), labels["uuid"]


def test_every_gpu_has_its_owners_recorded(stack: dict[str, Any]) -> None:
    """instance_gpu:gpueff_owner:info from the demo: each of its 20 GPUs has a row, its eight pods
    theirs, the Slurm job 48213's five GPUs the job and its user, the bare-host users' GPUs their uid
    (the demo's holders), and the GPU nobody holds (h100/idle, GPU 7) a row of its own."""
    prom: Prometheus = stack["prometheus"]

    def recorded() -> None:
        rows = [sample["metric"] for sample in prom.query("instance_gpu:gpueff_owner:info")]
        assert {row["uuid"] for row in rows} == {sample["metric"]["uuid"] for sample in prom.query("gpueff_gpu_up")}
        assert len({row["pod"] for row in rows if "pod" in row}) == 8 and {key: value for key, value in next(row for row in rows if row["uuid"] == SPIN_UUID).items() if key in SPIN_POD} == SPIN_POD
        assert sum(row.get("job_id") == "48213" and row.get("user_id") == "2001" for row in rows) == 5
        assert {row["user_id"] for row in rows if "job_id" not in row and "user_id" in row} == {"1003", "1004", "1005"}
        assert [row["gpu"] for row in rows if set(row) == {"__name__", "job", "instance", "gpu", "uuid"}] == ["7"]

    eventually("the owners' rule", recorded)


def test_recording_rules_in_live_prometheus(stack):
    prom: Prometheus = stack["prometheus"]
    def recorded() -> None:  # each group's rules in their first evaluations
        (fleet,) = prom.query("job:gpueff_efficiency:ratio_rate5m")
        # 20 replayed GPUs: copy/matmul/training efficient, spin and tiny kernels not, idle not counted.
        assert 0.3 < float(fleet["value"][1]) < 0.95
        assert prom.query("namespace:gpueff_sm_active_gpu_hours:increase1h > 0")
        (per_joule,) = prom.query("namespace:app_generation_tokens_per_joule:ratio_rate5m")
        assert float(per_joule["value"][1]) > 0
        spin = prom.query(f'instance_gpu:gpueff_efficiency:ratio_rate5m{{uuid="{SPIN_UUID}"}}')
        assert spin and float(spin[0]["value"][1]) < 0.02

    eventually("the recording rules", recorded)


def assert_answers(prom: Prometheus, expr: str, panel: str) -> None:
    assert prom.query(expr), f"{panel!r}: {expr} returns nothing"


def answer_dcgm_exporter_dashboard(prom: Prometheus, queries: Path) -> None:
    """Every query of ``queries``, its variables resolved as Grafana would (every option selected),
    answers from the recorded series."""
    dashboard = json.loads(queries.read_text())
    wait_for("the compat rules", lambda: prom.query(re.fullmatch(r"label_values\((\w+), *\w+\)", dashboard["variables"][0]["query"]).group(1)), PATIENCE)
    values = {}
    for variable in dashboard["variables"]:
        metric, label = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["query"]).groups()
        options = prom.api(f"label/{label}/values", **{"match[]": metric})
        assert options, f"variable {variable['name']}: {variable['query']} has no values"
        values[variable["name"]] = grafana_queries.format_multi(options)  # every option selected, as Grafana writes them
    assert values["gpu"].count("|") == 19  # the demo's 20 GPUs
    for query in dashboard["queries"]:
        expr = grafana_queries.interpolate(query["expr"], values)
        eventually(f"{query['panel']!r}: {expr}", lambda expr=expr, query=query: assert_answers(prom, expr, query["panel"]))


def test_dcgm_exporter_dashboard_queries_return_data_through_the_compat_rules(stack):
    """Every query of dcgm-exporter's own dashboard answers from this exporter's series through
    dcgm-exporter-compat.yml, in dcgm-exporter's units."""
    prom: Prometheus = stack["prometheus"]
    answer_dcgm_exporter_dashboard(prom, DCGM_EXPORTER_DASHBOARD)
    # dcgm-exporter's units (the exact conversions are promtool cases): MiB of a constant, MHz, percent.
    (total,) = prom.query("max(abs(DCGM_FI_DEV_FB_TOTAL - on (uuid) group_left gpueff_memory_total_bytes / 2^20))")
    assert float(total["value"][1]) == 0
    assert len(prom.query("DCGM_FI_DEV_SM_CLOCK > 100 < 3000")) == 20
    assert len(prom.query("DCGM_FI_DEV_GPU_UTIL >= 0 <= 100")) == 20 and prom.query("DCGM_FI_DEV_GPU_UTIL > 1")
    (labelled,) = prom.query('count(DCGM_FI_DEV_GPU_TEMP{UUID!="", device=~"nvidia[0-9]+", modelName!="", Hostname="127.0.0.1", DCGM_FI_DRIVER_VERSION!=""})')
    assert labelled["value"][1] == "20"
    # The alert examples' expressions run on this Prometheus's compat series (the demo trips none of them).
    for rule in yaml.safe_load(DCGM_EXPORTER_ALERTS.read_text())["groups"][0]["rules"]:
        prom.query(rule["expr"])
    assert prom.query("DCGM_FI_DEV_GPU_TEMP > 0 < 85") and prom.query("DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) <= 1")


def test_dcgm_exporter_dashboard_queries_under_the_dcgm47_names_return_data_beside_the_old_ones(stack):
    """The same dashboard under the DCGM 4.7 names (dcgm-exporter 4.9.0 on) answers through
    dcgm-exporter-compat-dcgm47.yml, loaded beside the old generation's rules: utilization from 0
    to 1 where the old name reads percent, the driver in DCGM_FI_SYSTEM_DRIVER_VERSION."""
    prom: Prometheus = stack["prometheus"]
    answer_dcgm_exporter_dashboard(prom, DCGM47_EXPORTER_DASHBOARD)
    eventually("utilization from 0 to 1", lambda: assert_answers(prom, "count(DCGM_FI_DEV_GPU_UTIL_RATIO >= 0 <= 1) == 20", "GPU Utilization"))
    assert prom.query("DCGM_FI_DEV_GPU_UTIL_RATIO > 0.01") and prom.query("DCGM_FI_DEV_GPU_UTIL > 1")
    (labelled,) = prom.query('count(DCGM_FI_DEV_GPU_TEMP_CELSIUS{UUID!="", device=~"nvidia[0-9]+", modelName!="", Hostname="127.0.0.1", DCGM_FI_SYSTEM_DRIVER_VERSION!="", DCGM_FI_DRIVER_VERSION=""})')
    assert labelled["value"][1] == "20"
    assert prom.query("count(DCGM_FI_DEV_GPU_TEMP_CELSIUS) == count(DCGM_FI_DEV_GPU_TEMP)")  # the two generations side by side
    groups = {group["name"]: group for group in prom.api("rules")["groups"]}
    unhealthy = [(rule["name"], rule.get("lastError")) for name in ("dcgm-exporter-compat", "dcgm-exporter-compat-dcgm47") for rule in groups[name]["rules"] if rule["health"] == "err"]
    assert not unhealthy, unhealthy


def test_prometheus_2_stores_the_names_with_colons_escaped(stack):
    """The servers negotiate like vLLM and SGLang: Debian's Prometheus 2.x asks for OpenMetrics
    without escaping=allow-utf-8 and gets every colon of a sample name as an underscore."""
    prom: Prometheus = stack["prometheus"]
    assert prom.api("status/buildinfo")["version"].startswith("2.")
    names = set(prom.api("label/__name__/values"))
    assert {"vllm_generation_tokens_total", "sglang_generation_tokens_total", "vllm_inter_token_latency_seconds_bucket", "vllm_time_per_output_token_seconds_bucket"} <= names
    assert not [name for name in names if name.startswith(("vllm:", "sglang:"))]


def app_dashboard_values(prom: Prometheus, stack: dict[str, Any], **chosen: str) -> tuple[dict[str, Any], dict[str, str], float]:
    dashboard = grafana_queries.load(DASHBOARDS / "gpu-efficiency-app-throughput.json")
    end = time.time()
    start = stack["started"] + 1
    values = {**grafana_queries.resolve_variables(dashboard, _label_values(prom, start, end), pick_all), **grafana_queries.builtins(end - start, SCRAPE_INTERVAL), **chosen}
    return dashboard, values, end


def panel_result(prom: Prometheus, dashboard: dict[str, Any], values: dict[str, str], title: str, end: float) -> list[list[dict[str, Any]]]:
    (panel,) = [p for p in grafana_queries.panels(dashboard) if p["title"] == title]
    return [prom.api("query_range", query=grafana_queries.interpolate(t["expr"], values), start=end - 20, end=end, step=1)["result"] for t in panel["targets"]]


def test_the_counter_variables_list_each_servers_stored_names_and_every_choice_has_data(stack):
    prom: Prometheus = stack["prometheus"]
    dashboard, values, end = app_dashboard_values(prom, stack)
    # Grafana opens on the first name in descending order: vLLM's, as Prometheus 2.x stores it.
    assert values["throughput"] == "vllm_generation_tokens_total" and values["requests"] == "vllm_request_success_total"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    label_values = _label_values(prom, end - 60, end)
    for name, expected in (("throughput", {"vllm_generation_tokens_total", "sglang_generation_tokens_total", "gpueff_app_units_total"}),
                           ("requests", {"vllm_request_success_total", "sglang_num_requests_total"})):
        match = grafana_queries.LABEL_VALUES.match(variables[name]["definition"])
        options = set(label_values(grafana_queries.interpolate(match.group("selector"), values), "__name__"))
        assert expected <= options, (name, options)
        for option in expected:
            chosen = {**values, name: option}
            for title in ("Throughput vs SM activity", "Request arrivals vs completions vs throughput", "Throughput per request"):
                answered = lambda chosen=chosen, title=title: all(panel_result(prom, dashboard, chosen, title, time.time()))  # noqa: E731
                wait_for(f"{title} with {name} = {option}", answered, PATIENCE, interval=0.5)


def test_serving_panels_show_each_server_current_names_first_older_ones_as_fallback(stack):
    prom: Prometheus = stack["prometheus"]
    dashboard, values, _ = app_dashboard_values(prom, stack)
    # The pre-V1 vLLM (time_per_output_token_seconds, gpu_cache_usage_perc) in its own namespace.
    legacy = {**values, "namespace": "legacy"}

    def servers_shown() -> None:
        end = time.time()
        for title in ("Time to first token", "Inter-token latency", "Queue", "KV-cache use"):
            for result in panel_result(prom, dashboard, values, title, end):
                assert {series["metric"].get("server") for series in result} == {"vLLM", "SGLang"}, title
            for result in panel_result(prom, dashboard, legacy, title, end):
                assert {series["metric"].get("server") for series in result} == {"vLLM"}, title

    eventually("each server's serving panels", servers_shown)


def test_application_rules_read_what_prometheus_2_stores(stack):
    """namespace:app_generation_tokens:rate5m and the arrivals rule, which AppThroughputFlatUnderRisingLoad
    needs, have data from the escaped names: vLLM and SGLang summed, the old vLLM in its namespace."""
    prom: Prometheus = stack["prometheus"]
    for rule in ("namespace:app_generation_tokens:rate5m", "namespace:app_requests_arrived:rate5m"):
        series = wait_for(rule, lambda rule=rule: {s["metric"].get("namespace", ""): float(s["value"][1]) for s in prom.query(rule)}.keys() >= {"", "legacy"} and prom.query(rule), PATIENCE)
        assert all(float(s["value"][1]) > 0 for s in series if rule.startswith("namespace:app_generation")), series
