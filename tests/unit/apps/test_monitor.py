"""App scraping: real HTTP endpoints serving real prometheus-client counters, and misbehaving ones."""

from __future__ import annotations

import logging
import re
import threading
import time
import tracemalloc
import urllib.request

import pytest
from conftest import free_port
from fakes.app_servers.server_metrics import Request, ServerMetrics, exposed_name, servers
from fakes.apps import App, answer_of, send, serving, slow, trickle, wsgi_serving
from prometheus_client import Counter, Histogram
from waiting import PATIENCE, wait_until

from gpueff.apps.counters import CounterIncrease
from gpueff.apps.derive import gpu_figures, select_gpus
from gpueff.apps.monitor import AppTracker, Scraper
from gpueff.apps.scrape import ScrapeError, escaped, fetch, read_counter
from gpueff.apps.settings import AppConfig, AppsSettings
from gpueff.attribution.kubernetes.owners import GpuOwners, PodOwner
from gpueff.attribution.owner import Owner
from gpueff.backends.replay import ReplayBackend
from gpueff.config.engine import ConfigError
from gpueff.poller import Poller
from gpueff.sample import DeviceInfo, GpuProcess, GpuSample
from gpueff.settings import load_config, parse_config
from gpueff.trace import load_trace


def app_config(url: str, **changes: object) -> AppConfig:
    """An app; a scrape that should succeed has PATIENCE to (a busy machine answers slowly)."""
    raw = {"name": "llm", "url": url, "counter": "vllm:generation_tokens_total", "unit": "tokens", "scrape_interval": f"{PATIENCE:g}s", "scrape_timeout": f"{PATIENCE:g}s", **changes}
    return parse_config({"apps": [raw]}).apps[0]


def vllm_like(registry):
    tokens = Counter("vllm:generation_tokens", "Generation tokens.", ["model_name"], registry=registry)
    requests = Counter("vllm:request_success", "Finished requests.", ["model_name", "finished_reason"], registry=registry)
    return tokens, requests


# ---- parsing: colons, _total, label matchers --------------------------------------------------


def test_colon_names_and_total_suffix_from_a_real_prometheus_client_counter():
    app = App(vllm_like)
    tokens, requests = app.metrics
    tokens.labels("llama").inc(1234)
    tokens.labels("mistral").inc(66)
    requests.labels("llama", "stop").inc(7)
    with serving(app.respond) as url:
        text = fetch(url, timeout=PATIENCE, max_bytes=1 << 20, names=["vllm:generation_tokens_total", "vllm:request_success_total"])
    assert any(line.startswith(b"vllm:generation_tokens_total{") for line in text.wanted)
    assert not any(line.startswith(b"vllm:generation_tokens_created{") for line in text.wanted)  # never kept
    # The exposed sample name and the family name (without _total) both select the counter, never _created.
    for name in ("vllm:generation_tokens_total", "vllm:generation_tokens"):
        series = read_counter(text, name, {})
        assert sorted(series.values()) == [66.0, 1234.0]
    assert list(read_counter(text, "vllm:generation_tokens_total", {"model_name": "llama"}).values()) == [1234.0]
    assert list(read_counter(text, "vllm:request_success_total", {"model_name": "llama"}).values()) == [7.0]
    with pytest.raises(ScrapeError, match=r'no series vllm:generation_tokens_total\{model_name="gpt"\}'):
        read_counter(text, "vllm:generation_tokens_total", {"model_name": "gpt"})


# What Prometheus 2.42 (Debian 12) asks for: OpenMetrics 1.0.0 without escaping=allow-utf-8.
PROMETHEUS_2_ACCEPT = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
# What Prometheus 3.x asks for by default (prometheus.io, "Content negotiation"): UTF-8 names.
PROMETHEUS_3_ACCEPT = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"


@pytest.mark.parametrize("server", sorted(servers()))
def test_every_recorded_server_joins_in_either_spelling(server):
    """Each server's recorded families (tests/support/fakes/app_servers/server_metrics.yml) in a real prometheus_client
    registry behind its own negotiation: the work and requests counters join under the name the
    server writes (Prometheus 3.x keeps it) and under the name Prometheus 2.x stores (colons as
    underscores), from the exporter's own scrape and from the answers Prometheus 2.x and 3.x get."""
    metrics = ServerMetrics(server)
    for _ in range(3):
        request = Request(metrics, prompt_tokens=4, clock=time.monotonic)
        request.start()
        for _ in range(5):
            request.token()
        request.finish()
    joined = {"units": 15.0, "completions": 3.0}
    with wsgi_serving(metrics.wsgi_app()) as url:
        pages = {}
        for prometheus, accept in (("2.x", PROMETHEUS_2_ACCEPT), ("3.x", PROMETHEUS_3_ACCEPT)):
            with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept}), timeout=PATIENCE) as response:
                assert response.headers["Content-Type"].startswith("application/openmetrics-text")
                pages[prometheus] = response.read().decode()
        for role, expected in joined.items():
            metric = metrics.metric(role)
            if metric is None:
                continue
            name = exposed_name(metric)
            if ":" in name:  # the negotiation really escapes for 2.x, and only for 2.x
                assert f"\n{escaped(name)}" in pages["2.x"] and f"\n{name}" not in pages["2.x"]
                assert f"\n{name}" in pages["3.x"] and f"\n{escaped(name)}" not in pages["3.x"]
            for configured in (name, escaped(name)):
                answers = [fetch(url, timeout=PATIENCE, max_bytes=1 << 20, names=[configured])] + [answer_of(page, configured) for page in pages.values()]
                for answer in answers:
                    assert sum(read_counter(answer, configured, {}).values()) == expected, (server, role, configured)


def test_the_configured_spelling_wins_where_a_page_has_both():
    text = "vllm:generation_tokens_total 5\nvllm_generation_tokens_total 7\n"
    for name, value in (("vllm:generation_tokens_total", 5.0), ("vllm_generation_tokens_total", 7.0)):
        assert list(read_counter(answer_of(text, name), name, {}).values()) == [value]


def test_counter_without_total_suffix_and_histogram_sum():
    # Triton and TGI expose counters without _total; prometheus-client 0.26 renames such samples to
    # foo_total while parsing, so both spellings must still find them.
    text = (
        "# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="resnet",version="1"} 40\n'
        'nv_inference_count{model="bert",version="1"} 2\n'
        "# TYPE tgi_request_generated_tokens histogram\n"
        'tgi_request_generated_tokens_bucket{le="+Inf"} 3\n'
        "tgi_request_generated_tokens_sum 96\n"
        "tgi_request_generated_tokens_count 3\n"
    )
    assert list(read_counter(answer_of(text, "nv_inference_count"), "nv_inference_count", {"model": "resnet"}).values()) == [40.0]
    assert sum(read_counter(answer_of(text, "nv_inference_count_total"), "nv_inference_count_total", {}).values()) == 42.0
    assert list(read_counter(answer_of(text, "tgi_request_generated_tokens_sum"), "tgi_request_generated_tokens_sum", {}).values()) == [96.0]

    app = App(lambda registry: Histogram("tgi_request_generated_tokens", "Generated tokens per request.", registry=registry))
    app.metrics.observe(10)
    app.metrics.observe(22)
    with serving(app.respond) as url:
        assert list(read_counter(fetch(url, 2, 1 << 20, ["tgi_request_generated_tokens_sum"]), "tgi_request_generated_tokens_sum", {}).values()) == [32.0]


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"<html><body>Not found</body></html>\n", "not Prometheus text format"),
        (b"hello world\n", "not Prometheus text format"),
        (b'foo{a=b} 1\n', "not Prometheus text format"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"vllm:generation_tokens_total NaN\n", "not a counter's"),
        (b"vllm:generation_tokens_total -3\n", "not a counter's"),
        (b"other_metric_total 5\n", "no series vllm:generation_tokens_total among the 1 lines of the response"),
    ],
)
def test_garbage_is_a_failed_scrape(body, reason):
    with serving(lambda handler: send(handler, body)) as url:
        reading = Scraper(app_config(url)).scrape_once()
    assert reading.units is None and reason in reading.error


# ---- fetching: down, slow, oversized, HTTP errors -------------------------------------------


def test_down_app_fails_fast_and_logs_only_state_changes(caplog):
    port = free_port()
    scraper = Scraper(app_config(f"http://127.0.0.1:{port}/metrics"))
    caplog.set_level(logging.INFO, logger="gpueff.apps")
    for _ in range(3):
        reading = scraper.scrape_once()
        assert reading.units is None and "connection refused" in reading.error
    assert scraper.errors_total == 3
    app = App(vllm_like)
    app.metrics[0].labels("llama").inc(5)
    with serving(app.respond, port=port):
        for _ in range(2):
            assert scraper.scrape_once().units == {(("model_name", "llama"),): 5.0}
    assert scraper.scrape_once().error is not None
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 3, messages  # down, up again, down: one line per change, not per scrape
    assert 'app "llm" is down' in messages[0] and "connection refused" in messages[0]
    assert 'app "llm" is up again' in messages[1]
    assert caplog.records[0].levelno == logging.WARNING


def test_slow_app_times_out_within_the_timeout():
    """The app answers only when the test ends: a scrape that waited for it would fail otherwise."""
    stop = threading.Event()
    try:
        with serving(slow(PATIENCE, stop)) as url:
            started = time.monotonic()
            reading = Scraper(app_config(url, scrape_timeout="300ms")).scrape_once()
            took = time.monotonic() - started
    finally:
        stop.set()
    assert "no complete answer within scrape_timeout (0.3s)" in reading.error
    assert took >= 0.3 - 0.01  # not given up before the timeout (a busy machine only adds to it)


def test_trickling_app_is_cut_at_the_timeout_not_per_read():
    """One byte every 50 ms until the test ends: each read is well within the timeout, so only a
    whole-exchange deadline ends the scrape with a timeout (per-read timeouts would read on until the
    app stops, then fail on the body)."""
    stop = threading.Event()
    try:
        with serving(trickle(stop, limit=PATIENCE)) as url:
            reading = Scraper(app_config(url, scrape_timeout="400ms")).scrape_once()
    finally:
        stop.set()
    assert "no complete answer within scrape_timeout (0.4s)" in reading.error


@pytest.mark.parametrize("with_length", [True, False])
def test_oversized_response_is_refused(with_length):
    body = b"vllm:generation_tokens_total 1\n" + b"# padding\n" * 20000
    with serving(lambda handler: send(handler, body, length=with_length)) as url:
        refused = Scraper(app_config(url, max_response_bytes=100_000)).scrape_once()
        accepted = Scraper(app_config(url, max_response_bytes=len(body))).scrape_once()
    assert "over max_response_bytes (100000)" in refused.error
    assert accepted.error is None and accepted.units == {(): 1.0}


def test_http_error_status_is_a_failed_scrape():
    with serving(lambda handler: send(handler, b"nope", status=503)) as url:
        reading = Scraper(app_config(url)).scrape_once()
    assert reading.error == "HTTP status 503 Service Unavailable"


def test_missing_requests_counter_keeps_the_app_up(caplog):
    app = App(vllm_like)
    app.metrics[0].labels("llama").inc(3)
    caplog.set_level(logging.INFO, logger="gpueff.apps")
    with serving(app.respond) as url:
        scraper = Scraper(app_config(url, requests_counter="vllm:no_such_counter_total"))
        readings = [scraper.scrape_once() for _ in range(2)]
    assert all(reading.error is None and reading.requests is None for reading in readings)
    assert [record.getMessage() for record in caplog.records if "requests_counter" in record.getMessage()][0].startswith('app "llm": requests_counter: no series vllm:no_such_counter_total')
    assert len(caplog.records) == 1


# ---- counters ------------------------------------------------------------------------------


def test_counter_reset_per_series_like_rate():
    increase = CounterIncrease()
    a, b, c = (("model", "a"),), (("model", "b"),), (("model", "c"),)
    assert increase.add({a: 100, b: 50}) == 0  # the first reading is only a baseline
    assert increase.add({a: 160, b: 70}) == 80
    # a was reset (the app restarted) and counted 30 since; b went on; c is new: baseline only.
    assert increase.add({a: 30, b: 90, c: 1000}) == 30 + 20
    assert increase.add({a: 40, b: 90, c: 1005}) == 10 + 0 + 5
    assert increase.total == 80 + 50 + 15 and increase.resets == 1


def test_counter_reset_through_a_real_restarted_app():
    app = App(vllm_like)
    app.metrics[0].labels("llama").inc(100)
    with serving(app.respond) as url:
        scraper = Scraper(app_config(url))
        increase = CounterIncrease()
        increase.add(scraper.scrape_once().units)
        app.metrics[0].labels("llama").inc(250)
        assert increase.add(scraper.scrape_once().units) == 250
        app.restart()  # a new process: the counter starts again from 0
        app.metrics[0].labels("llama").inc(40)
        assert increase.add(scraper.scrape_once().units) == 40
    assert increase.total == 290 and increase.resets == 1


# ---- which GPUs ----------------------------------------------------------------------------


def _sample(index: int, *names: str) -> GpuSample:
    device = DeviceInfo(index=index, uuid=f"GPU-{index:04d}", name="NVIDIA H200")
    processes = tuple(GpuProcess(1000 + n, name) for n, name in enumerate(names))
    return GpuSample(device=device, timestamp=0.0, processes=processes)


def test_gpu_selection_by_index_uuid_process_or_all():
    samples = [_sample(0, "/usr/bin/python3"), _sample(1, "/opt/tritonserver/bin/tritonserver"), _sample(2), _sample(3, "VLLM::EngineCore")]
    owned = {pid: Owner("user", "998") for pid in range(1000, 1004)}
    select = lambda **given: [s.device.index for s in select_gpus(app_config("http://127.0.0.1:1/metrics", **given), samples, process_owners=owned)]  # noqa: E731
    assert select() == [0, 1, 2, 3]
    assert select(gpus=[2, "GPU-0000"]) == [0, 2]
    assert select(process="tritonserver$", user=998) == [1]
    assert select(process="(?i)vllm", user=998) == [3]
    assert select(gpus=[7]) == []
    no_processes = [GpuSample(device=s.device, timestamp=0.0) for s in samples]  # replay: processes unknown
    assert select_gpus(app_config("http://127.0.0.1:1/metrics", process="python", user=998), no_processes, process_owners=owned) == []


def test_a_process_join_is_bound_to_its_user_not_to_a_name_anyone_picks():
    """Before, any tenant's process named /home/tenant/tritonserver joined the app ``process:
    tritonserver`` (its units per joule fell from 1.45 to 1.23): now only user 998's processes
    outside pods and Slurm jobs do, and one whose owner cannot be read joins nothing."""
    names = ["/opt/tritonserver/bin/tritonserver", "/home/tenant/tritonserver", "/opt/tritonserver/bin/tritonserver", "/opt/tritonserver/bin/tritonserver"]
    samples = [GpuSample(device=DeviceInfo(index=n, uuid=f"GPU-{n}", name="NVIDIA H200"), timestamp=0.0, processes=(GpuProcess(10 + n, name),)) for n, name in enumerate(names)]
    owners = {10: Owner("user", "998"), 11: Owner("user", "1001"), 12: Owner("pod", "uid-of-some-pod")}  # GPU 3's process: owner unknown
    app = app_config("http://127.0.0.1:1/metrics", process="tritonserver", user=998)
    assert [s.device.index for s in select_gpus(app, samples, process_owners=owners)] == [0]
    assert select_gpus(app, samples) == []  # no owners known: nothing joins, never everything


@pytest.mark.parametrize(("entry", "error"), [
    ({"process": "tritonserver"}, "'apps[0].user': required with process"),
    ({"user": 998}, "'apps[0].user': goes with process only"),
    ({"process": "t", "user": -1}, "'apps[0].user': expected a Unix user id"),
    ({"process": "t", "user": "998"}, "'apps[0].user': expected a Unix user id"),
    ({"process": "t", "user": True}, "'apps[0].user': expected a Unix user id"),
    ({"process": "t", "user": 4294967295}, "'apps[0].user': expected a Unix user id"),
])
def test_a_process_app_names_its_user(entry: dict, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        parse_config({"apps": [{**GOOD, "url": "http://127.0.0.1:1/metrics", **entry}]})


def test_gpu_selection_by_kubernetes_pod():
    samples = [_sample(0), _sample(1), _sample(2)]
    owners = {
        "GPU-0000": GpuOwners(pods=(PodOwner("serving", "vllm-0", "engine"),)),
        "GPU-0001": GpuOwners(pods=(PodOwner("serving", "vllm-1", "engine"), PodOwner("batch", "train-7", "worker"))),  # time-sliced
        "GPU-0002": GpuOwners(pods=(PodOwner("batch", "train-7", "worker"),)),
    }
    select = lambda pod, held=owners: [s.device.index for s in select_gpus(app_config("http://127.0.0.1:1/metrics", pod=pod), samples, held)]  # noqa: E731
    assert select("^serving/vllm-") == [0, 1]
    assert select("^batch/train") == [1, 2]
    assert select("^serving/vllm-", held={}) == []  # no attribution: no GPU, never all of them


@pytest.mark.parametrize("pattern", ["vllm-", "serving/vllm-", "^serving/vllm-|train", "^serving/?vllm", "^(serving|ml)/vllm-", ".*/vllm-"])
def test_a_pod_pattern_that_can_match_another_namespace_is_refused(pattern: str) -> None:
    """Tenants name their own pods: with the pattern serving/vllm- (search, unanchored) the pod
    ml-serving/vllm-evil of another team's namespace joined its GPU to the app, whose units per
    joule and MFU then counted that GPU's power and time. A pattern must name its one namespace."""
    samples = [_sample(0), _sample(1)]
    owners = {"GPU-0000": GpuOwners(pods=(PodOwner("serving", "vllm-0", "engine"),)), "GPU-0001": GpuOwners(pods=(PodOwner("ml-serving", "vllm-evil", "x"),))}
    assert [s.device.index for s in select_gpus(app_config("http://127.0.0.1:1/metrics", pod="^serving/vllm-"), samples, owners)] == [0]
    with pytest.raises(ConfigError, match=re.escape("'apps[0].pod': must start with ^ and one namespace written out, then /")):
        app_config("http://127.0.0.1:1/metrics", pod=pattern)


@pytest.mark.parametrize("pattern", ["^serving/vllm-", "\\Aserving/", "^serving/(vllm|tgi)-", "^serving/[|a]", "^serving/a\\|b"])
def test_a_pod_pattern_of_one_namespace_is_taken(pattern: str) -> None:
    assert app_config("http://127.0.0.1:1/metrics", pod=pattern).pod == pattern


def test_the_poller_hands_pod_owners_to_the_apps(trace_paths):
    config = parse_config({"apps": [{**GOOD, "url": "http://127.0.0.1:1/metrics", "pod": "^serving/"}]})
    backend = ReplayBackend([load_trace(trace_paths["matmul_8192"]), load_trace(trace_paths["idle"])])
    poller = Poller(backend, config)
    busy_uuid = backend.start()[0].uuid

    class Attribution:  # what the kubelet would say: the matmul GPU belongs to serving/llm-0
        def owners(self, *_):
            return {busy_uuid: GpuOwners(pods=(PodOwner("serving", "llm-0", "engine"),))}

        def health(self):
            return None

        def kubelet(self):  # what the attribution doctor reads: no kubelet call made
            return None

        def close(self):
            pass

    poller.attributor = Attribution()
    snapshot = poller.poll_once()
    assert [device.uuid for device in snapshot.apps[0].gpus] == [busy_uuid]


# ---- config errors -------------------------------------------------------------------------

GOOD = {"name": "llm", "url": "http://127.0.0.1:8000/metrics", "counter": "vllm:generation_tokens_total", "unit": "tokens"}


@pytest.mark.parametrize(
    "apps, message",
    [
        ([GOOD, {**GOOD, "name": "tgi", "url": "ftp://host/metrics"}], "'apps[1].url': expected an http:// or https:// URL"),
        ([GOOD, {**GOOD, "url": "http://127.0.0.1:9/metrics"}], "'apps[1].name': 'llm' is already used by apps[0]"),
        ([{k: v for k, v in GOOD.items() if k != "counter"}], "'apps[0].counter': required"),
        ([{**GOOD, "counter": "bad name"}], "'apps[0].counter': expected a Prometheus metric name"),
        ([{**GOOD, "unit": "Tokens/s"}], "'apps[0].unit': expected a lowercase word"),
        ([{**GOOD, "scrape_timeout": "10s"}], "'apps[0].scrape_timeout': must not exceed scrape_interval (5s), got 10s"),
        ([{**GOOD, "gpus": [0], "process": "vllm"}], "'apps[0].process': give only one of gpus, process and pod, not gpus and process"),
        ([{**GOOD, "process": "vllm", "pod": "^serving/"}], "'apps[0].pod': give only one of gpus, process and pod, not process and pod"),
        ([{**GOOD, "process": "vllm("}], "'apps[0].process': not a valid regular expression"),
        ([{**GOOD, "gpus": [-1]}], "'apps[0].gpus': expected GPU indices"),
        ([{**GOOD, "gpus": []}], "'apps[0].gpus': expected a non-empty list"),
        ([{**GOOD, "labels": {"model-name": "x"}}], "'apps[0].labels': expected label name"),
        ([{**GOOD, "flops_per_unit": 0}], "'apps[0].flops_per_unit': expected a number above 0"),
        ([{**GOOD, "precision": "fp4"}], "'apps[0].precision': expected one of"),
        ([{**GOOD, "max_response_bytes": "1MB"}], "'apps[0].max_response_bytes': expected a whole number above 0"),
        ([{**GOOD, "pod": "^serving/(vllm"}], "'apps[0].pod': "),
        ([GOOD, "llm"], "'apps[1]': expected a mapping, got str"),
        ({"llm": GOOD}, "'apps': expected a list, got dict"),
    ],
)
def test_config_errors_name_the_app_and_key(apps, message):
    with pytest.raises(ConfigError) as raised:
        parse_config({"apps": apps})
    assert message in str(raised.value)


def test_config_file_error_names_the_file(tmp_path):
    path = tmp_path / "gpueff.yml"
    path.write_text("apps:\n  - name: llm\n    url: http://127.0.0.1:8000/metrics\n    counter: vllm:generation_tokens_total\n    unit: tokens\n    scrape_interval: 5\n")
    with pytest.raises(ConfigError, match=rf"config file {path}: 'apps\[0\].scrape_interval': expected a duration"):
        load_config(path)


def test_config_defaults():
    app = parse_config({"apps": [GOOD]}).apps[0]
    assert (app.scrape_interval, app.scrape_timeout, app.max_response_bytes, app.gpus, app.process, app.labels) == (5.0, 2.0, 16 * 1024 * 1024, None, None, {})
    assert parse_config({}).apps == ()


def test_flops_per_unit_in_yaml_scientific_notation(tmp_path):
    # PyYAML (YAML 1.1) reads 1.6e10 as a string; it must still mean 1.6e10 FLOP.
    path = tmp_path / "gpueff.yml"
    path.write_text("apps:\n  - {name: llm, url: 'http://127.0.0.1:8000/metrics', counter: x_total, unit: tokens, flops_per_unit: 1.6e10}\n")
    assert load_config(path).apps[0].flops_per_unit == 1.6e10
    with pytest.raises(ConfigError, match=r"'apps\[0\].flops_per_unit': expected a number, got 'lots'"):
        parse_config({"apps": [{**GOOD, "flops_per_unit": "lots"}]})


def test_an_absurd_or_infinite_counter_never_reaches_the_totals(trace_paths):
    """Issue 14 item 5: a counter alternating 1.79e308 and 0 once left units_total and MFU at +Inf."""
    now = [1000.0]
    values = iter(["0", "1.79e308", "0", "1.79e308", "0", "5", "1e400", "12"])
    with serving(lambda handler: send(handler, f"x_total {next(values)}\n".encode())) as url:
        config = parse_config({"apps": [{**GOOD, "url": url, "counter": "x_total", "flops_per_unit": 1e300, "price_per_gpu_hour": 2}]})
        backend = ReplayBackend([load_trace(trace_paths["matmul_8192"])], clock=lambda: now[0])
        backend.start()
        poller = Poller(backend, config, clock=lambda: now[0])
        states = []
        for _ in range(8):
            poller.apps.scrapers[0].scrape_once()
            states.append(poller.poll_once().apps[0])
            now[0] += 5.0
    assert [state.units_total for state in states] == [0, 0, 0, 0, 0, 5, None, 12]  # the jumps to 1.79e308 are dropped
    assert not states[6].up  # 1e400 reads as +Inf: not a counter's value, a failed scrape
    for state in states:
        for figure in (state.throughput, state.model_flops_utilization, state.units_per_joule, state.cost_per_million_units):
            assert figure is None or figure < float("inf")


def test_a_scraper_thread_survives_any_exception(caplog):
    app = App(vllm_like)
    app.metrics[0].labels("llama").inc(5)
    with serving(app.respond) as url:
        scraper = Scraper(app_config(url))
        real = scraper.scrape_once
        failures = iter([MemoryError("no room"), OverflowError("timeout value is too large")])

        def flaky():
            failure = next(failures, None)
            if failure is not None:
                raise failure
            return real()

        scraper.scrape_once = flaky
        caplog.set_level(logging.ERROR, logger="gpueff.apps")
        scraper.start()
        try:
            wait_until(lambda: scraper.latest is not None, "the scrape after the two failures")
        finally:
            scraper.stop()
            scraper.join(PATIENCE)
    assert scraper.latest is not None and scraper.latest.units == {(("model_name", "llama"),): 5.0}
    assert scraper.errors_total == 2
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == ['app "llm": the scraper failed'] * 2


def test_an_app_that_stays_down_keeps_no_per_gpu_memory_per_poll():
    app = app_config("http://127.0.0.1:1/metrics", gpus=list(range(64)))
    tracker, scraper = AppTracker(app), Scraper(app)  # never scraped: the app stays down
    samples = [_sample(index) for index in range(64)]
    settings = AppsSettings()
    tracemalloc.start()
    try:
        for poll in range(200):
            tracker.update(scraper, samples, float(poll), settings)
        before = tracemalloc.get_traced_memory()[0]
        for poll in range(200, 1200):
            tracker.update(scraper, samples, float(poll), settings)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1000 * 300  # a few hundred bytes a poll; a tuple of 64 devices per poll would be 600+


@pytest.mark.parametrize(("precision", "per_gpu"), [("bf16", 989.4e12), ("fp8", 1978.9e12), ("tf32", 494.7e12), ("int8", 1978.9e12), ("fp64", 66.9e12), ("fp32", 66.9e12)])
def test_model_flops_utilization_divides_by_the_peak_at_the_apps_precision(precision, per_gpu):
    """An FP8 server's MFU against the FP8 peak, not BF16's (which would read it twice too high)."""
    h200 = [GpuSample(device=DeviceInfo(index=i, uuid=f"GPU-{i}", name="NVIDIA H200"), timestamp=1.0) for i in range(2)]
    app = parse_config({"apps": [{**GOOD, "flops_per_unit": 1e9, "precision": precision}]}).apps[0]
    assert gpu_figures(app, h200, 1.0, {}).peak_flops == pytest.approx(2 * per_gpu)
