"""A small text-generation server for the end-to-end tests, instrumented like vLLM.

It really serves requests: ``POST /v1/completions`` with ``{"prompt": "...", "max_tokens": N}``
generates N words, one per ``--token-delay``, and answers them as JSON. Its ``/metrics``
(prometheus_client) carries vLLM's metric names, so the application-throughput dashboard's
default expressions and the ``gpu-efficiency.application`` recording rules read it unchanged:
``vllm:generation_tokens_total``, ``vllm:prompt_tokens_total``, ``vllm:request_success_total``,
``vllm:num_requests_running``, ``vllm:num_requests_waiting``, the latency histograms
``vllm:time_to_first_token_seconds`` and ``vllm:time_per_output_token_seconds``, and
``vllm:gpu_cache_usage_perc`` (here: the share of generation slots in use).

    python tests/apps/token_server.py --listen 127.0.0.1:8000 [--max-concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

WORDS = ("the", "gpu", "is", "busy", "but", "are", "its", "sms", "working", "today")
MAX_TOKENS = 4096
MAX_BODY_BYTES = 1 << 20


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.generation_tokens = Counter("vllm:generation_tokens", "Generated tokens.", registry=self.registry)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens processed.", registry=self.registry)
        self.request_success = Counter("vllm:request_success", "Requests finished.", ["finished_reason"], registry=self.registry)
        self.running = Gauge("vllm:num_requests_running", "Requests being generated now.", registry=self.registry)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting for a generation slot.", registry=self.registry)
        self.time_to_first_token = Histogram("vllm:time_to_first_token_seconds", "Time from arrival to the first generated token.", registry=self.registry)
        self.time_per_output_token = Histogram("vllm:time_per_output_token_seconds", "Time between generated tokens.", registry=self.registry)
        self.cache_usage = Gauge("vllm:gpu_cache_usage_perc", "Share of the KV cache in use, 0..1 (here: of the generation slots).", registry=self.registry)
        self.request_success.labels(finished_reason="length")


class Generator:
    """Generates words; at most ``max_concurrency`` requests at a time, the rest wait."""

    def __init__(self, metrics: Metrics, max_concurrency: int, token_delay: float) -> None:
        self.metrics = metrics
        self.slots = threading.BoundedSemaphore(max_concurrency)
        self.max_concurrency = max_concurrency
        self.token_delay = token_delay
        self.in_use = 0
        self.lock = threading.Lock()

    def _hold(self, delta: int) -> None:
        with self.lock:
            self.in_use += delta
            self.metrics.cache_usage.set(self.in_use / self.max_concurrency)

    def generate(self, prompt: str, max_tokens: int) -> str:
        arrived = time.monotonic()
        self.metrics.waiting.inc()
        with self.slots:
            self.metrics.waiting.dec()
            self.metrics.running.inc()
            self._hold(1)
            try:
                self.metrics.prompt_tokens.inc(len(prompt.split()))
                words = []
                last = arrived
                for index in range(max_tokens):
                    if self.token_delay:
                        time.sleep(self.token_delay)
                    words.append(WORDS[(len(prompt) + index) % len(WORDS)])
                    self.metrics.generation_tokens.inc()
                    now = time.monotonic()
                    (self.metrics.time_per_output_token if index else self.metrics.time_to_first_token).observe(now - last)
                    last = now
                self.metrics.request_success.labels(finished_reason="length").inc()
                return " ".join(words)
            finally:
                self._hold(-1)
                self.metrics.running.dec()


def make_handler(generator: Generator, metrics: Metrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

        def send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, status: int, message: str) -> None:
            self.send(status, json.dumps({"error": message}).encode(), "application/json")

        def do_GET(self) -> None:
            if self.path == "/metrics":
                self.send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif self.path == "/health":
                self.send(200, b"ok\n", "text/plain")
            else:
                self.error(404, f"no such path {self.path!r}: try POST /v1/completions or GET /metrics")

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self.error(404, f"no such path {self.path!r}: try POST /v1/completions")
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                if not 0 < length <= MAX_BODY_BYTES:
                    raise ValueError(f"body must be 1 to {MAX_BODY_BYTES} bytes, got {length}")
                request = json.loads(self.rfile.read(length))
                prompt = request.get("prompt", "")
                max_tokens = request.get("max_tokens", 16)
                if not isinstance(prompt, str):
                    raise ValueError("'prompt' must be a string")
                if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS:
                    raise ValueError(f"'max_tokens' must be an integer from 1 to {MAX_TOKENS}, got {max_tokens!r}")
            except (ValueError, AttributeError) as error:
                self.error(400, str(error))
                return
            text = generator.generate(prompt, max_tokens)
            body = {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "length"}], "usage": {"completion_tokens": max_tokens}}
            self.send(200, json.dumps(body).encode(), "application/json")

    return Handler


def parse_listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=parse_listen, required=True, help="HOST:PORT to serve on")
    parser.add_argument("--max-concurrency", type=int, default=4, help="requests generated at once (default 4)")
    parser.add_argument("--token-delay", type=float, default=0.001, help="seconds per generated token (default 0.001)")
    args = parser.parse_args(argv)
    metrics = Metrics()
    server = ThreadingHTTPServer(args.listen, make_handler(Generator(metrics, args.max_concurrency, args.token_delay), metrics))
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"token_server listening on {args.listen[0]}:{server.server_address[1]}", flush=True)
    server.serve_forever()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
