"""A small text-generation server for the end-to-end tests, instrumented like a real inference server.

It really serves requests: ``POST /v1/completions`` with ``{"prompt": "...", "max_tokens": N}``
generates N words, one per ``--token-delay``, and answers them as JSON. Its ``/metrics`` carries the
families that ``--server`` (vllm, sglang, ... : tests/support/fakes/app_servers/server_metrics.yml) really exposes, in a
prometheus_client registry served by prometheus_client's own ``make_wsgi_app``: the Accept header is
negotiated as vLLM and SGLang negotiate it, so Prometheus 2.x stores ``vllm:generation_tokens_total``
as ``vllm_generation_tokens_total`` and Prometheus 3.x keeps the colon. The KV-cache gauge reads the
share of generation slots in use.

    python tests/support/fakes/app_servers/token_server.py --listen 127.0.0.1:8000 [--server sglang] [--max-concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from server_metrics import Request, ServerMetrics, servers

WORDS = ("the", "gpu", "is", "busy", "but", "are", "its", "sms", "working", "today")
MAX_TOKENS = 4096
MAX_BODY_BYTES = 1 << 20


class Generator:
    """Generates words; at most ``max_concurrency`` requests at a time, the rest wait."""

    def __init__(self, metrics: ServerMetrics, max_concurrency: int, token_delay: float) -> None:
        self.metrics = metrics
        self.slots = threading.BoundedSemaphore(max_concurrency)
        self.max_concurrency = max_concurrency
        self.token_delay = token_delay
        self.in_use = 0
        self.lock = threading.Lock()

    def _hold(self, delta: int) -> None:
        with self.lock:
            self.in_use += delta
            self.metrics.set("kv_cache", self.in_use / self.max_concurrency)

    def generate(self, prompt: str, max_tokens: int) -> str:
        request = Request(self.metrics, len(prompt.split()), time.monotonic)
        with self.slots:
            request.start()
            self._hold(1)
            try:
                words = []
                for index in range(max_tokens):
                    if self.token_delay:
                        time.sleep(self.token_delay)
                    words.append(WORDS[(len(prompt) + index) % len(WORDS)])
                    request.token()
                request.finish()
                return " ".join(words)
            finally:
                self._hold(-1)


Respond = Callable[[str, list[tuple[str, str]]], Any]


def make_app(generator: Generator, metrics: ServerMetrics) -> Callable[[dict[str, Any], Respond], Iterable[bytes]]:
    """The WSGI app: /metrics is prometheus_client's own app, the rest is the completions API."""
    metrics_app = metrics.wsgi_app()

    def answer(respond: Respond, status: str, body: bytes, content_type: str) -> list[bytes]:
        respond(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]

    def error(respond: Respond, status: str, message: str) -> list[bytes]:
        return answer(respond, status, json.dumps({"error": message}).encode(), "application/json")

    def completions(environ: dict[str, Any], respond: Respond) -> list[bytes]:
        try:
            length = int(environ.get("CONTENT_LENGTH") or "0")
            if not 0 < length <= MAX_BODY_BYTES:
                raise ValueError(f"body must be 1 to {MAX_BODY_BYTES} bytes, got {length}")
            request = json.loads(environ["wsgi.input"].read(length))
            prompt = request.get("prompt", "")
            max_tokens = request.get("max_tokens", 16)
            if not isinstance(prompt, str):
                raise ValueError("'prompt' must be a string")
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS:
                raise ValueError(f"'max_tokens' must be an integer from 1 to {MAX_TOKENS}, got {max_tokens!r}")
        except (ValueError, AttributeError) as problem:
            return error(respond, "400 Bad Request", str(problem))
        text = generator.generate(prompt, max_tokens)
        body = {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "length"}], "usage": {"completion_tokens": max_tokens}}
        return answer(respond, "200 OK", json.dumps(body).encode(), "application/json")

    def app(environ: dict[str, Any], respond: Respond) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
        if method == "GET" and path == "/metrics":
            result: Iterable[bytes] = metrics_app(environ, respond)
            return result
        if method == "GET" and path == "/health":
            return answer(respond, "200 OK", b"ok\n", "text/plain")
        if method == "POST" and path == "/v1/completions":
            return completions(environ, respond)
        return error(respond, "404 Not Found", f"no such path {path!r}: try POST /v1/completions or GET /metrics")

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass


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
    parser.add_argument("--server", choices=sorted(servers()), default="vllm", help="whose metrics to expose (default vllm)")
    args = parser.parse_args(argv)
    metrics = ServerMetrics(args.server)
    app = make_app(Generator(metrics, args.max_concurrency, args.token_delay), metrics)
    server = make_server(args.listen[0], args.listen[1], app, server_class=_Server, handler_class=_QuietHandler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"token_server listening on {args.listen[0]}:{server.server_address[1]}", flush=True)
    server.serve_forever()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
