"""Issue 14 item 7: CPU time and peak memory of reading one counter out of a large but allowed (under the default max_response_bytes) app
response (16 MB, 279k series), served by a real loopback HTTP server and fetched as the scraper does.

    python bench/app_parse_cost.py [--old PATH_TO_OLD_SCRAPE_PY]

With --old, the same response is also read by an older exporter/apps/scrape.py (e.g. from
``git show <commit>:exporter/apps/scrape.py > /tmp/old_scrape.py``), for a before/after figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import tracemalloc
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from apps_servers import send, serving  # noqa: E402


def response(series: int = 279_000) -> bytes:
    lines = ["# HELP vllm:generation_tokens_total Generation tokens.", "# TYPE vllm:generation_tokens_total counter", 'vllm:generation_tokens_total{model_name="llama"} 123456']
    lines += ["# HELP app_latency_seconds Per-request latency buckets.", "# TYPE app_latency_seconds histogram"]
    lines += [f'app_latency_seconds_bucket{{route="/v1/{n // 20}",le="{n % 20}"}} {n}' for n in range(series)]
    return ("\n".join(lines) + "\n").encode()


def measure(module: ModuleType, url: str, repeats: int = 3) -> tuple[float, float]:
    """Best CPU seconds of fetch + read_counter, and the peak traced memory in MB of one run."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        text = module.fetch(url, 30.0, 32 * 1024 * 1024)
        assert module.read_counter(text, "vllm:generation_tokens_total", {}) == {(("model_name", "llama"),): 123456.0}
        best = min(best, time.process_time() - started)
    tracemalloc.start()
    module.read_counter(module.fetch(url, 30.0, 32 * 1024 * 1024), "vllm:generation_tokens_total", {})
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return best, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="an older scrape.py to compare with")
    args = parser.parse_args()
    body = response()
    lines = body.count(b"\n")
    print(f"response: {len(body) / 1e6:.1f} MB, {lines} lines")
    from exporter.apps import scrape

    modules = [("this tree", scrape)]
    if args.old:
        spec = importlib.util.spec_from_file_location("old_scrape", args.old)
        assert spec and spec.loader
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        modules.insert(0, (f"old ({args.old})", old))
    with serving(lambda handler: send(handler, body)) as url:
        for name, module in modules:
            cpu, peak = measure(module, url)
            print(f"{name}: {cpu:.2f} s CPU per scrape, peak {peak:.0f} MB allocated")


if __name__ == "__main__":
    main()
