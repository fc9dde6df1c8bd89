"""Instant queries against a Prometheus HTTP API (``/api/v1/query``), for ``report``. The answer is
bytes from outside until checked: each exchange has a deadline over the whole of it (a server that
trickles is cut off), the body is bounded, and only the documented shape is accepted (a vector of
samples whose labels are strings and whose values are finite numbers), with at most MAX_SERIES
series of at most MAX_LABELS labels each. Anything else is an error naming the URL, the query and
what was wrong."""

from __future__ import annotations

import http.client
import json
import math
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpueff.config.values import shown
from gpueff.deadline import exchange_deadline
from gpueff.logs import quote
from gpueff.untrusted import decode

MAX_BYTES = 64 * 1024 * 1024  # a week of a 10,000-GPU fleet's holders by state is ~30 MB of JSON
MAX_SERIES = 200_000
MAX_LABELS = 32
MAX_LABEL_CHARS = 1024
CHUNK_BYTES = 256 * 1024
ERROR_CHARS = 300  # of an error text the server sends, quoted


def said(text: object, limit: int = ERROR_CHARS) -> str:
    """Text the server sent, for a message: at most ``limit`` characters, quoted, every character
    that is not printable escaped (it reaches a terminal)."""
    return quote(str(text)[:limit], always=True)


class PrometheusError(Exception):
    """A query failed; the message says where, which query and what was wrong."""


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Mapping[str, str]
    value: float


def api_url(url: str) -> str:
    """The base URL the user typed (``http://prometheus:9090``, or a path prefix behind a proxy),
    checked: http or https, a host, no credentials (they would be sent in clear or logged)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise PrometheusError(f"--prometheus {shown(url)}: expected http://host:port or https://host[/prefix] (no query, no fragment)")
    if parts.username or parts.password:
        raise PrometheusError(f"--prometheus {shown(url)}: credentials in the URL are not sent; put Prometheus behind no auth for the report, or a proxy that adds it")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


class Prometheus:
    def __init__(self, url: str, timeout: float) -> None:
        self.url = api_url(url)
        self.timeout = timeout
        self.warnings: list[str] = []  # what the server warned about, bounded, for the report's footer

    def query(self, expr: str, at: float) -> list[Sample]:
        """The vector ``expr`` evaluates to at Unix time ``at``."""
        body = self._post("/api/v1/query", {"query": expr, "time": f"{at:.3f}"}, expr)
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError) as error:  # RecursionError: arrays nested thousands deep
            raise PrometheusError(f"{self.url}: the answer to {shown(expr)} is not JSON ({type(error).__name__}: {str(error)[:200]})") from None
        return self._vector(answer, expr)

    def _post(self, path: str, form: dict[str, str], expr: str) -> bytes:
        parts = urllib.parse.urlsplit(self.url)
        connection = (
            http.client.HTTPSConnection(parts.netloc, timeout=self.timeout, context=ssl.create_default_context())
            if parts.scheme == "https"
            else http.client.HTTPConnection(parts.netloc, timeout=self.timeout)
        )
        data = urllib.parse.urlencode(form).encode()
        try:
            with exchange_deadline(connection, self.timeout) as expired:
                try:
                    connection.request("POST", parts.path + path, body=data, headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"})
                    response = connection.getresponse()
                    chunks, received = [], 0
                    while chunk := response.read(CHUNK_BYTES):
                        received += len(chunk)
                        if received > MAX_BYTES:
                            raise PrometheusError(f"{self.url}: the answer to {shown(expr)} is over {MAX_BYTES // (1024 * 1024)} MiB: narrow the range or the fleet")
                        chunks.append(chunk)
                    if expired.is_set():
                        raise TimeoutError
                except (OSError, http.client.HTTPException) as error:
                    if expired.is_set():
                        raise PrometheusError(f"{self.url}: no whole answer to {shown(expr)} within {self.timeout:g} s (--timeout)") from None
                    raise PrometheusError(f"cannot reach Prometheus at {self.url}: {error}") from None
        finally:
            connection.close()
        body = b"".join(chunks)
        if response.status not in (200, 400, 422, 503):  # the API's own errors come as JSON with these
            hint = ": the report does not follow redirects, give it the final URL" if 300 <= response.status < 400 else ""
            raise PrometheusError(f"{self.url} answered HTTP {response.status} {said(response.reason, 100)} to {shown(expr)}{hint}: {said(decode(body, ERROR_CHARS))}")
        return body

    def _vector(self, answer: Any, expr: str) -> list[Sample]:
        where = f"{self.url}: the answer to {shown(expr)}"
        if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
            raise PrometheusError(f"{where} is not a Prometheus API answer (no status success or error)")
        for warning in answer.get("warnings", ())[:8] if isinstance(answer.get("warnings"), list) else ():
            self.warnings.append(said(warning))
        if answer["status"] == "error":
            raise PrometheusError(f"{where}: {said(answer.get('errorType', ''), 64)}: {said(answer.get('error', ''))}")
        data = answer.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
            raise PrometheusError(f"{where} is not a vector (data.resultType {shown(data.get('resultType') if isinstance(data, dict) else data)})")
        result = data["result"]
        if len(result) > MAX_SERIES:
            raise PrometheusError(f"{where} has {len(result)} series, over {MAX_SERIES}: narrow the range or the fleet")
        return [self._sample(item, where) for item in result]

    @staticmethod
    def _sample(item: Any, where: str) -> Sample:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict) or not isinstance(item.get("value"), list) or len(item["value"]) != 2:
            raise PrometheusError(f"{where} holds a sample that is not {{metric: {{...}}, value: [time, \"number\"]}}: {shown(item)}")
        labels = item["metric"]
        if len(labels) > MAX_LABELS or not all(isinstance(key, str) and isinstance(value, str) and len(key) <= MAX_LABEL_CHARS and len(value) <= MAX_LABEL_CHARS for key, value in labels.items()):
            raise PrometheusError(f"{where} holds labels that are not at most {MAX_LABELS} strings of at most {MAX_LABEL_CHARS} characters: {shown(labels)}")
        text = item["value"][1]
        try:
            value = float(text) if isinstance(text, str) and len(text) <= 64 else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise PrometheusError(f"{where} holds a value that is not a finite number of at least 0: {shown(text)}")
        return Sample(labels, value)
