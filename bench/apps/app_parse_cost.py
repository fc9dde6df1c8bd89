"""CPU time, wall time and peak memory of reading one counter out of large but allowed (under the
default max_response_bytes of 16 MiB) app responses, served by a real loopback HTTP server and
fetched as the scraper does:

- ``series``: 16 MB of 279k histogram series around the counter (issue 14);
- ``junk``: 16 MiB of ``ab`` lines around the counter (issue 25);
- ``label``: one 16 MiB label value of another metric, then the counter (issue 25);
- ``wanted-label``: the counter, then a series of it with one 16 MiB label value (issue 25): read
  before, refused as soon as the line passes 64 KiB now;
- ``wanted-4MB``: 10,000 series of the counter with 340-byte label values, just under the 4 MiB of
  wanted lines a scrape may keep: the most parsing one scrape can cost.

    python bench/apps/app_parse_cost.py [--old PATH_TO_OLD_SCRAPE_PY]

With --old, the same responses are also read by an older gpueff/apps/scrape.py (e.g. from
``git show <commit>:gpueff/apps/scrape.py > /tmp/old_scrape.py``), for a before/after figure.
With --latency, the ``junk`` answer is scraped over and over on a thread while the exporter's own
HTTP server in the same process answers ``GET /metrics`` every 5 ms for 6 s: that scrape's
latency percentiles and worst case show how long the app's parse held the GIL.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))

from fakes.apps import send, serving  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: the shared harness
from harness import keepalive_latencies  # noqa: E402

NAME = "vllm:generation_tokens_total"
COUNTER = f'# HELP {NAME} Generation tokens.\n# TYPE {NAME} counter\n{NAME}{{model_name="llama"}} 123456\n'.encode()
SIXTEEN_MIB = 16 * 1024 * 1024


def responses() -> dict[str, bytes]:
    lines = ["# HELP app_latency_seconds Per-request latency buckets.", "# TYPE app_latency_seconds histogram"]
    lines += [f'app_latency_seconds_bucket{{route="/v1/{n // 20}",le="{n % 20}"}} {n}' for n in range(279_000)]
    junk = b"ab\n" * ((SIXTEEN_MIB - len(COUNTER)) // 6)
    return {
        "series": COUNTER + ("\n".join(lines) + "\n").encode(),
        "junk": junk + COUNTER + junk,
        "label": b'other{label="' + b"v" * (SIXTEEN_MIB - 100 - len(COUNTER)) + b'"} 1\n' + COUNTER,
        "wanted-4MB": "".join(f'{NAME}{{model_name="{"m" * 340}",n="{n}"}} 12.3456\n' for n in range(10_000)).encode(),
        "wanted-label": COUNTER + f'{NAME}{{model_name="'.encode() + b"v" * (SIXTEEN_MIB - 100 - len(COUNTER)) + b'"} 1\n',
    }


def read(module: ModuleType, url: str) -> str:
    """How the scrape ended: the counter's total, or the error it failed with."""
    try:
        if "names" in inspect.signature(module.fetch).parameters:
            series = module.read_counter(module.fetch(url, 30.0, 32 * 1024 * 1024, [NAME]), NAME, {})
        else:  # before issue 25
            series = module.read_counter(module.fetch(url, 30.0, 32 * 1024 * 1024), NAME, {})
    except module.ScrapeError as error:
        return f"failed: {error}"
    return f"read {len(series)} series, total {sum(series.values()):g}"


def measure(module: ModuleType, url: str, repeats: int = 3) -> tuple[str, float, float, float]:
    """How it ended, the best CPU and wall seconds of fetch + read_counter, and the peak traced
    memory in MB of one run."""
    best_cpu = best_wall = float("inf")
    for _ in range(repeats):
        started, wall = time.process_time(), time.perf_counter()
        outcome = read(module, url)
        best_cpu = min(best_cpu, time.process_time() - started)
        best_wall = min(best_wall, time.perf_counter() - wall)
    tracemalloc.start()
    read(module, url)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return outcome, best_cpu, best_wall, peak


def metrics_latency(module: ModuleType, url: str, seconds: float = 6.0) -> str:
    """/metrics latency of the exporter's server in this process while ``module`` scrapes ``url``."""
    from gpueff.web.payload import Payload
    from gpueff.web.server import WebServer

    page = b"m 1\n" * 1000
    sys.setswitchinterval(0.0005)  # as the daemon's poller sets it
    web = WebServer("127.0.0.1:0", lambda gzip: Payload((page,), None), lambda: True, "bench")
    web.start()
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            read(module, url)

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    latencies = keepalive_latencies(web.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", page[-12:], seconds, 0.005)
    stop.set()
    scraper.join(60)
    web.close()
    return f"/metrics p50 {latencies[len(latencies) // 2] * 1e3:.1f} ms, p99 {latencies[int(len(latencies) * 0.99)] * 1e3:.1f} ms, worst {latencies[-1] * 1e3:.1f} ms ({len(latencies)} scrapes)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="an older scrape.py to compare with")
    parser.add_argument("--latency", action="store_true", help="/metrics latency while the junk answer is scraped")
    args = parser.parse_args()
    from gpueff.apps import scrape

    modules = [("this tree", scrape)]
    if args.old:
        spec = importlib.util.spec_from_file_location("old_scrape", args.old)
        assert spec and spec.loader
        old = importlib.util.module_from_spec(spec)
        sys.modules["old_scrape"] = old  # dataclasses look their module up
        spec.loader.exec_module(old)
        modules.insert(0, (f"old ({args.old})", old))
    if args.latency:
        body = responses()["junk"]
        with serving(lambda handler: send(handler, body)) as url:
            for name, module in modules:
                print(f"{name}: {metrics_latency(module, url)}")
        return
    for case, body in responses().items():
        lines = body.count(b"\n")
        print(f"{case}: {len(body) / 1e6:.1f} MB, {lines} lines")
        with serving(lambda handler, body=body: send(handler, body)) as url:
            for name, module in modules:
                outcome, cpu, wall, peak = measure(module, url)
                print(f"  {name}: {cpu:.2f} s CPU, {wall:.2f} s wall per scrape, peak {peak:.1f} MB allocated; {outcome[:70]}")


if __name__ == "__main__":
    main()
