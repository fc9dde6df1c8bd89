"""Fetching an app's metrics endpoint, bounded in time and size, and reading its counters.

The text is parsed with prometheus-client's parser. That parser (0.26) names a counter family
without its ``_total`` suffix and renames a bare counter sample ``foo`` to ``foo_total``, so a
configured name matches a sample by its own name, or, for a counter family, by the family's name
with or without ``_total``. Names with colons (``vllm:generation_tokens_total``) parse as they are.
"""

from __future__ import annotations

import http.client
import math
import time
import urllib.parse

from prometheus_client.parser import text_string_to_metric_families

from exporter import __version__

ACCEPT = "text/plain; version=0.0.4"
CHUNK_BYTES = 64 * 1024

Series = dict[tuple[tuple[str, str], ...], float]  # sorted label pairs -> value


class ScrapeError(Exception):
    """A scrape that gave no usable counter; the message says why, for the log."""


def fetch(url: str, timeout: float, max_bytes: int) -> str:
    """GET ``url``: the body as text. The whole exchange must finish within ``timeout`` seconds."""
    parts = urllib.parse.urlsplit(url)
    if not parts.hostname:
        raise ScrapeError(f"{url} names no host")
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    deadline = time.monotonic() + timeout
    connection = connection_class(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.connect()
        sock = connection.sock  # kept: the response reads through it even after the connection hands it over
        connection.request("GET", target, headers={"Accept": ACCEPT, "User-Agent": f"gpu-efficiency-exporter/{__version__}"})
        sock.settimeout(_left(deadline, timeout))
        response = connection.getresponse()
        if response.status != 200:
            raise ScrapeError(f"HTTP status {response.status} {response.reason}")
        length = response.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise ScrapeError(f"response of {int(length)} bytes is over max_response_bytes ({max_bytes})")
        chunks, size = [], 0
        while True:
            sock.settimeout(_left(deadline, timeout))
            chunk = response.read1(CHUNK_BYTES)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise ScrapeError(f"response is over max_response_bytes ({max_bytes})")
            chunks.append(chunk)
    except TimeoutError:
        raise ScrapeError(f"no complete answer within scrape_timeout ({timeout:g}s)") from None
    except ConnectionRefusedError:
        raise ScrapeError("connection refused (is the app running and listening there?)") from None
    except (OSError, http.client.HTTPException) as error:
        raise ScrapeError(f"{type(error).__name__}: {error}") from None
    finally:
        connection.close()
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScrapeError(f"response is not UTF-8 text (byte {error.start})") from None


def _left(deadline: float, timeout: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return min(left, timeout)


def read_counter(text: str, name: str, labels: dict[str, str]) -> Series:
    """The series of counter ``name`` whose labels include ``labels``; ScrapeError where there are none."""
    found: Series = {}
    families = 0
    try:
        for family in text_string_to_metric_families(text):
            families += 1
            counter_family = family.type == "counter" and name in (family.name, family.name + "_total")
            for sample in family.samples:
                if sample.name != name and not (counter_family and sample.name == family.name + "_total"):
                    continue
                if any(sample.labels.get(key) != value for key, value in labels.items()):
                    continue
                if not math.isfinite(sample.value) or sample.value < 0:
                    raise ScrapeError(f"{name} has the value {sample.value}, not a counter's")
                found[tuple(sorted(sample.labels.items()))] = float(sample.value)
    except (ValueError, IndexError, KeyError, TypeError) as error:
        raise ScrapeError(f"not Prometheus text format: {error}"[:300]) from None
    if not found:
        matching = "".join(f',{key}="{value}"' for key, value in labels.items())
        selector = f"{name}{{{matching[1:]}}}" if labels else name
        raise ScrapeError(f"no series {selector} among the {families} metric families of the response")
    return found
